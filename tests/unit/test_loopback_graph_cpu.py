"""Graph capture of a warm loopback launch, on CPU tensors under the Triton interpreter: a HostGraph
records the launch's stream operations and kernel launches with their arguments frozen, as a CUDA
graph does, and replays them. Replays must move the data the captured tensors hold by then and
advance the epoch on the device (runtime/streams/graph_epochs.py); tests/gpu/test_graph.py does the same with
torch.cuda.graph."""
from __future__ import annotations

import pytest
import torch
import triton

import syncopy
from syncopy import device as dev
from syncopy.runtime.worlds.loopback import LoopbackWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

ROWS, N, K = 16, 16, 16
META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)


def _fused(timeout_s=20.0):
    return syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring"), timeout_s=timeout_s)(ag_gemm_kernel)


class _Case:
    """Captured buffers: this rank's shard, the peers' shards, B and C; `refill` puts new data in them."""

    def __init__(self, world: int, rank: int):
        self.world, self.rank = world, rank
        self.gen = torch.Generator().manual_seed(world * 10 + rank)
        self.shards = [torch.empty(ROWS, K) for _ in range(world)]
        self.a = torch.empty(ROWS, K)
        self.b = torch.empty(K, N)
        self.m = ROWS * world
        self.c = torch.empty(self.m, N)
        self.grid = (triton.cdiv(self.m, 16) * triton.cdiv(N, 16),)
        self.refill()

    def refill(self, lw: LoopbackWorld | None = None) -> None:
        for s in self.shards:
            s.copy_(torch.randn(ROWS, K, generator=self.gen))
        self.a.copy_(self.shards[self.rank])
        self.b.copy_(torch.randn(K, N, generator=self.gen))
        self.c.fill_(float("nan"))
        for ctx in (lw.contexts.values() if lw is not None else ()):
            ctx.buffer.fill_(float("nan"))  # poisoned receive buffer: a chunk read before it landed shows

    def args(self):
        a, b, c = self.a, self.b, self.c
        return (a, b, c, self.m, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))

    def launch(self, lw: LoopbackWorld, **kw):
        return lw.launch(self.grid, self.args(), dict(META), self.shards, **kw)

    def capture(self, lw: LoopbackWorld, **kw):
        return lw.capture(self.grid, self.args(), dict(META), self.shards, **kw)

    def error(self) -> float:
        ref = torch.cat(self.shards) @ self.b
        return float(torch.nan_to_num((self.c - ref).abs(), nan=float("inf")).max())


def _flag_addresses(ctx) -> set[int]:
    return {ctx.flag_address(f) for f in range(ctx.n_flags)}


@pytest.mark.parametrize("world,rank,start,flags", [(3, 1, 0, "own-stream"), (3, 1, 0, "behind-copy"), (2, 0, 2**31 - 3, "own-stream")],
                         ids=["world3", "world3-flags-behind-copies", "world2-across-the-int32-wrap"])
def test_replays_move_new_data_and_advance_the_epoch_on_the_device(world, rank, start, flags):
    lw = LoopbackWorld(_fused(), world, rank, device="cpu", flags=flags)
    case = _Case(world, rank)
    case.launch(lw)  # warm: context, probe, tile order
    ctx = next(iter(lw.contexts.values()))
    if start:  # as if 2^31 launches had run: the device's int32 words wrap on the way
        ctx.epoch = start
        ctx.ctx[dev.CTX_EPOCH.value] = start
        ctx.signals[dev.SIG_HEADER:dev.SIG_HEADER + ctx.n_flags] = start
    base = ctx.epoch
    graph = case.capture(lw, delay_s=0.01)  # a slow link: the chunks land while the tiles spin
    lw.synchronize()
    for replay in range(1, 4):
        case.refill(lw)
        graph.replay()
        lw.synchronize()
        assert case.error() < 1e-4, f"replay {replay}"
        assert ctx.epoch == base + replay  # one per replay (the capture ran nothing)
        flags = ctx.signals[dev.SIG_HEADER:dev.SIG_HEADER + ctx.n_flags].tolist()
        assert flags == [syncopy.runtime.streams.streamops.wrap32(ctx.epoch)] * ctx.n_flags


def test_a_captured_launch_writes_no_epoch_and_no_flag_from_the_host():
    # What a replay runs is what the capture recorded: the epoch word, the own flags and the chunk
    # flags must come from the device (the advance kernel, copies of the epoch's mirror), never
    # from a host write whose value the capture froze.
    lw = LoopbackWorld(_fused(), 3, 0, device="cpu")
    case = _Case(3, 0)
    case.launch(lw)
    graph = case.capture(lw)
    (loop,) = lw.loops.values()
    ctx, de = loop.ctx, loop.device_epoch
    calls = [(step.func.__name__, step.args) for step in graph.steps if hasattr(step, "func")]
    frozen = {loop.epoch_word} | _flag_addresses(ctx)
    assert [args[0] for name, args in calls if name == "write32"] == [de.scratch_address] * 4  # one barrier per remote chunk
    assert not any(name in ("write32", "zero32") and args[0] in frozen for name, args in calls)
    flag_copies = [args for name, args in calls if name == "copy" and args[0] in frozen]
    assert len(flag_copies) == 4 and all(args[1:3] == (de.mirror_address, 4) for args in flag_copies)
    assert [name for name, _ in calls].count("copy") == 1 + 1 + 4 + 4  # own rows, epoch -> mirror, 4 chunks, 4 flags
    kernels = [getattr(step, "__name__", "") for step in graph.steps if not hasattr(step, "func")]
    assert kernels == ["advance", "<lambda>"]  # the epoch's advance, then the fused kernel


