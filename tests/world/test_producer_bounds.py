"""Producer write bounds (issue 30, C): stores whose rows use `%` or `//`, are loaded inside their
loop, are stepped by hand in a while loop, or whose extreme rows sit at mixed corners of a loop
nest (with and without a mask that changes with the loops), a loop whose last iterations are
masked off, and a return from inside such a loop. Each kernel (tests/kernels/producer_bounds.py)
must be right under reduce_scatter and all_reduce: a chunk announced before its last store leaves
with the rows it had then (the gloo backend takes them at the flag, as a copy engine does), so an
early announcement gives a wrong result. Three launches with new data (a new wrap, a new
permutation) each; the slow reordering link with poisoned buffers, checked and unchecked (the
checker catches a store into an announced chunk on its own; unchecked, only the numbers can), on
worlds 2 and 3, and an instant link without poisoning, unchecked, on world 2 (world 3 on it would
repeat what world 2 on it and world 3 on the slow link cover)."""
from __future__ import annotations

import pytest

from tests.oracles import worst
from tests.world import producer_bounds_workers as workers
from tests.world.harness import INSTANT, SLOW, spawn

PATTERNS = ["reduce_scatter", "all_reduce"]


def _cases(world: int, checked: tuple[bool, ...]) -> list[tuple[str, str, bool]]:
    """World 2: every kernel with both patterns; world 3: the patterns alternate over the kernels."""
    if world == 2:
        return [(k, p, c) for k in workers.ALL for p in PATTERNS for c in checked]
    return [(k, PATTERNS[i % 2], c) for i, k in enumerate(workers.ALL) for c in checked]


#: Kernels that count every program against every chunk (a helper whose stores are not bounded):
#: their chunks leave only once the last program ends.
NO_OVERLAP = {"helper_wrapped_loop"}


def _check(results: list, cases: list) -> None:
    early: dict[str, int] = {}
    for rank, got in enumerate(results):
        assert [(c["name"], c["pattern"], c["checked"]) for c in got] == cases, \
            f"rank {rank}: {got[-1].get('error')}\n{got[-1].get('tb', '')}"
        for c in got:
            where = f"rank {rank} {c['name']} {c['pattern']} checked={c['checked']}"
            assert len(c["errors"]) == workers.LAUNCHES, where
            assert worst(c["errors"]) <= workers.TOL, f"{where}: errors {c['errors']}"
            early[c["name"]] = early.get(c["name"], 0) + sum(c["early"])
    # The precondition of the check above: chunks left while the kernel still ran, so one announced
    # before its last store would have left incomplete.
    assert all(early[k] for k in early if k not in NO_OVERLAP), early


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3])
def test_every_store_bound_is_right_on_a_slow_reordering_link(world):
    cases = _cases(world, (False, True))
    _check(spawn(workers.run_bounds_cases, world, cases, True, link=SLOW, checked=False), cases)


@pytest.mark.world
@pytest.mark.parametrize("world", [2])
def test_every_store_bound_is_right_on_an_instant_link(world):
    cases = _cases(world, (False,))
    _check(spawn(workers.run_bounds_cases, world, cases, False, link=INSTANT, checked=False), cases)


def test_every_case_is_in_the_matrix():
    assert set(workers.ALL) == set(workers.SHAPES)
    assert {k for k, _, _ in _cases(3, (False,))} == set(workers.ALL)
