"""The loopback world's launch logic on CPU tensors under the Triton interpreter: the copies and
flags it issues, their order against the kernel, the epoch table, the per-context views, a withheld
chunk. (On a GPU, tests/gpu/test_loopback.py runs the same class with the copy engine.)"""
from __future__ import annotations

import threading

import pytest
import torch
import triton

import syncopy
from syncopy.runtime.worlds.loopback import LoopbackWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

WORLD, ROWS, N, K = 3, 16, 16, 16
META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)


def _fused(timeout_s=20.0):
    return syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring"), timeout_s=timeout_s)(ag_gemm_kernel)


def _case(seed: int):
    g = torch.Generator().manual_seed(seed)
    shards = [torch.randn(ROWS, K, generator=g) for _ in range(WORLD)]
    return shards, torch.randn(K, N, generator=g)


def _launch(lw: LoopbackWorld, shards, b, rank=0, **kw):
    m = ROWS * WORLD
    c = torch.full((m, N), float("nan"))
    for ctx in lw.contexts.values():
        ctx.buffer.fill_(float("nan"))  # stale rows cannot pass
    a = shards[rank]
    grid = (triton.cdiv(m, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)
    ctx = lw.launch(grid, (a, b, c, m, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
                    dict(META), shards, **kw)
    return c, ctx


def _err(c, shards, b) -> float:
    ref = torch.cat(shards) @ b
    return float(torch.nan_to_num((c - ref).abs(), nan=float("inf")).max())


@pytest.mark.parametrize("rank", [0, 2])
def test_copies_first_then_kernel_equals_torch_launch_after_launch(rank):
    lw = LoopbackWorld(_fused(), WORLD, rank, device="cpu")
    for seed in range(2):
        shards, b = _case(seed)
        c, ctx = _launch(lw, shards, b, rank=rank, timeline=True)
        assert _err(c, shards, b) < 1e-4
        t = lw.timeline_ms()
        landed = [v for name, v in t.items() if isinstance(name, int)]
        assert len(landed) == (WORLD - 1) * 2 and max(landed) <= t["kernel"]  # every copy issued before the kernel
        # This rank's own writes go first: on a GPU its own-rows copy would queue behind the chunk copies.
        assert list(t["host"]) == ["setup", "own writes", "copies enqueued", "kernel launched"]
    assert ctx.epoch == 2 and len(lw.contexts) == 1


def test_paced_chunks_land_while_the_kernel_runs():
    lw = LoopbackWorld(_fused(), WORLD, 0, device="cpu")
    shards, b = _case(3)
    c, _ = _launch(lw, shards, b, delay_s=0.05, timeline=True)
    assert _err(c, shards, b) < 1e-4
    t = lw.timeline_ms()
    landed = sorted(v for name, v in t.items() if isinstance(name, int))
    assert landed[0] > t["kernel"] and landed[-1] < t["end"]  # all four landed after the launch, before it ended


def test_new_peer_tensors_are_read_not_the_last_ones():
    # The per-context views are keyed by the peer tensors themselves: a new list of new tensors
    # (which may reuse the old ones' ids once those are freed) is read afresh.
    lw = LoopbackWorld(_fused(), WORLD, 0, device="cpu")
    for seed in (4, 5):
        shards, b = _case(seed)
        c, _ = _launch(lw, [s.clone() for s in shards], b)
        assert _err(c, shards, b) < 1e-4


def test_presignalled_chunks_launch_after_launch():
    lw = LoopbackWorld(_fused(), WORLD, 1, device="cpu")
    for seed in range(3):
        shards, b = _case(seed)
        c, ctx = _launch(lw, shards, b, rank=1, presignal=seed == 1)
        assert _err(c, shards, b) < 1e-4
    assert ctx.epoch == 3 and int(ctx.ctx[0]) == 3  # the epoch word the kernel reads, written by the stream


def test_launches_return_without_waiting_and_errors_surface_later(monkeypatch):
    # sync=False: a launch enqueues and returns. The error words of each launch go to a pinned ring
    # slot behind its kernel; a withheld chunk's timeout is raised by the next launch (or by
    # synchronize()), naming the launch it happened in -- never lost, never a hang.
    from syncopy.runtime.streams.error_ring import LaunchErrors

    monkeypatch.setattr(LaunchErrors, "RING", 2)  # slots are reused: the third launch waits for the first's words
    lw = LoopbackWorld(_fused(timeout_s=0.3), WORLD, 0, device="cpu")
    shards, b = _case(9)
    for _ in range(3):
        c, ctx = _launch(lw, shards, b, sync=False)
        assert _err(c, shards, b) < 1e-4
    lw.synchronize()
    (loop,) = lw.loops.values()
    assert not loop.errors.pending and ctx.epoch == 3
    _launch(lw, shards, b, sync=False, withhold=frozenset({3}))  # epoch 4: chunk 1 of rank 1 never comes
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        _launch(lw, shards, b, sync=False)
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (0, (1, 1), 4)
    c, ctx = _launch(lw, shards, b)  # the context goes on: epoch 5 waits for its own chunks again
    assert _err(c, shards, b) < 1e-4 and ctx.epoch == 5


def test_copies_issued_beside_the_launch_from_a_thread():
    lw = LoopbackWorld(_fused(), WORLD, 1, device="cpu")
    for seed in range(2):
        shards, b = _case(seed)
        c, _ = _launch(lw, shards, b, rank=1, copies="beside", timeline=True)
        assert _err(c, shards, b) < 1e-4
        t = lw.timeline_ms()
        assert len([name for name in t if isinstance(name, int)]) == (WORLD - 1) * 2
        assert list(t["host"])[:2] == ["setup", "own writes"] and set(t["host"]) == {"setup", "own writes", "copies enqueued", "kernel launched"}


def test_split_copies_issue_the_first_chunk_before_the_kernel_and_the_rest_after():
    # The GPU default: the copy engine starts on the first chunk while the host launches the kernel.
    lw = LoopbackWorld(_fused(), WORLD, 2, device="cpu")
    copied = []
    copy = lw.ops.copy

    def counted(*args):
        copied.append(threading.current_thread().name)
        copy(*args)

    lw.ops.copy = counted
    launch = lw.engine.enqueue
    at_kernel = []
    lw.engine.enqueue = lambda fn: (at_kernel.append(len(copied)), launch(fn))[1]
    counts, on_thread = {}, {}
    for seed, copies in enumerate(["before", "split", "split"]):
        copied.clear(), at_kernel.clear()
        shards, b = _case(seed)
        c, _ = _launch(lw, shards, b, rank=2, copies=copies)
        assert _err(c, shards, b) < 1e-4
        counts[copies] = (len(copied), at_kernel[0])
        on_thread[copies] = copied.count("syncopy-loopback")
    # own rows and one remote chunk from the launching thread before the kernel, the other 3 from the
    # copy thread (started just before the kernel on the CPU engine); as many copies as all before it
    assert counts["split"][0] == counts["before"][0] and counts["split"][1] >= 2
    assert on_thread == {"before": 0, "split": (WORLD - 1) * 2 - 1}


def test_flags_on_their_own_stream_follow_each_chunk_and_a_withheld_one_still_times_out():
    lw = LoopbackWorld(_fused(timeout_s=0.5), WORLD, 1, device="cpu", flags="own-stream")
    for seed in range(2):
        shards, b = _case(seed)
        c, ctx = _launch(lw, shards, b, rank=1, copies="split")
        assert _err(c, shards, b) < 1e-4
    (loop,) = lw.loops.values()
    assert len(loop.flag_events) == ctx.n_chunks
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        _launch(lw, shards, b, rank=1, withhold=frozenset({4}))
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (1, (2, 0), 3)
    with pytest.raises(ValueError, match=r"^flags='late': expected one of behind-copy, own-stream$"):
        LoopbackWorld(_fused(), WORLD, 0, device="cpu", flags="late")


def test_two_buffers_alternate_by_launch_and_a_withheld_chunk_names_its_launch():
    lw = LoopbackWorld(_fused(timeout_s=0.5), WORLD, 2, device="cpu", buffers=2)
    seen = []
    for seed in range(4):
        shards, b = _case(seed)
        c, ctx = _launch(lw, shards, b, rank=2, copies="split")
        assert _err(c, shards, b) < 1e-4
        seen.append((id(ctx), ctx.epoch))
    # launches 1 and 3 on the first buffer, 2 and 4 on the second; epochs count the launches
    assert [e for _, e in seen] == [1, 2, 3, 4] and seen[0][0] == seen[2][0] != seen[1][0] == seen[3][0]
    (first,), (second,) = lw.loops.values(), lw.twins.values()
    assert first.ctx.buffer.data_ptr() != second.ctx.buffer.data_ptr() and first.side is second.side
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        _launch(lw, shards, b, rank=2, withhold=frozenset({0}))
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (2, (0, 0), 5)
    c, ctx = _launch(lw, shards, b, rank=2)  # the other buffer goes on
    assert _err(c, shards, b) < 1e-4 and ctx.epoch == 6
    with pytest.raises(ValueError, match=r"^buffers=3: expected 1 or 2$"):
        LoopbackWorld(_fused(), WORLD, 0, device="cpu", buffers=3)
    with pytest.raises(syncopy.LaunchError, match=r"^buffers=2 alternates the receive buffers of all_gather launches without graph capture; leave it out for graph=True$"):
        LoopbackWorld(_fused(), WORLD, 0, device="cpu", buffers=2, graph=True)


@pytest.mark.parametrize("buffers", [1, 2])
def test_a_launchs_copies_wait_for_the_last_kernel_that_read_their_buffer(buffers):
    # One buffer: the copies of launch n wait for kernel n-1. Two: for kernel n-2 (the same
    # buffer), so on a GPU they run while kernel n-1 still computes.
    lw = LoopbackWorld(_fused(), WORLD, 1, device="cpu", buffers=buffers)
    log = []
    record, wait_event, enqueue = lw.ops.record, lw.ops.wait_event, lw.engine.enqueue
    lw.ops.record = lambda ev, stream: (log.append(("record", id(ev))), record(ev, stream))[1]
    lw.ops.wait_event = lambda stream, ev: (log.append(("wait", id(ev))), wait_event(stream, ev))[1]
    lw.engine.enqueue = lambda fn: (log.append(("kernel", None)), enqueue(fn))[1]
    for seed in range(4):
        log.append(("launch", seed))
        shards, b = _case(seed)
        c, _ = _launch(lw, shards, b, rank=1)
        assert _err(c, shards, b) < 1e-4
    marks = {id(loop.compute_mark) for loop in [*lw.loops.values(), *lw.twins.values()]}
    launches = [i for i, (op, _) in enumerate(log) if op == "launch"] + [len(log)]
    for n in range(2, 4):  # launches 3 and 4
        ops = log[launches[n]:launches[n + 1]]
        (waited,) = [ev for op, ev in ops if op == "wait" and ev in marks]
        # the kernel the wait follows: the last one after which that event was recorded
        before = log[:launches[n]] + ops[:ops.index(("wait", waited))]
        kernels = [i for i, (op, _) in enumerate(before) if op == "kernel"]
        last_record = max(i for i, (op, ev) in enumerate(before) if op == "record" and ev == waited)
        assert sum(k < last_record for k in kernels) == n + 1 - buffers


def test_a_failure_in_the_copy_thread_is_raised_by_the_launch():
    import threading

    lw = LoopbackWorld(_fused(timeout_s=0.3), WORLD, 0, device="cpu")
    copy = lw.ops.copy

    def broken(*args):
        if threading.current_thread().name == "syncopy-loopback":
            raise RuntimeError("copy engine gone")
        copy(*args)

    lw.ops.copy = broken
    shards, b = _case(7)
    with pytest.raises(RuntimeError, match="copy engine gone"):
        _launch(lw, shards, b, copies="beside")


def test_bad_peer_shards_and_copy_modes_are_one_line_errors():
    lw = LoopbackWorld(_fused(), WORLD, 0, device="cpu")
    shards, b = _case(8)
    with pytest.raises(syncopy.LaunchError, match=r"^peer shard 2 has shape \(15, 16\); every peer's shard must have this rank's shard shape \(16, 16\)$"):
        _launch(lw, shards[:2] + [shards[2][:15]], b)
    with pytest.raises(syncopy.LaunchError, match=r"^the loopback world has 3 ranks but got 2 peer shards"):
        _launch(lw, shards[:2], b)
    with pytest.raises(ValueError, match=r"^copies='sideways': expected one of before, after, beside, split$"):
        _launch(lw, shards, b, copies="sideways")


def test_withheld_chunk_is_a_timeout_naming_it():
    lw = LoopbackWorld(_fused(timeout_s=0.5), WORLD, 0, device="cpu")
    shards, b = _case(6)
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        _launch(lw, shards, b, withhold=frozenset({2}))  # chunk 0 of rank 1
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (0, (1, 0), 1)


def _gemm_rs(order="local_first", chunks=2, timeout_s=20.0):
    from syncopy.templates.gemm_rs.kernel import gemm_rs_kernel

    return syncopy.overlap(dict(pattern="reduce_scatter", tensor="C", dim=0, chunks_per_rank=chunks, order=order),
                           timeout_s=timeout_s)(gemm_rs_kernel)


def _launch_rs(lw, seed, rank, world=WORLD, rows=ROWS, **kw):
    g = torch.Generator().manual_seed(seed)
    m, k = rows * world, 16
    a, b = torch.randn(m, k, generator=g), torch.randn(k, N, generator=g)
    peers = [torch.randn(rows, N, generator=g) for _ in range(world)]  # rank p's partial of this rank's rows
    out = torch.full((rows, N), float("nan"))
    grid = (triton.cdiv(m, 8), triton.cdiv(N, 8))
    ctx = lw.launch(grid, (a, b, out, m, N, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1)),
                    dict(BLOCK_M=8, BLOCK_N=8, BLOCK_K=16), peers, **kw)
    partial = a @ b
    want = partial[rank * rows:(rank + 1) * rows] + sum(p for r, p in enumerate(peers) if r != rank)
    return out, want, partial, ctx


@pytest.mark.parametrize("rank", [0, 2])
def test_gemm_rs_sends_chunks_as_their_flags_rise_while_the_kernel_runs(rank):
    # Producer overlap: the send stream waits on each remote chunk's flag (a stream wait on the
    # device; here a worker thread) and copies the chunk to its owner before the kernel has ended.
    lw = LoopbackWorld(_gemm_rs(), WORLD, rank, device="cpu")
    for seed in range(2):
        out, want, partial, ctx = _launch_rs(lw, seed, rank, timeline=True)
        assert torch.allclose(out, want, atol=1e-4)
        wire = lw.launch_wire(out)
        for g in wire.sends:  # every remote chunk left with this launch's values: the kernel's own bytes
            lo, hi = ctx.plan.bounds(g)  # (torch's a @ b may differ from the interpreter's tl.dot in the last bit)
            assert torch.equal(wire.outbox[lo:hi], ctx.buffer[lo:hi])
            assert torch.allclose(wire.outbox[lo:hi], partial[lo:hi], atol=1e-4)
        t = lw.timeline_ms()
        sent = sorted(v for name, v in t.items() if isinstance(name, tuple))
        assert len(sent) == (WORLD - 1) * 2 and sent[0] < t["end"]  # the first chunk left while tiles still computed
    assert ctx.epoch == 2


def test_gemm_rs_ring_is_refused_by_the_loopback_world():
    lw = LoopbackWorld(_gemm_rs(order="ring"), WORLD, 0, device="cpu")
    with pytest.raises(syncopy.LaunchError, match=r"^the loopback world emulates reduce_scatter sent straight to each owner, not reduce_scatter \(ring\); use"):
        _launch_rs(lw, 0, 0)


def test_launches_under_inference_mode_then_outside_it():
    # The first launch of a shape under inference mode makes the context; later launches outside it reuse it.
    lw = LoopbackWorld(_fused(), WORLD, 0, device="cpu")
    for seed, mode in ((10, True), (11, False)):
        shards, b = _case(seed)
        with torch.inference_mode(mode):
            c, _ = _launch(lw, shards, b)
        assert _err(c, shards, b) < 1e-4
    rs = LoopbackWorld(_gemm_rs(), WORLD, 1, device="cpu")
    for seed, mode in ((12, True), (13, False)):
        with torch.inference_mode(mode):
            out, want, _, _ = _launch_rs(rs, seed, 1)
        assert torch.allclose(out, want, atol=1e-4)


def test_a_warm_gemm_rs_launch_starts_with_one_batch_of_writes():
    # The epoch, the error words, the targets and the flags of unwritten chunks go as one stream
    # operation (cuStreamBatchMemOp on a GPU): no write-value or memset of its own before the kernel.
    lw = LoopbackWorld(_gemm_rs(), WORLD, 1, device="cpu")
    out, want, _, _ = _launch_rs(lw, 0, 1)
    assert torch.allclose(out, want, atol=1e-4)
    calls, depth = [], [0]

    def counted(name, real):
        def call(*args):
            if depth[0] == 0:  # the CPU engine's batch writes each word itself: count the launch's calls only
                calls.append(name)
            depth[0] += 1
            try:
                return real(*args)
            finally:
                depth[0] -= 1
        return call

    for name in ("write32", "zero32", "write_batch"):
        setattr(lw.ops, name, counted(name, getattr(lw.ops, name)))
    for seed in (1, 2):  # the targets differ per launch: they are assigned into the batch each time
        out, want, _, ctx = _launch_rs(lw, seed, 1)
        assert torch.allclose(out, want, atol=1e-4)
    assert calls == ["write_batch", "write_batch"] and ctx.epoch == 3
