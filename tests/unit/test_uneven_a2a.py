"""Uneven all_to_all without a world: the plans of split sizes (every rank's against the others'),
the device's chunk lookup against the host's, and the one-line errors of split sizes that do not fit."""
from __future__ import annotations

import itertools
import random

import pytest
import torch
import triton
import triton.language as tl

from syncopy import device as dev
from syncopy.errors import LaunchError
from syncopy.runtime.transport import splits
from syncopy.runtime.state.plan import all_to_all
from syncopy.schedule import Schedule
from tests.unit.test_cli_args import _fails, no_ranks  # noqa: F401 (a fixture)


def _schedule(chunks: int, order="local_first") -> Schedule:
    return Schedule(pattern="all_to_all", tensor="X", dim=0, chunks_per_rank=chunks, order=order)


def _matrices(world: int, seed: int):
    """counts[s][d]: rows rank s sends rank d, ragged with zeros, and the all-zero and all-to-one cases."""
    rng = random.Random(seed)
    yield [[rng.choice([0, 0, 1, 2, 5, 13]) for _ in range(world)] for _ in range(world)]
    yield [[0] * world for _ in range(world)]
    yield [[7 if d == world - 1 else 0 for d in range(world)] for _ in range(world)]


def _plans(counts, chunks, order="local_first"):
    world = len(counts)
    return [all_to_all(_schedule(chunks, order), r, world, 0, splits=(tuple(counts[r]), tuple(counts[s][r] for s in range(world))))
            for r in range(world)]


@pytest.mark.parametrize("world,chunks", list(itertools.product([1, 2, 3, 4], [1, 2, 3])))
def test_every_nonempty_chunk_is_sent_once_and_lands_where_its_rows_go(world, chunks):
    for seed in range(3):
        for counts in _matrices(world, seed):
            plans = _plans(counts, chunks)
            for r, p in enumerate(plans):
                # The receive buffer: block s holds counts[s][r] rows, in rank order, chunks tiling it.
                assert p.size == sum(counts[s][r] for s in range(world))
                assert [p.bounds(g) for g in range(world * chunks)] == sorted(p.bounds(g) for g in range(world * chunks))
                assert p.bounds(0)[0] == 0 and p.bounds(world * chunks - 1)[1] == p.size
                got = sorted((n.peer, n.chunk) for n in p.recvs())
                want = sorted((s, s * chunks + i) for s in range(world) if s != r for i in range(chunks)
                              if not p.empty(s * chunks + i))
                assert got == want
                assert sorted(p.arrival) == sorted(g for _, g in want)
                for n in p.sends():  # the peer expects exactly these rows, from the same rows of the input
                    lo, hi = p.send_bounds(n.chunk, n.peer)
                    rlo, rhi = plans[n.peer].bounds(n.chunk)
                    assert hi - lo == rhi - rlo > 0
                    assert (r, n.chunk) in {(q.peer, q.chunk) for q in plans[n.peer].recvs()}
                sent = sum(p.send_bounds(n.chunk, n.peer)[1] - p.send_bounds(n.chunk, n.peer)[0] for n in p.sends())
                assert sent == sum(counts[r]) - counts[r][r]
                for row in range(p.size):  # a row's chunk holds it, so an empty chunk is never named
                    lo, hi = p.bounds(p.chunk_of_row(row))
                    assert lo <= row < hi


def test_uneven_splits_refuse_explicit_slices_in_one_line():
    s = Schedule(pattern="all_to_all", tensor="X", dim=0, units_per_rank=4, chunks=[[0, 2], [2, 4]])
    with pytest.raises(LaunchError) as err:
        all_to_all(s, 0, 2, 0, splits=((1, 2), (1, 3)))
    assert str(err.value) == ("uneven all_to_all splits (input_split_sizes) take chunks_per_rank and a named order, not an "
                              "explicit `chunks:`; drop units_per_rank, chunks and transfers from the schedule, or launch with "
                              "equal splits")


@triton.jit
def _chunks_of_rows(ctx, out, n_rows):
    for r in range(0, n_rows):
        tl.store(out + r, dev._chunk_of_row(r + tl.zeros([], dtype=tl.int64), ctx))


@pytest.mark.parametrize("world,chunks", [(2, 3), (3, 2), (4, 1)])
def test_the_kernels_chunk_of_a_row_is_the_plans(world, chunks):
    # The kernel finds a row's chunk in the table the context writes (uneven: rows_per_rank 0).
    for counts in _matrices(world, 5):
        p = _plans(counts, chunks)[world - 1]
        if not p.size:
            continue
        ctx = torch.zeros(dev.CTX_LEN + world * chunks, dtype=torch.int64)
        ctx[dev.CTX_CHUNKS.value], ctx[dev.CTX_WORLD.value], ctx[dev.CTX_SIZE.value] = chunks, world, p.size
        ctx[dev.CTX_LEN:] = torch.tensor(p.starts())
        out = torch.full((p.size,), -1, dtype=torch.int64)
        _chunks_of_rows[(1,)](ctx, out, p.size)
        want = [p.chunk_of_row(r) for r in range(p.size)]
        assert out.tolist() == want
        assert [dev._host_chunk_of_row(r, ctx.numpy()) for r in range(p.size)] == want  # checked mode's


