"""Reduce plans (reduce_scatter, all_reduce) as data: every send meets a receive, every rank's output
ends up with each rank's partial exactly once, and tiles finish in send order.

A symbolic executor runs all ranks' steps with values as multisets of contributing ranks, so a plan
that drops, doubles or misroutes a partial fails here without a process or a kernel."""
from collections import Counter

import pytest

from syncopy.errors import LaunchError
from syncopy.runtime.state import plan as planning
from syncopy.schedule import Schedule

ORDERS = ["ring", "local_first", "bidirectional_ring", "explicit"]


def _schedule(pattern, chunks, order, world):
    if order == "explicit":
        order = list(range(world - 1, 0, -1)) if world > 1 else []
        if not order:
            order = "local_first"
    return Schedule(pattern=pattern, tensor="C", chunks_per_rank=chunks, order=order)


def _plans(pattern, world, chunks, order, rows=7, size=0, one_shot=False):
    s = _schedule(pattern, chunks, order, world)
    limit = 10**12 if one_shot else 0
    return [planning.reduce(s, r, world, rows, nbytes=1, one_shot_max_bytes=limit, size=size) for r in range(world)]


def _execute(plans):
    """Run every rank's steps to completion; returns each rank's output {chunk: Counter of ranks}."""
    world = len(plans)
    pos = [0] * world
    partial = {r: {g: Counter([r]) for g in range(world * plans[0].chunks_per_rank)} for r in range(world)}
    sums = [dict() for _ in range(world)]
    out = [dict() for _ in range(world)]
    got = [dict() for _ in range(world)]  # chunk -> list of received values
    mailbox = {}  # (src, dst, chunk, final) -> value
    progressed = True
    while progressed:
        progressed = False
        for r, p in enumerate(plans):
            while pos[r] < len(p.steps):
                s = p.steps[pos[r]]
                key_final = s.value == "final"
                if s.kind == "send":
                    if s.value == "partial":
                        v = partial[r][s.chunk]
                    elif s.value == "sum":
                        if s.chunk not in sums[r]:
                            break
                        v = sums[r][s.chunk]
                    else:
                        if s.chunk not in out[r]:
                            break
                        v = out[r][s.chunk]
                    key = (r, s.peer, s.chunk, key_final)
                    assert key not in mailbox, f"rank {r} sends {key} twice in one launch (tags would collide)"
                    mailbox[key] = v
                else:
                    key = (s.peer, r, s.chunk, key_final)
                    if key not in mailbox:
                        break
                    v = mailbox.pop(key)
                    if s.kind == "recv":
                        out[r][s.chunk] = v
                    else:
                        got[r].setdefault(s.chunk, []).append(v)
                        if len(got[r][s.chunk]) == p.contributions(s.chunk):
                            total = partial[r][s.chunk] + sum(got[r][s.chunk], Counter())
                            sums[r][s.chunk] = total
                            if s.chunk in p.reduced_here:
                                out[r][s.chunk] = total
                pos[r] += 1
                progressed = True
    stuck = {r: plans[r].steps[pos[r]] for r in range(world) if pos[r] < len(plans[r].steps)}
    assert not stuck, f"deadlock: {stuck}"
    assert not mailbox, f"messages nobody received: {list(mailbox)}"
    return out


