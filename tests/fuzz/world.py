"""The one CPU world the world fuzzers share: spawned once per session, it runs every case drawn for
fuzzer (b) (random schedules, worlds 1 to 4, as groups of ranks 0..w-1 of a world of 4) and the
numerics sample of fuzzer (d) (mutated kernels). The cases are drawn in the test process by
derandomized hypothesis runs of their strategies; the ranks loop over them (tests/fuzz/workers.py).
"""
from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from tests.fuzz import workers
from tests.fuzz.mutations import mutated_cases
from tests.fuzz.plans import schedules
from tests.fuzz.profiles import examples, fuzz, long_run
from tests.world.harness import spawn
from tests.world.workers import KERNEL_TENSOR, once

WORLDS = (1, 2, 3, 4)
KERNELS = ("gemm2d", "rms")
ROWS_OVER = {"gemm2d": 20, "rms": 5}  # rows per shard: at least one per unit, up to this many more

# Cases a failure once found, run with the drawn ones: {"world": w, "kernel": ..., "rows": ..., "schedule": {...}}.
PINNED: list[dict] = []


@st.composite
def schedule_cases(draw, world: int) -> dict:
    kernel = draw(st.sampled_from(KERNELS))
    s, _ = draw(schedules(patterns=["all_gather"], world=world, tensor=KERNEL_TENSOR[kernel]))
    units = s.units_per_rank or s.chunks_per_rank
    rows = draw(st.integers(units, units + ROWS_OVER[kernel]))
    return {"world": world, "kernel": kernel, "rows": rows, "schedule": s.model_dump(mode="json", by_alias=True, exclude_none=True)}


@st.composite
def mutant_cases(draw) -> dict:
    problem, m, s = draw(mutated_cases())
    world = draw(st.integers(2, 3))
    rows = draw(st.integers(s.chunks_per_rank, s.chunks_per_rank + ROWS_OVER[problem]))
    return {"world": world, "kernel": m.kernel, "problem": problem, "rows": rows, "text": m.text, "applied": list(m.applied),
            "schedule": s.model_dump(mode="json", exclude_none=True)}


def collect(strategy, ci: int, long: int, salt: int) -> list[dict]:
    """`ci` (or `long`) distinct values of `strategy`, drawn as one list by a short hypothesis run
    seeded with `salt` in the CI profile (deterministic, different for each world), randomly in the
    long one. The last list drawn is kept: hypothesis begins with the simplest values, and a list of
    independent draws is more varied than the tail of a run (which tries values near earlier ones)."""
    n = examples(ci, long)
    lists: list[list[dict]] = []

    def keep(cases):
        lists.append([c for k, c in enumerate(cases) if c not in cases[:k]])

    run = settings(fuzz(ci=3, long=3), derandomize=False)(given(st.lists(strategy, min_size=n, max_size=n))(keep))
    (run if long_run() else seed(salt)(run))()
    return lists[-1]


def _with_files(cases: list[dict]) -> list[dict]:
    """Mutated kernels written to files the ranks import (Triton reads a kernel's source from its file)."""
    folder = Path(tempfile.mkdtemp(prefix="syncopy-fuzz-"))
    out = []
    for n, case in enumerate(cases):
        module = f"fuzz_mutant_{n}"
        path = folder / f"{module}.py"
        path.write_text(case["text"])
        out.append({**case, "file": str(path), "module": module})
    return out


def all_cases() -> list[dict]:
    """Every case of the shared world, with an id; largest world first (see workers.run_cases)."""
    drawn = PINNED + [c for w in WORLDS for c in collect(schedule_cases(w), ci=3, long=40, salt=w)]
    drawn += _with_files(collect(mutant_cases(), ci=3, long=40, salt=0))
    counter = itertools.count()
    cases = [{**c, "id": f"{'mutant' if 'text' in c else 'schedule'}-w{c['world']}-{next(counter)}"} for c in drawn]
    return sorted(cases, key=lambda c: -c["world"])


@once
def results() -> tuple[list[dict], list[list[tuple]]]:
    """(the cases, each rank's [(case id, worst error, problem text, raised a SyncopyError)])."""
    cases = all_cases()
    world = max(c["world"] for c in cases)
    return cases, spawn(workers.run_cases, world, cases, timeout_s=300 + 20 * len(cases))


def failures(select) -> tuple[int, list[str]]:
    """(cases selected, what went wrong in them: 'rank r: id (case): why'). A mutated kernel may be
    refused with a KernelError (the transform-only fuzzer checks that the refusal is one located line)."""
    from tests.world.workers import TOL

    cases, per_rank = results()
    by_id = {c["id"]: c for c in cases if select(c)}
    bad = []
    for r, res in enumerate(per_rank):
        for cid, err, why, rejected in res:
            if cid in by_id and not err <= TOL["float32"] and not (rejected and "text" in by_id[cid]):
                c = by_id[cid]
                bad.append(f"rank {r}: {cid} ({c['kernel']}, {c['rows']} rows, {c.get('applied', '')} {c['schedule']}): {why}")
    return len(by_id), bad