def test_split_size_mistakes_are_one_line_errors():
    def fails(fn, *args) -> str:
        with pytest.raises(LaunchError) as err:
            fn(*args)
        assert "\n" not in str(err.value)
        return str(err.value)

    assert fails(splits.counts, [1, 2], "input_split_sizes", 3, "k") == (
        "launch of 'k': input_split_sizes has 2 counts but the group has 3 ranks; give one count per rank")
    assert fails(splits.counts, torch.tensor([1.0, 2.0]), "input_split_sizes", 2, "k") == (
        "launch of 'k': input_split_sizes is a torch.float32 tensor of shape [2]; pass one integer count per rank (2), as a "
        "list or a 1-D integer tensor")
    assert fails(splits.counts, [3, -1], "input_split_sizes", 2, "k") == (
        "launch of 'k': input_split_sizes [3, -1] has a negative count; counts are rows, 0 or more")
    assert fails(splits.counts, 5, "output_split_sizes", 2, "k").startswith(
        "launch of 'k': output_split_sizes must be a list of 2 integer row counts (one per rank), got 5")
    assert splits.counts(torch.tensor([0, 4]), "input_split_sizes", 2, "k") == (0, 4)
    assert fails(splits.check_input, (3, 4), torch.empty(8, 2), "X", 0, "k") == (
        "launch of 'k': input_split_sizes [3, 4] sums to 7 but 'X' has 8 rows along dim 0; give counts that sum to 8 (rows "
        "sent to each rank, in rank order)")
    assert fails(splits.check_input, (3, 4), torch.empty(2, 7), "X", 1, "k") == (
        "launch of 'k': split sizes cut 'X' along dim 0, as all_to_all_single does, but the schedule says dim: 1; use dim: 0")
    # GPU backends (p2p, nccl) do not move uneven splits yet: refused before anything is sent.
    assert fails(splits.check_input, (3, 4), torch.empty(7, 2, device="meta"), "X", 0, "k") == (
        "launch of 'k': uneven all_to_all splits run on CPU worlds (gloo backend) only so far, not on meta (p2p, nccl); "
        "launch with equal splits (pad each block to the largest count)")
    assert fails(splits.pop, {"input_split_sizes": [1]}, {}, "all_gather", "k") == (
        "launch of 'k': input_split_sizes split an all_to_all, but the schedule's pattern is all_gather; drop the split sizes, "
        "or use pattern: all_to_all")
    assert fails(splits.pop, {"output_split_sizes": [1]}, {}, "all_to_all", "k").startswith(
        "launch of 'k': output_split_sizes without input_split_sizes;")
    kwargs = {"input_split_sizes": [1], "M": 3}
    assert splits.pop(kwargs, {"M": None}, "all_to_all", "k") == ([1], None) and kwargs == {"M": 3}
    own = {"input_split_sizes": [1]}  # a kernel parameter of that name stays the kernel's
    assert splits.pop(own, {"input_split_sizes": None}, "all_to_all", "k") is None and own == {"input_split_sizes": [1]}


def test_thread_and_loopback_worlds_refuse_split_sizes_in_one_line():
    from syncopy import templates

    fused = templates.get("a2a_gemm").fused()
    x, w, y, tiles = torch.zeros(4, 8), torch.zeros(2, 8, 8), torch.zeros(4, 8), torch.zeros(3, dtype=torch.int32)
    with pytest.raises(LaunchError) as err:  # what those worlds call to bind a launch
        fused.binder.bind((x, w, y, tiles, 8, 8, 8, 1, 64, 8, 1, 8, 1), {"input_split_sizes": [4], "BLOCK_M": 16})
    assert str(err.value) == ("launch of 'expert_gemm_kernel': uneven all_to_all splits (input_split_sizes) run on CPU worlds "
                              "(processes, gloo) only so far, not in thread or loopback worlds; launch with equal splits there")


def test_run_routing_mistakes_are_one_line_before_any_rank_starts(no_ranks, capsys):  # noqa: F811
    assert _fails(["run", "ag_gemm", "--routing", "random"], capsys) == (
        "--routing random: template ag_gemm has no token routing (a2a_gemm has); drop --routing")
    assert _fails(["run", "a2a_gemm", "--routing", "sideways"], capsys) == (
        "--routing sideways: a2a_gemm routes tokens uniform, random, skewed; use one of those")


def test_random_and_skewed_routing_draw_ragged_empty_and_skewed_counts():
    from syncopy import templates

    mod = templates.get("a2a_gemm").module
    drawn = [mod.route(r, 3, 40, routing, seed) for routing in ("random", "skewed") for r in range(3) for seed in range(4)]
    assert all(c.shape == (3, mod.EXPERTS) and int(c.sum()) == 40 for c in drawn)
    assert any((c == 0).any() for c in drawn) and any(int(c.max()) >= 30 for c in drawn)
    assert len({tuple(c.reshape(-1).tolist()) for c in drawn}) > 10  # they change from launch to launch
