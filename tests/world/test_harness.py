"""The CPU-world harness (tests/world/harness.py): ranks fork from the preloaded forkserver, yet see
what a spawned rank saw: the test process's environment at spawn time, Triton's interpreter on, and
no libcst imported before the rank's own code runs (tests/world/test_load.py relies on that)."""
from __future__ import annotations

import os

from tests.world.harness import spawn


def _what_the_rank_sees(rank: int, world: int, name: str) -> dict:
    import sys

    return {"value": os.environ.get(name), "interpret": os.environ.get("TRITON_INTERPRET"), "libcst": "libcst" in sys.modules,
            "parent": os.getppid()}


def test_a_forked_rank_has_the_environment_of_the_spawn_and_no_frontend_imported(monkeypatch):
    monkeypatch.setenv("SYNCOPY_HARNESS_MARK", "set after collection")
    (r,) = spawn(_what_the_rank_sees, 1, "SYNCOPY_HARNESS_MARK")
    assert r["parent"] != os.getpid(), "the rank was not forked from the preloaded server"
    assert (r["value"], r["interpret"], r["libcst"]) == ("set after collection", "1", False), r
