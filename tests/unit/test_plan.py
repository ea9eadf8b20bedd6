"""Chunk geometry and all-gather transfer plans, checked exhaustively on small worlds.

A plan is per rank; the checks build every rank's plan and match them against each other: every
remote chunk reaches every rank exactly once, each send has its receive on the peer, relays forward
only what they received, and the whole world can run to completion (no circular wait).
"""
from __future__ import annotations

import itertools
from collections import Counter

import pytest

from syncopy.errors import LaunchError
from syncopy.runtime.state.plan import all_gather, tile_order
from syncopy.schedule import Schedule, chunk_bounds, chunk_of_row

# --- chunk geometry ----------------------------------------------------------------------------

SMALL = [(s, c) for s in range(1, 41) for c in range(1, s + 1)]
RAGGED = [(4091, c) for c in (1, 2, 3, 4, 7, 8)] + [(4096, 3), (1000, 999), (17, 17)]


@pytest.mark.parametrize(("rows", "chunks"), [pytest.param(SMALL, None, id="all-S<=40-C<=S"), *[pytest.param([p], None, id=f"S{p[0]}-C{p[1]}") for p in RAGGED]])
def test_chunk_bounds_cover_the_shard_with_nonempty_near_equal_chunks(rows, chunks):
    for s, c in rows:
        b = chunk_bounds(s, c)
        assert len(b) == c
        assert b[0][0] == 0 and b[-1][1] == s
        assert all(lo < hi for lo, hi in b), (s, c)
        assert all(b[i][1] == b[i + 1][0] for i in range(c - 1)), (s, c)
        sizes = [hi - lo for lo, hi in b]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == s


def test_chunk_of_row_agrees_with_chunk_bounds_for_every_row():
    for s, c in SMALL + RAGGED:
        b = chunk_bounds(s, c)
        for i, (lo, hi) in enumerate(b):
            for row in range(lo, hi):
                assert chunk_of_row(row, s, c) == i, (s, c, row)


def test_ragged_shard_last_chunk_is_not_larger():
    # 4091 rows in 4 chunks: sizes 1022 or 1023, never an empty or oversized tail.
    assert [hi - lo for lo, hi in chunk_bounds(4091, 4)] == [1022, 1023, 1023, 1023]


# --- all-gather plans --------------------------------------------------------------------------

def _orders(world: int) -> list:
    named = ["ring", "local_first", "bidirectional_ring"]
    perms = [list(p) for p in itertools.permutations(range(1, world))]
    if len(perms) > 6:
        perms = perms[:3] + perms[-3:]
    return named + perms


def _plans(order, world: int, chunks: int, rows: int = 10):
    s = Schedule(pattern="all_gather", tensor="A", chunks_per_rank=chunks, order=order)
    return [all_gather(s, r, world, rows) for r in range(world)]


def _own(rank: int, c: int) -> set[int]:
    return {rank * c + i for i in range(c)}


def _cases(mark_known_bugs: bool) -> list:
    return [
        pytest.param(order, w, c, id=f"W{w}-{order if isinstance(order, str) else 'x' + ''.join(map(str, order))}-C{c}",
                     marks=[])
        for w in range(1, 6)
        for order in _orders(w)
        for c in (1, 2, 3)
    ]


CASES = _cases(mark_known_bugs=False)


@pytest.mark.parametrize(("order", "world", "chunks"), _cases(mark_known_bugs=True))
def test_plans_of_all_ranks_fit_together(order, world, chunks):
    plans = _plans(order, world, chunks)
    every = set(range(world * chunks))
    sent, received = Counter(), Counter()
    for p in plans:
        remote = every - _own(p.rank, chunks)
        recv_chunks = [n.chunk for n in p.recvs()]
        # every rank receives every remote chunk exactly once, and expects them in `arrival` order
        assert sorted(recv_chunks) == sorted(remote)
        assert sorted(p.arrival) == sorted(remote)
        for n in p.recvs():
            assert n.peer != p.rank
            received[(n.peer, p.rank, n.chunk)] += 1
        for n in p.sends():
            assert n.peer != p.rank
            sent[(p.rank, n.peer, n.chunk)] += 1
            if n.chunk in _own(p.rank, chunks):
                assert n.after == ()
            else:
                # a relay forwards only a chunk it receives itself, after it landed
                assert n.after == (n.chunk,) and n.chunk in recv_chunks
    assert sent == received


@pytest.mark.parametrize(("order", "world", "chunks"), CASES)
def test_the_world_runs_to_completion(order, world, chunks):
    # Fire every send whose dependencies have landed at its sender until nothing changes;
    # a circular wait would leave transfers pending.
    plans = _plans(order, world, chunks)
    have = [set(_own(p.rank, chunks)) for p in plans]
    pending = [(p.rank, n) for p in plans for n in p.sends()]
    while pending:
        ready = [(r, n) for r, n in pending if all(g in have[r] for g in n.after)]
        assert ready, f"deadlock with {len(pending)} sends pending"
        for r, n in ready:
            have[n.peer].add(n.chunk)
            pending.remove((r, n))
    assert all(h == set(range(world * chunks)) for h in have)