def test_a_captured_launch_raises_its_flags_behind_its_copies_whatever_the_flag_mode():
    # In a graph the flags stay behind the copies on the copies' stream (own-stream's branch made
    # replays slower on an H200), and the capture forks and rejoins that one side stream only.
    lw = LoopbackWorld(_fused(), 3, 0, device="cpu", flags="own-stream")
    case = _Case(3, 0)
    case.launch(lw)
    graph = case.capture(lw)
    (loop,) = lw.loops.values()
    side, de = lw.ops.handle(loop.side), loop.device_epoch
    calls = [(step.func.__name__, step.args) for step in graph.steps if hasattr(step, "func")]
    on_side = [name for name, args in calls if args and args[-1] is side and name in ("copy", "write32", "record", "wait_event")]
    assert on_side == [*["copy", "write32", "copy"] * 4, "record"]  # chunk, barrier, flag; the join's mark
    assert all(args[-1] in (side, lw.ops.handle(lw.engine.current(None))) or name == "wait_event" for name, args in calls)
    assert [args[0] for name, args in calls if name == "write32"] == [de.scratch_address] * 4


def test_warm_launches_in_graph_mode_write_no_epoch_from_the_host(monkeypatch):
    # graph=True: every launch advances the epoch on the device, captured or not; the host's calls
    # never carry an epoch (count them), and launch after launch the results are right.
    lw = LoopbackWorld(_fused(), 3, 2, device="cpu", graph=True)
    case = _Case(3, 2)
    case.launch(lw)
    (loop,) = lw.loops.values()
    frozen = {loop.epoch_word} | _flag_addresses(loop.ctx)
    writes = []
    write32 = lw.ops.write32
    monkeypatch.setattr(lw.ops, "write32", lambda addr, value, stream: (writes.append(addr), write32(addr, value, stream)))
    for copies in ("before", "after", "beside"):
        case.refill(lw)
        case.launch(lw, copies=copies, delay_s=0.005 if copies != "before" else 0.0)
        assert case.error() < 1e-4, copies
    assert writes and not frozen & set(writes)
    assert loop.ctx.epoch == 4


def test_a_withheld_chunk_in_a_replay_is_raised_by_synchronize_and_later_replays_wait_again():
    lw = LoopbackWorld(_fused(timeout_s=0.3), 3, 0, device="cpu")
    case = _Case(3, 0)
    case.launch(lw)
    good = case.capture(lw)
    bad = case.capture(lw, withhold=frozenset({5}))  # chunk 1 of rank 2 never comes
    good.replay()
    bad.replay()  # epoch 3
    good.replay()
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        lw.synchronize()
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (0, (2, 1), 3)
    lw.synchronize()  # raised once
    case.refill(lw)
    good.replay()  # the error words were cleared for every replay: this one waits for its chunks again
    lw.synchronize()
    assert case.error() < 1e-4


def test_capture_refusals_are_one_line_errors():
    lw = LoopbackWorld(_fused(), 3, 0, device="cpu")
    case = _Case(3, 0)
    with pytest.raises(syncopy.LaunchError, match=r"^launch once with these shapes, grid and scalars before capturing: the first launch probes"):
        case.capture(lw)
    case.launch(lw)
    with pytest.raises(syncopy.LaunchError, match=r"^a captured launch enqueues its chunk copies before the kernel: leave out"):
        _capture_with(lw, case, copies="after")
    with pytest.raises(syncopy.LaunchError, match=r"^a launch captured in a CUDA graph cannot wait for itself: pass sync=False"):
        _capture_with(lw, case, sync=True)
    from syncopy.templates.gemm_rs.kernel import gemm_rs_kernel

    rs = syncopy.overlap(dict(pattern="reduce_scatter", tensor="C", dim=0, chunks_per_rank=2, order="local_first"))(gemm_rs_kernel)
    with pytest.raises(syncopy.LaunchError, match=r"^graph capture covers all_gather launches on the loopback world"):
        LoopbackWorld(rs, 3, 0, device="cpu", graph=True).launch((1, 1), (torch.zeros(48, 16), torch.zeros(16, 16), torch.zeros(16, 16), 48, 16, 16,
                                                                          16, 1, 16, 1, 16, 1), dict(BLOCK_M=8, BLOCK_N=8, BLOCK_K=16), [torch.zeros(16, 16)] * 3)


def _capture_with(lw, case, **kw):
    from syncopy.runtime.streams import graph_epochs as graphs

    lw.engine.graph = graphs.HostGraph()
    try:
        case.launch(lw, **{"sync": False, **kw})
    finally:
        lw.engine.graph = None
