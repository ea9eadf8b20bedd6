"""Issue 30 part B on CPU worlds: kernels that read several communicated tensors (`tensor: [A, B]`)
are right whatever the order of the list. Every kernel of tests/kernels/listed.py (SwiGLU forward
with pointers moved to its rows and with plain offsets, dequantisation whose per-row scale is read
before its data, layer norm with a residual input, layer norm with a row scale and a residual: three
listed tensors) with every order of its list, three launches with new data each: on the harness's
slow reordering link with NaN-poisoned receive buffers in checked mode (worlds 2 and 3), and on an
instant link without poisoning, unchecked (world 2: world 3 on it would repeat what world 2 on it and
world 3 on the slow link cover). Each launch equals the torch reference exactly enough
(1e-4) or the case is refused in one located line: none is refused. Before the fix, every order whose
first listed tensor is not the one read first read poison (the waits measured rows from the first
listed tensor's base pointer) and three listed tensors failed with NameError: syncopy_base.
"""
from __future__ import annotations

import pytest

from tests.world import listed_workers as lw
from tests.world import shared

WORLDS = (2, 3)
LINKS = {"slow": False, "instant": True}
RUNS = [(2, "slow"), (2, "instant"), (3, "slow")]  # (world, link): the instant link on world 2 only
for _world in WORLDS:
    shared.register(__name__, _world, {f"{kernel} {link}": (f"{lw.__name__}:run_orders", (kernel, LINKS[link]))
                                       for kernel in lw.CASES for w, link in RUNS if w == _world})


@pytest.mark.world
@pytest.mark.parametrize("kernel", list(lw.CASES))
@pytest.mark.parametrize("world, link", RUNS, ids=[f"{w}-{link}" for w, link in RUNS])
def test_every_order_of_the_list_is_right(world, kernel, link):
    per_rank = shared.results(__name__, world, f"{kernel} {link}")
    for rank, r in enumerate(per_rank):
        assert set(r["errors"]) == {", ".join(o) for o in lw.orders(kernel)}
        for order, errors in r["errors"].items():
            assert len(errors) == lw.LAUNCHES and all(isinstance(e, float) and e <= 1e-4 for e in errors), \
                (world, rank, order, errors)


@pytest.mark.world
@pytest.mark.parametrize("kernel", list(lw.CASES))
@pytest.mark.parametrize("world", WORLDS)
def test_every_order_runs_the_same_tiles_in_the_same_order(world, kernel):
    """The tile order does not depend on the list: each tile waits for the chunks of its own rows (at
    most the three that four rows can straddle; never every chunk, which would leave nothing to
    overlap) and the tiles run in the same arrival order, a tile of this rank's own rows first where
    there is one."""
    for rank, r in enumerate(shared.results(__name__, world, f"{kernel} slow")):
        tiles = list(r["tiles"].values())
        assert len(tiles) == len(lw.orders(kernel)) and all(t == tiles[0] for t in tiles), (world, rank, r["tiles"])
        ranges, order = tiles[0]
        assert all(0 <= lo <= hi <= lo + 2 and hi - lo + 1 < 2 * world for lo, hi in ranges), ranges
        own = {rank * 2, rank * 2 + 1}  # this rank's chunks (2 per rank)
        if any(set(rg) <= own for rg in ranges):  # (with 4 rows a tile, a rank of 5 may have none)
            assert set(ranges[order[0]]) <= own, (ranges, order)


shared.register(__name__, 2, {"unwaited": (f"{lw.__name__}:run_unwaited", ())})


@pytest.mark.world
def test_checked_mode_sees_a_second_listed_tensor_read_before_it_arrived():
    """Checked mode checks every listed tensor, not only the first: with the waits of S (listed second,
    read first) dropped by a mutant of the passes, every launch raises SyncopyReadError naming S and
    the line that reads it."""
    import re

    for rank, r in enumerate(shared.results(__name__, 2, "unwaited")):
        assert r["unwaited"], ("the mutant left a wait for S", r)
        line = next(i for i, text in enumerate(open(r["file"]).read().splitlines(), 1) if "s = tl.load(S + r" in text)
        for got in r["results"]:
            assert re.fullmatch(rf"SyncopyReadError: {re.escape(r['file'])}:{line}: rank {rank} read chunk \(\d, \d\) of S "
                                r"before it arrived \(epoch \d+\); .*", got), (rank, got)


shared.register(__name__, 2, {"pair unwaited": (f"{lw.__name__}:run_pair_unwaited", ())})


@pytest.mark.world
def test_checked_mode_checks_each_listed_tensor_inside_one_helper_handed_both():
    """A helper handed both A and B (swiglu_pair_b_first's _mul_silu, which reads B first) is called
    through one checked copy that checks each from its own base and block: with the waits dropped by a
    mutant of the passes, every launch raises SyncopyReadError naming B and the helper's line that reads
    it (checked mode refused such a helper before). Unmutated, swiglu_pair is right in checked mode in
    every order of its list (test_every_order_of_the_list_is_right)."""
    import re

    for rank, r in enumerate(shared.results(__name__, 2, "pair unwaited")):
        assert r["unwaited"], ("the mutant left a wait", r)
        line = next(i for i, text in enumerate(open(r["file"]).read().splitlines(), 1)
                    if "b = tl.load(Q + offs, mask=m, other=0.0)" in text)
        for got in r["results"]:
            assert re.fullmatch(rf"SyncopyReadError: {re.escape(r['file'])}:{line}: rank {rank} read chunk \(\d, \d\) of B "
                                r"before it arrived \(epoch \d+\); .*", got), (rank, got)


shared.register(__name__, 2, {"past the rows": (f"{lw.__name__}:run_past_the_rows", ())})


@pytest.mark.world
def test_a_grid_past_the_gathered_rows_is_refused_naming_the_tensor_read_first():
    for got in shared.results(__name__, 2, "past the rows"):
        assert got == ["LaunchError: the grid reads rows up to 11 of 'A' but the gathered 'A' has 10 rows (5 per rank x 2 "
                       "ranks); pass M = 10, the gathered rows"], got