def _sources(plan) -> list[int]:
    """Source rank of each remote shard, in arrival order."""
    c = plan.chunks_per_rank
    return [g // c for g in plan.arrival[::c]]


@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_ring_relays_from_the_previous_rank(world):
    for p in _plans("ring", world, 2):
        assert {n.peer for n in p.recvs()} == {(p.rank - 1) % world}
        assert {n.peer for n in p.sends()} == {(p.rank + 1) % world}
        assert _sources(p) == [(p.rank - d) % world for d in range(1, world)]


@pytest.mark.parametrize("world", [3, 4, 5])
def test_bidirectional_ring_interleaves_the_two_directions(world):
    for p in _plans("bidirectional_ring", world, 2):
        src = _sources(p)
        # first the neighbour on one side, then the other, then distance 2 on each side ...
        assert src[:2] == [(p.rank - 1) % world, (p.rank + 1) % world]
        if world >= 4:
            assert src[2] == (p.rank - 2) % world
        assert sorted(src) == sorted(set(range(world)) - {p.rank})
        assert {n.peer for n in p.recvs()} == {(p.rank - 1) % world, (p.rank + 1) % world}


@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_explicit_order_is_the_arrival_order_of_peer_offsets(world):
    for order in _orders(world)[3:]:
        for p in _plans(order, world, 1):
            assert _sources(p) == [(p.rank - d) % world for d in order]
            # direct transfers: every chunk comes straight from its owner
            assert all(n.peer == n.chunk for n in p.recvs())


def test_local_first_is_direct_from_every_peer():
    for p in _plans("local_first", 4, 2):
        assert _sources(p) == [(p.rank - d) % 4 for d in (1, 2, 3)]
        assert all(n.after == () for n in p.sends())


def test_world_of_one_moves_nothing():
    (p,) = _plans("ring", 1, 3)
    assert p.nodes == [] and p.arrival == []
    assert p.position() == {0: 0, 1: 0, 2: 0}


def test_position_and_bounds():
    p = _plans("ring", 3, 2, rows=7)[1]
    assert p.position() == {2: 0, 3: 0, 0: 1, 1: 2, 4: 3, 5: 4}
    assert [p.bounds(g) for g in range(6)] == [(0, 3), (3, 7), (7, 10), (10, 14), (14, 17), (17, 21)]


def test_more_chunks_than_shard_rows_is_a_launch_error():
    s = Schedule(pattern="all_gather", tensor="lhs", dim=0, chunks_per_rank=5)
    with pytest.raises(LaunchError) as info:
        all_gather(s, 0, 2, 4)
    assert str(info.value) == (
        "chunks_per_rank is 5 but each shard of 'lhs' has only 4 rows along dim 0; use chunks_per_rank <= 4"
    )
    assert all_gather(s, 0, 2, 5).chunks_per_rank == 5  # as many chunks as rows is fine


@pytest.mark.parametrize(("order", "world"), [([1, 2], 2), ([1, 2], 4), ([1], 1), ([2, 1, 3], 3)])
def test_explicit_order_for_another_world_size_is_a_launch_error(order, world):
    s = Schedule(pattern="all_gather", tensor="A", order=order)
    with pytest.raises(LaunchError) as info:
        all_gather(s, 0, world, 8)
    msg = str(info.value)
    assert msg.startswith(f"the explicit order {order} lists {len(order)} peer offsets but the world has {world} ranks")
    assert msg.endswith(f"list each of the offsets 1..{world - 1} once")


# --- tile order --------------------------------------------------------------------------------

def test_tile_order_is_a_stable_sort_by_the_last_needed_arrival():
    position = {0: 0, 1: 0, 2: 1, 3: 2, 4: 3}
    ranges = [(2, 3), (0, 1), (4, 4), (0, 0), (1, 2), (3, -1), (3, 4)]
    assert tile_order(ranges, position) == [1, 3, 5, 4, 0, 2, 6]


@pytest.mark.parametrize("order", ["ring", "bidirectional_ring", "local_first", [3, 1, 2]])
@pytest.mark.parametrize("tile", [1, 3, 5, 16])
def test_tile_order_from_real_plans_is_a_permutation_with_local_tiles_first(order, tile):
    world, chunks, rows = 4, 3, 13
    for p in _plans(order, world, chunks, rows):
        total = world * rows
        ranges = []
        for t in range(-(-total // tile)):
            lo, hi = t * tile, min(total, (t + 1) * tile) - 1
            g = [src * chunks + chunk_of_row(r - src * rows, rows, chunks) for r in (lo, hi) for src in [r // rows]]
            ranges.append((g[0], g[1]))
        got = tile_order(ranges, p.position())
        assert sorted(got) == list(range(len(ranges)))
        pos = p.position()
        needs = [max(pos[g] for g in range(lo, hi + 1)) for lo, hi in ranges]
        local = [t for t in range(len(ranges)) if needs[t] == 0]
        assert got[: len(local)] == local
        assert [needs[t] for t in got] == sorted(needs)


@pytest.mark.parametrize("keys", [{"chunks_per_rank": "auto"}, {"order": "auto"}], ids=["chunks", "order"])
def test_an_unresolved_auto_schedule_is_not_lowered(keys):
    sched = Schedule(pattern="all_gather", tensor="A", **keys)
    with pytest.raises(LaunchError) as info:
        all_gather(sched, 0, 2, 8)
    assert str(info.value) == ("chunks_per_rank or order is auto; resolve it with syncopy.planner.auto before lowering "
                               "(syncopy.overlap does at the first launch)")
