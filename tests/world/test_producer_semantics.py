"""Producers run as their reference does (issue 10, part B): the kernel sees a partial that starts as
the user's C (all_reduce) or as zeros (reduce_scatter), so split-K atomics, grids that leave elements
unwritten, `C += A @ B` epilogues, tiles that return before their store and stores (or atomics) whose
rows come from loaded data all give what `fused.reference` gives, and what a torch model of the kernel gives.
Worlds 2-4, two launches each with new data (producer_workers._variant: every kernel meets each data layout), a slow jittery link, NaN-poisoned outputs: every
kernel with both patterns at world 2, and at one of worlds 3 and 4 with one pattern, the patterns
alternating over each world's kernels (a world-3 launch costs about 1.5 world-2 ones on two cores,
a world-4 one twice): every (kernel, pattern), (kernel, world) and (pattern, world) pair runs."""
from __future__ import annotations

import pytest

from tests.world import producer_workers, shared
from tests.oracles import worst

ALL = ["splitk_atomic", "partial_grid", "accumulate", "lower_triangular", "rows_by_index", "skip_by_flag", "scatter_add_rows"]
WORLD4 = ["accumulate", "lower_triangular", "scatter_add_rows"]
KERNELS = {2: ALL, 3: [k for k in ALL if k not in WORLD4], 4: WORLD4}
PATTERNS = ["reduce_scatter", "all_reduce"]




def world_cases(world: int) -> list[tuple[str, str]]:
    """(kernel, pattern) pairs world `world` runs: all of them at world 2, one pattern a kernel beyond."""
    if world == 2:
        return [(k, p) for k in KERNELS[world] for p in PATTERNS]
    return [(k, PATTERNS[i % len(PATTERNS)]) for i, k in enumerate(KERNELS[world])]


for _size in KERNELS:  # jobs of the shared worlds (tests/world/shared.py: checked mode, the slow link)
    shared.register(__name__, _size, {"cases": (f"{producer_workers.__name__}:run_producer_cases", (world_cases(_size),))})


def _world(world: int) -> list:
    return shared.results(__name__, world, "cases")


def test_every_kernel_runs_beyond_world_2():
    assert sorted(KERNELS[3] + KERNELS[4]) == sorted(ALL)
    assert set(world_cases(2)) == {(k, p) for k in ALL for p in PATTERNS}
    for world in (3, 4):
        assert {p for _, p in world_cases(world)} == set(PATTERNS), world
    # Two launches a case: every kernel still meets each data layout, and each layout both patterns.
    layouts = {(k, p, producer_workers._variant(w, p, launch)) for w in KERNELS for k, p in world_cases(w)
               for launch in range(producer_workers.LAUNCHES)}
    assert {(k, v) for k, _, v in layouts} == {(k, v) for k in ALL for v in range(producer_workers.VARIANTS)}
    assert {(p, v) for _, p, v in layouts} == {(p, v) for p in PATTERNS for v in range(producer_workers.VARIANTS)}


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3, 4])
def test_fused_producers_equal_their_reference_and_torch(world):
    results = _world(world)
    for rank, cases in enumerate(results):
        assert [(c["name"], c["pattern"]) for c in cases] == world_cases(world), \
            f"rank {rank}: {cases[-1].get('error')}\n{cases[-1].get('tb', '')}"
        for c in cases:
            where = f"rank {rank} {c['name']} {c['pattern']}"
            assert len(c["fused"]) == producer_workers.LAUNCHES, where
            assert c["checked"], f"{where}: the read checker was off"  # every store verified (harness checked=True)
            assert worst(c["reference"]) <= producer_workers.TOL, f"{where}: reference {c['reference']}"
            assert worst(c["fused"]) <= producer_workers.TOL, f"{where}: fused {c['fused']}"


@pytest.mark.world
def test_chunks_are_announced_while_the_kernel_still_runs():
    """The precondition of the test above: chunks left mid-kernel, so a chunk announced too early
    (a tile counted against the wrong chunk) would have sent an incomplete partial."""
    for name in ALL:
        early = [n for cases in _world(2) for c in cases if c["name"] == name for n in c["early"]]
        assert any(early), f"{name}: no chunk was announced before the kernel ended ({early})"
