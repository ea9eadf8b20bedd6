"""Hypothesis settings of the fuzzers: a bounded, deterministic CI budget and a `long` profile.

    make test                                     the CI profile: derandomized, no example database,
                                                  a fixed number of examples per fuzzer (~60 s in all)
    SYNCOPY_FUZZ=long pytest tests/fuzz           the long profile: random seeds, many more examples
    pytest tests/fuzz --hypothesis-profile long   the same, chosen with hypothesis' own pytest option

Each fuzzer states its two budgets (`fuzz(ci=..., long=...)`); the profile picks one. The CI profile
is derandomized (the same examples on every run, whatever ran before) and keeps no database, so a
CI failure is reproduced by running the same test again; the long profile prints the failing
example's seed (`@reproduce_failure`) to pin as an explicit `@example`.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("syncopy-ci", derandomize=True, database=None, deadline=None, print_blob=False,
                          suppress_health_check=_QUIET)
settings.register_profile("long", derandomize=False, database=None, deadline=None, print_blob=True,
                          suppress_health_check=_QUIET)


def long_run() -> bool:
    """True when the long profile is asked for (env SYNCOPY_FUZZ=long or --hypothesis-profile long)."""
    return os.environ.get("SYNCOPY_FUZZ", "").lower() == "long" or settings.get_current_profile_name() == "long"


def examples(ci: int, long: int) -> int:
    """The example budget of one fuzzer under the active profile."""
    return long if long_run() else ci


def fuzz(ci: int, long: int) -> settings:
    """`@fuzz(ci=N, long=M)`: the active profile's settings with that fuzzer's example budget."""
    return settings(settings.get_profile("long" if long_run() else "syncopy-ci"), max_examples=examples(ci, long))
