"""A warm fused launch captured in a CUDA graph (torch.cuda.graph) on the loopback world: every
replay moves the data the captured buffers hold by then, its epoch advances on the device
(runtime/streams/graph_epochs.py), and a replay whose chunk never comes raises SyncopyTimeout at synchronize().
Skipped cleanly without CUDA; tests/unit/test_loopback_graph_cpu.py runs the same protocol on CPU."""
import os

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs a CUDA device (and TRITON_INTERPRET unset)"),
]

META = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)


class _Case:
    """Captured buffers of an AG-GEMM on rank `rank` of `world`: pinned peer shards, this rank's
    shard, B and C on the GPU; `refill` copies new data into them (never new tensors)."""

    def __init__(self, world, rank, rows=192, n=128, k=96, timeout_s=20.0, chunks=3):
        import triton

        import syncopy
        from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

        self.fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=chunks, order="ring"),
                                  timeout_s=timeout_s)(ag_gemm_kernel)
        self.world, self.rank, self.rows, self.n, self.k = world, rank, rows, n, k
        self.m = rows * world
        self.gen = torch.Generator().manual_seed(world * 7 + rank)
        self.peers = [torch.empty(rows, k, dtype=torch.float16).pin_memory() for _ in range(world)]
        self.shard = torch.empty(rows, k, dtype=torch.float16, device="cuda")
        self.b = torch.empty(k, n, dtype=torch.float16, device="cuda")
        self.c = torch.empty(self.m, n, dtype=torch.float16, device="cuda")
        self.grid = (triton.cdiv(self.m, 64) * triton.cdiv(n, 64),)
        self.refill()

    def refill(self, lw=None):
        torch.cuda.synchronize()  # the last replay no longer reads the pinned shards
        for p in self.peers:
            p.copy_(torch.randn(self.rows, self.k, generator=self.gen).half())
        self.shard.copy_(self.peers[self.rank])
        self.b.copy_(torch.randn(self.k, self.n, generator=self.gen).half())
        self.c.fill_(float("nan"))
        for ctx in (lw.contexts.values() if lw is not None else ()):
            ctx.buffer.fill_(float("nan"))  # poisoned receive buffer, on the stream the replay runs on

    def args(self):
        s, b, c = self.shard, self.b, self.c
        return (s, b, c, self.m, self.n, self.k, s.stride(0), s.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))

    def launch(self, lw, **kw):
        lw.launch(self.grid, self.args(), dict(META), self.peers, **kw)

    def error(self) -> float:
        full = torch.cat([p.cuda() for p in self.peers]).float()
        ref = full @ self.b.float()
        return torch.nan_to_num((self.c.float() - ref).abs(), nan=float("inf")).max().item() / ref.abs().max().item()


@pytest.mark.parametrize("world,rank", [(4, 1), (3, 0)])
def test_replays_of_a_captured_launch_move_new_data(world, rank):
    from syncopy.runtime.worlds.loopback import LoopbackWorld

    case = _Case(world, rank)
    lw = LoopbackWorld(case.fk, world, rank)
    case.launch(lw)  # warm: context, probe, tile order (a capture cannot read back)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        case.launch(lw, sync=False)
    ctx = next(iter(lw.contexts.values()))
    base = ctx.epoch - 1  # the capture counted a launch that ran nothing
    for replay in range(1, 5):
        case.refill(lw)
        torch.cuda.set_sync_debug_mode("error")
        try:
            graph.replay()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        lw.synchronize()
        assert case.error() < 2e-2, f"replay {replay}"
        assert ctx.epoch == base + replay
        assert ctx.signals[4:4 + ctx.n_flags].tolist() == [ctx.epoch] * ctx.n_flags
    case.refill(lw)
    case.launch(lw)  # a plain launch after the replays goes on from the device's epoch
    assert case.error() < 2e-2 and ctx.epoch == base + 5


def test_a_withheld_chunk_in_a_replay_raises_at_synchronize_and_later_replays_recover():
    import syncopy
    from syncopy.runtime.worlds.loopback import LoopbackWorld

    case = _Case(4, 2, timeout_s=0.3)
    lw = LoopbackWorld(case.fk, 4, 2)
    case.launch(lw)
    good = lw.capture(case.grid, case.args(), dict(META), case.peers)
    bad = lw.capture(case.grid, case.args(), dict(META), case.peers, withhold=frozenset({4}))  # chunk 1 of rank 1
    ctx = next(iter(lw.contexts.values()))
    lw.synchronize()
    base = ctx.epoch
    good.replay()
    bad.replay()  # base + 2
    good.replay()
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        lw.synchronize()
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (2, (1, 1), base + 2)
    for _ in range(2):
        case.refill(lw)
        good.replay()
        lw.synchronize()
        assert case.error() < 2e-2


def test_graph_mode_warm_launches_enqueue_without_host_sync():
    # graph=True: launches outside a capture advance the epoch on the device too, with no host sync.
    from syncopy.runtime.worlds.loopback import LoopbackWorld

    case = _Case(4, 3)
    lw = LoopbackWorld(case.fk, 4, 3, graph=True)
    case.launch(lw)
    for _ in range(3):
        case.refill(lw)
        torch.cuda.set_sync_debug_mode("error")
        try:
            case.launch(lw, sync=False)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        lw.synchronize()
        assert case.error() < 2e-2


def test_one_batch_of_write_values_lands_every_word():
    # The start of every host-epoch launch (error words, epoch, own flags) is one cuStreamBatchMemOp:
    # its parameter array must reach the driver in cuda.h's layout.
    from syncopy.runtime.streams import streamops

    ops = streamops.cuda_ops()
    words = torch.full((8,), 7, dtype=torch.int32, device="cuda")
    addr = [words.data_ptr() + 4 * i for i in range(8)]
    batch = ops.batch([(addr[0], 0), (addr[1], 0), (addr[3], None), (addr[5], None), (addr[6], -1)])
    stream = torch.cuda.current_stream().cuda_stream
    for value in (1, 2, 2**31 + 5):
        ops.write_batch(batch, value, stream)
        torch.cuda.synchronize()
        v = streamops.wrap32(value)
        assert words.tolist() == [0, 0, 7, v, 7, v, -1, 7]
