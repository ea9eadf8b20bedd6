"""Producer write bounds (issue 30, C): stores whose rows use `%` or `//`, are loaded inside their
loop, are stepped by hand in a while loop, or whose extreme rows sit at mixed corners of a loop
nest (with and without a mask that changes with the loops), a loop whose last iterations are
masked off, and a return from inside such a loop. Each kernel (tests/kernels/producer_bounds.py)
must be right under reduce_scatter and all_reduce: a chunk announced before its last store leaves
with the rows it had then (the gloo backend takes them at the flag, as a copy engine does), so an
early announcement gives a wrong result. Three launches with new data (a new wrap, a new
permutation) each. On the slow reordering link with poisoned buffers, checked and unchecked (the
checker catches a store into an announced chunk on its own; unchecked, only the numbers can): world
2 runs every kernel with both patterns, checked and unchecked; world 3 every kernel once, the
patterns and checked mode alternating over the kernels (a world-3 launch costs about 1.5 world-2
ones on two cores), so that world 3 runs every pattern both checked and unchecked. On an instant link
without poisoning, unchecked: world 2, every kernel with both patterns (world 3 on it would repeat
what world 2 on it and world 3 on the slow link cover)."""
from __future__ import annotations

import pytest

from tests.oracles import worst
from tests.world import producer_bounds_workers as workers
from tests.world.harness import INSTANT, SLOW, spawn

PATTERNS = ["reduce_scatter", "all_reduce"]


def _cases(world: int, checked: tuple[bool, ...]) -> list[tuple[str, str, bool]]:
    """World 2: every kernel with both patterns and each of `checked`; world 3: every kernel once, the
    patterns alternating over the kernels and, where `checked` has both, checked mode over pairs of them."""
    if world == 2:
        return [(k, p, c) for k in workers.ALL for p in PATTERNS for c in checked]
    return [(k, PATTERNS[i % 2], checked[i // 2 % len(checked)]) for i, k in enumerate(workers.ALL)]


SLOW_CASES = {world: _cases(world, (False, True)) for world in (2, 3)}
INSTANT_CASES = _cases(2, (False,))


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
    _check(spawn(workers.run_bounds_cases, world, SLOW_CASES[world], True, link=SLOW, checked=False), SLOW_CASES[world])


@pytest.mark.world
@pytest.mark.parametrize("world", [2])
def test_every_store_bound_is_right_on_an_instant_link(world):
    _check(spawn(workers.run_bounds_cases, world, INSTANT_CASES, False, link=INSTANT, checked=False), INSTANT_CASES)


def test_every_case_is_in_the_matrix():
    assert set(workers.ALL) == set(workers.SHAPES)
    both = (False, True)
    assert set(SLOW_CASES[2]) == {(k, p, c) for k in workers.ALL for p in PATTERNS for c in both}
    assert set(INSTANT_CASES) == {(k, p, False) for k in workers.ALL for p in PATTERNS}
    # World 3: every kernel, and every (pattern, checked) pair.
    assert sorted(k for k, _, _ in SLOW_CASES[3]) == sorted(workers.ALL)
    assert {(p, c) for _, p, c in SLOW_CASES[3]} == {(p, c) for p in PATTERNS for c in both}