@pytest.mark.parametrize("pattern", ["reduce_scatter", "all_reduce"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("chunks", [1, 3])
def test_every_owned_chunk_is_the_sum_of_every_rank_once(pattern, order, world, chunks):
    plans = _plans(pattern, world, chunks, order)
    if world == 1:
        assert plans[0].steps == [] and plans[0].finish == [0, 1, 2][:chunks]
        return
    out = _execute(plans)
    everyone = Counter(range(world))
    for r, p in enumerate(plans):
        owned = set(p.owned)
        expect = set(range(world * chunks)) if pattern == "all_reduce" else {r * chunks + i for i in range(chunks)}
        assert owned == expect
        assert set(out[r]) >= owned, f"rank {r} never got {sorted(owned - set(out[r]))}"
        for g in owned:
            assert out[r][g] == everyone, f"{order} rank {r} chunk {g}: {out[r][g]}"
        # Tiles finish in send order: a partial never leaves before the chunks sent ahead of it.
        sent = [s.chunk for s in p.steps if s.kind == "send" and s.value == "partial"]
        position = p.position()
        assert all(position[a] <= position[b] for a, b in zip(sent, sent[1:]) if a != b) or order == "bidirectional_ring"
        assert sorted(p.finish) == list(range(world * chunks))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("world", [2, 3, 4])
def test_one_shot_all_reduce_reduces_everything_everywhere(order, world):
    plans = _plans("all_reduce", world, 2, order, one_shot=True)
    assert {p.algorithm for p in plans} == {"one_shot"}
    out = _execute(plans)
    for r, p in enumerate(plans):
        assert set(p.reduced_here) == set(range(world * 2))
        assert all(out[r][g] == Counter(range(world)) for g in range(world * 2))
        assert not [s for s in p.steps if s.value != "partial"]


def test_ring_reduce_scatter_matches_the_drawn_timeline():
    p = _plans("reduce_scatter", 4, 1, "ring")[1]
    steps = [(s.kind, s.chunk, s.peer, s.value) for s in p.steps]
    assert steps == [
        ("send", 0, 2, "partial"),
        ("reduce", 3, 0, "partial"), ("send", 3, 2, "sum"),
        ("reduce", 2, 0, "partial"), ("send", 2, 2, "sum"),
        ("reduce", 1, 0, "partial"),
    ]
    assert p.finish == [0, 3, 2, 1] and p.reduced_here == [1]


def test_direct_reduce_scatter_sends_to_the_next_peer_first_and_keeps_its_own_chunks_last():
    p = _plans("reduce_scatter", 4, 2, "local_first")[1]
    assert p.finish == [4, 5, 6, 7, 0, 1, 2, 3]
    assert [s.peer for s in p.steps if s.kind == "send"] == [2, 2, 3, 3, 0, 0]
    assert [s.peer for s in p.steps if s.kind == "reduce"] == [0, 0, 3, 3, 2, 2]


def test_short_last_part_drops_empty_chunks_on_every_rank():
    # 10 rows over 4 ranks: parts of 3, 3, 3, 1; with 2 chunks per part rank 3's second chunk is empty.
    plans = _plans("all_reduce", 4, 2, "ring", rows=3, size=10)
    assert all(p.empty(7) and not p.empty(6) for p in plans)
    assert plans[0].bounds(6) == (9, 10)
    assert all(7 not in p.finish and all(s.chunk != 7 for s in p.steps) for p in plans)
    out = _execute(plans)
    assert all(out[r][g] == Counter(range(4)) for r in range(4) for g in range(7))


def test_producer_tile_order_goes_by_the_earliest_chunk_a_tile_writes():
    position = {2: 0, 3: 1, 0: 2, 1: 3}
    ranges = [(0, 0), (1, 2), (3, 3), (2, 2), (5, 4)]  # tile 4 writes nothing
    assert planning.tile_order(ranges, position, producer=True) == [1, 3, 2, 0, 4]


def test_more_chunks_than_rows_and_wrong_explicit_order_are_launch_errors():
    with pytest.raises(LaunchError, match=r"chunks_per_rank is 4 but each rank's part of 'C' has only 3 rows"):
        planning.reduce(Schedule(pattern="reduce_scatter", tensor="C", chunks_per_rank=4), 0, 2, 3)
    with pytest.raises(LaunchError, match=r"lists 2 peer offsets but the world has 4 ranks"):
        planning.reduce(Schedule(pattern="all_reduce", tensor="C", order=[2, 1]), 0, 4, 3)


def test_all_to_all_sends_the_peers_block_and_keeps_the_gather_layout():
    import torch

    from syncopy.runtime.state.context import Context

    s = Schedule(pattern="all_to_all", tensor="X", chunks_per_rank=2, order="ring")
    p = planning.all_to_all(s, 1, 3, 4)  # 3 ranks, blocks of 4 rows, 2 chunks per block
    assert p.arrival == [0, 1, 4, 5]  # from rank 0 first, then rank 2: direct, like local_first
    assert {(n.chunk, n.peer) for n in p.sends()} == {(2, 2), (3, 2), (2, 0), (3, 0)}
    ctx = Context(p, (4, 2), torch.float32, torch.device("cpu"), 0)
    ctx.source = torch.arange(24, dtype=torch.float32).reshape(12, 2)
    # Chunk 3 is rows 6..8 of the receive buffer (block 1, second half); to rank 2 it carries rows
    # 10..12 of our input (block 2, second half), which land in rank 2's block 1.
    assert p.bounds(3) == (6, 8)
    assert torch.equal(ctx.send_view(3, 2), ctx.source[10:12])
    assert torch.equal(ctx.send_view(2, 0), ctx.source[0:2])


def test_explicit_slices_are_refused_for_reduce_patterns():
    from pathlib import Path

    from syncopy.errors import ScheduleError
    from syncopy.schedule import from_dict, load_schedule

    example = load_schedule(Path(__file__).resolve().parents[2] / "examples" / "explicit_all_gather.yaml")
    with pytest.raises(ScheduleError, match=r"^schedule: chunks: explicit slices are lowered for all_gather and all_to_all only"):
        from_dict({**example.model_dump(by_alias=True, exclude_none=True), "pattern": "reduce_scatter"})
    s = example.model_copy(update={"pattern": "reduce_scatter"})  # unvalidated: the lowering refuses it too
    with pytest.raises(LaunchError, match=r"explicit slices \(`chunks:`\) are lowered for all_gather and all_to_all only, "
                                          r"not reduce_scatter"):
        planning.reduce(s, 0, 3, 10)
