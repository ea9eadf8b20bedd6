"""Rung 4: the fused kernels on a real GPU, peers emulated by copy-engine copies (one GPU suffices).
Skipped cleanly without CUDA."""
import os
import random

import pytest
import torch
from tests import oracles

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs a CUDA device (and TRITON_INTERPRET unset)"),
]


def _fused(kernel, tensor, chunks=2, order="ring", timeout_s=20.0):
    import syncopy

    return syncopy.overlap(dict(pattern="all_gather", tensor=tensor, dim=0, chunks_per_rank=chunks, order=order), timeout_s=timeout_s)(kernel)


def _gemm_case(world, rows, n, k, dtype, rank=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    shards = [torch.randn(rows, k, generator=g).to(dtype) for _ in range(world)]
    b = torch.randn(k, n, generator=g).to(dtype).cuda()
    peers = [s.pin_memory() for s in shards]
    full = torch.cat(shards).cuda()
    return shards[rank].cuda(), b, peers, full


def _run_ag_gemm(fk, world, rows, n, k, dtype, delay_s=0.0, presignal=False, rank=0, seed=0, lw=None, poison=False, copies=None):
    import triton

    from syncopy.runtime.worlds.loopback import LoopbackWorld

    shard, b, peers, full = _gemm_case(world, rows, n, k, dtype, rank, seed)
    m = rows * world
    c = torch.empty(m, n, dtype=dtype, device="cuda")
    meta = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)
    grid = (triton.cdiv(m, 64) * triton.cdiv(n, 64),)
    lw = lw or LoopbackWorld(fk, world, rank)
    if poison:
        for ctx in [*lw.contexts.values(), *(t.ctx for t in lw.twins.values())]:
            ctx.buffer.fill_(float("nan"))
    lw.launch(grid, (shard, b, c, m, n, k, shard.stride(0), shard.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
              meta, peers, delay_s=delay_s, presignal=presignal, copies=copies)
    ref = (full.float() @ b.float())
    return (c.float() - ref).abs().max().item() / max(1.0, ref.abs().max().item())


@pytest.mark.parametrize("world,chunks,order", [(2, 1, "ring"), (4, 3, "ring"), (3, 2, "bidirectional_ring"), (8, 4, "local_first")])
def test_ag_gemm_template_on_loopback(world, chunks, order):
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", chunks, order)
    assert _run_ag_gemm(fk, world, 200, 128, 96, torch.float16, delay_s=0.002) < 2e-2


@pytest.mark.parametrize("flags", ["behind-copy", "own-stream"])
@pytest.mark.parametrize("copies", ["before", "after", "beside", "split", None])
def test_copies_issued_before_after_or_beside_the_launch(copies, flags):
    # The host orders the benchmark compares, each with the flags behind the copies or on their own
    # stream: all correct, launch after launch on one world, receive buffer poisoned.
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 3)
    lw = LoopbackWorld(fk, 4, rank=2, flags=flags)
    for seed in range(3):
        assert _run_ag_gemm(fk, 4, 129, 128, 96, torch.float16, rank=2, seed=seed, lw=lw, poison=True, copies=copies) < 2e-2


def test_two_receive_buffers_alternate_launch_after_launch():
    # buffers=2: a launch's copies wait for the kernel two launches back only; every launch is
    # correct, each buffer poisoned before it, with the default and the own-stream flags.
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 3)
    for flags in ("behind-copy", "own-stream"):
        lw = LoopbackWorld(fk, 4, rank=1, buffers=2, flags=flags)
        for seed in range(5):
            assert _run_ag_gemm(fk, 4, 129, 128, 96, torch.float16, rank=1, seed=seed, lw=lw, poison=True) < 2e-2
        assert len(lw.twins) == 1


def test_ag_gemm_fp32_presignalled_equals_reference():
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 2)
    assert _run_ag_gemm(fk, 4, 96, 64, 64, torch.float32, presignal=True) < 1e-2


@pytest.mark.parametrize("world,chunks,programs", [(2, 2, 8), (4, 3, 20)])
def test_persistent_descriptor_gemm_template_on_loopback(world, chunks, programs):
    # One program per "SM" loops over tiles; A is read through a tensor descriptor (TMA on sm_90).
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm_persistent.kernel import ag_gemm_persistent_kernel

    fk = _fused(ag_gemm_persistent_kernel, "A", chunks)
    rows, n, k = 200, 128, 96
    shard, b, peers, full = _gemm_case(world, rows, n, k, torch.float16)
    m = rows * world
    c = torch.empty(m, n, dtype=torch.float16, device="cuda")
    meta = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4, NUM_SMS=programs)
    LoopbackWorld(fk, world).launch((programs,), (shard, b, c, m, n, k), meta, peers, delay_s=0.002)
    assert fk.build().persistent.remap
    ref = full.float() @ b.float()
    assert (c.float() - ref).abs().max().item() / max(1.0, ref.abs().max().item()) < 2e-2


def test_row_kernel_on_loopback():
    import syncopy  # noqa: F401
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from tests.kernels.rownorm import rms_rows

    world, rows, cols = 4, 301, 96
    fk = _fused(rms_rows, "X", 3)
    g = torch.Generator().manual_seed(1)
    shards = [torch.randn(rows, cols, generator=g) for _ in range(world)]
    w = torch.randn(cols, generator=g).cuda()
    y = torch.empty(rows * world, cols, device="cuda")
    x0 = shards[0].cuda()
    LoopbackWorld(fk, world).launch((rows * world,), (x0, w, y, x0.stride(0), cols, 1e-6), dict(BLOCK=32),
                                    [s.pin_memory() for s in shards], delay_s=0.001)
    full = torch.cat(shards).cuda()
    ref = full * torch.rsqrt(full.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    assert torch.allclose(y, ref, atol=1e-4, rtol=1e-4)


def test_2d_grid_gemm_tiles_spanning_chunks():
    import triton

    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from tests.kernels.gemm2d import gemm_2d

    world, rows, n, k = 3, 77, 64, 64
    fk = _fused(gemm_2d, "a", 4)
    shard, b, peers, full = _gemm_case(world, rows, n, k, torch.float32, seed=3)
    m = rows * world
    c = torch.empty(m, n, device="cuda")
    LoopbackWorld(fk, world).launch((triton.cdiv(m, 32), triton.cdiv(n, 32)),
                                    (shard, b, c, m, n, k, shard.stride(0), shard.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
                                    dict(BR=32, BC=32, BI=32), peers, delay_s=0.001)
    assert torch.allclose(c, full @ b, atol=1e-2, rtol=1e-2)


def test_bounded_wait_fires_on_withheld_chunk():
    import triton

    import syncopy
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 2, timeout_s=0.2)
    world, rows, n, k = 2, 64, 64, 64
    shard, b, peers, _ = _gemm_case(world, rows, n, k, torch.float16)
    m = rows * world
    c = torch.empty(m, n, dtype=torch.float16, device="cuda")
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        LoopbackWorld(fk, world).launch((triton.cdiv(m, 64) * triton.cdiv(n, 64),),
                                        (shard, b, c, m, n, k, shard.stride(0), shard.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
                                        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4), peers, withhold=frozenset({3}))
    assert info.value.chunk == (1, 1) and info.value.rank == 0 and info.value.epoch == 1


def test_thousand_back_to_back_launches_random_rows():
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 3)
    rng = random.Random(0)
    worlds = {}
    worst = 0.0
    for i in range(1000):
        rows = rng.choice([37, 64, 100, 129, 250])
        lw = worlds.setdefault(rows, LoopbackWorld(fk, 4))
        verify = i % 25 == 0
        err = _run_ag_gemm(fk, 4, rows, 64, 64, torch.float16, lw=lw, seed=i if verify else 0, poison=verify)
        if verify:
            worst = oracles.worst([worst, err])
    assert worst < 2e-2


def test_signals_are_never_reset_epochs_increase():
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 2)
    lw = LoopbackWorld(fk, 2)
    for _ in range(5):
        assert _run_ag_gemm(fk, 2, 64, 64, 64, torch.float16, lw=lw) < 2e-2
    ctx = next(iter(lw.contexts.values()))
    assert ctx.epoch == 5 and int(ctx.signals[4:8].min()) == 5


def _ag_args(shard, b, c, m, n, k):
    return (shard, b, c, m, n, k, shard.stride(0), shard.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def test_warm_launches_enqueue_without_host_sync_and_errors_surface_later():
    # A warm launch behaves like a CUDA op: under sync debug mode "error" any host sync on its path
    # raises. Its errors are not lost: a withheld chunk's timeout is raised by synchronize().
    import triton

    import syncopy
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    world, rows, n, k = 4, 256, 128, 96
    fk = _fused(ag_gemm_kernel, "A", 3, timeout_s=0.5)
    lw = LoopbackWorld(fk, world, rank=1)
    meta = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)
    m = rows * world
    grid = (triton.cdiv(m, 64) * triton.cdiv(n, 64),)
    cases = [_gemm_case(world, rows, n, k, torch.float16, rank=1, seed=s) for s in range(3)]
    outs = [torch.empty(m, n, dtype=torch.float16, device="cuda") for _ in cases]
    lw.launch(grid, _ag_args(cases[0][0], cases[0][1], outs[0], m, n, k), meta, cases[0][2])  # cold: probe, context
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            for (shard, b, peers, _), c in zip(cases, outs):
                lw.launch(grid, _ag_args(shard, b, c, m, n, k), meta, peers, sync=False)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    lw.synchronize()
    for (shard, b, peers, full), c in zip(cases, outs):
        ref = full.float() @ b.float()
        assert (c.float() - ref).abs().max().item() / ref.abs().max().item() < 2e-2
    shard, b, peers, _ = cases[0]
    lw.launch(grid, _ag_args(shard, b, outs[0], m, n, k), meta, peers, sync=False, withhold=frozenset({7}))  # epoch 11
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        lw.synchronize()
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (1, (2, 1), 11)


@pytest.mark.parametrize("flag_mode", ["behind-copy", "own-stream"])
def test_every_small_chunk_is_complete_when_its_flag_is_seen(flag_mode):
    # The flag behind each chunk is a stream write-value (a memory barrier first), on the copies'
    # stream or (own-stream) on a stream that waits for an event recorded behind the chunk: a kernel
    # polling the flags checksums each chunk the moment it sees its flag, launch after launch, with
    # the buffer poisoned in between. Any chunk seen before its data is complete fails the sums.
    import triton
    import triton.language as tl

    from syncopy import device as dev
    from syncopy.runtime.streams import streamops

    @triton.jit
    def _sum_on_flag(flags, buf, sums, epoch, ROWS: tl.constexpr, COLS: tl.constexpr):
        g = tl.program_id(0)
        flag = dev._flag_of_block(flags + g)
        while flag < epoch:
            flag = dev._flag_of_block(flags + g)
        offs = (g * ROWS + tl.arange(0, ROWS))[:, None] * COLS + tl.arange(0, COLS)[None, :]
        x = tl.load(buf + offs, cache_modifier=".cg")
        tl.store(sums + g, tl.sum(tl.sum(x, axis=1), axis=0))

    ops = streamops.cuda_ops()
    chunks, rows, cols = 64, 4, 64
    sources = [torch.randint(-8, 8, (chunks * rows, cols), dtype=torch.int32).float().pin_memory() for _ in range(2)]
    want = [s.view(chunks, rows * cols).sum(1).cuda() for s in sources]
    buf = torch.empty(chunks * rows, cols, device="cuda")
    flags = torch.zeros(chunks, dtype=torch.int32, device="cuda")
    sums = torch.empty(chunks, device="cuda")
    flags_ptr = flags.data_ptr()
    side, flag_stream = torch.cuda.Stream(), torch.cuda.Stream()
    events = [ops.event() for _ in range(chunks)]
    chunk_bytes = rows * cols * 4
    for epoch in range(1, 41):
        src = sources[epoch % 2]
        buf.fill_(float("nan"))
        side.wait_stream(torch.cuda.current_stream())
        _sum_on_flag[(chunks,)](flags, buf, sums, epoch, ROWS=rows, COLS=cols)
        h, hf = side.cuda_stream, flag_stream.cuda_stream
        for g in range(chunks):
            ops.copy(buf.data_ptr() + g * chunk_bytes, src.data_ptr() + g * chunk_bytes, chunk_bytes, h)
            if flag_mode == "own-stream":
                ops.record(events[g], h)
                ops.wait_event(hf, events[g])
                ops.write32(flags_ptr + 4 * g, epoch, hf)
            else:
                ops.write32(flags_ptr + 4 * g, epoch, h)
        torch.cuda.synchronize()
        assert torch.equal(sums, want[epoch % 2]), f"epoch {epoch}: chunks {torch.nonzero(sums != want[epoch % 2]).flatten().tolist()}"


def test_a_stream_waits_for_a_flag_the_kernel_releases():
    # cuStreamWaitValue32: the copy behind the wait starts only once the kernel's release store
    # raised the flag, and it copies what the kernel wrote before the release.
    import triton
    import triton.language as tl

    from syncopy.runtime.streams import streamops

    from syncopy import device as dev

    @triton.jit
    def _write_then_release(out, flag, value, spin_ns, N: tl.constexpr):
        start = dev._globaltimer()
        now = start
        while now - start < spin_ns:  # hold the flag back a while: the copy must not start early
            now = dev._globaltimer()
        tl.store(out + tl.arange(0, N), value + tl.arange(0, N))
        tl.debug_barrier()
        tl.atomic_xchg(flag, value, sem="release", scope="sys")

    ops = streamops.cuda_ops()
    n = 1024
    out = torch.zeros(n, dtype=torch.int32, device="cuda")
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    host = torch.zeros(n, dtype=torch.int32).pin_memory()
    side = torch.cuda.Stream()
    for value in range(1, 6):
        # The writer first: a wait enqueued ahead of it could share its hardware queue and block it.
        _write_then_release[(1,)](out, flag, value, 200_000, N=n)
        ops.wait32(flag.data_ptr(), value, side.cuda_stream)
        ops.copy(host.data_ptr(), out.data_ptr(), 4 * n, side.cuda_stream)
        torch.cuda.synchronize()
        assert torch.equal(host, value + torch.arange(n, dtype=torch.int32))


@pytest.mark.parametrize("world,chunks,rows,n,k", [(2, 2, 512, 256, 512), (4, 3, 2048, 2048, 8192)])
def test_gemm_rs_on_loopback_sends_while_the_kernel_runs(world, chunks, rows, n, k):
    import triton

    import syncopy
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = syncopy.overlap(dict(pattern="reduce_scatter", tensor="C", dim=0, chunks_per_rank=chunks, order="local_first"),
                         timeout_s=20.0)(ag_gemm_kernel)
    rank = 1
    m = rows * world
    lw = LoopbackWorld(fk, world, rank)
    meta = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(m, k, generator=g).half().cuda()
        b = torch.randn(k, n, generator=g).half().cuda()
        peers = [torch.randn(rows, n, generator=g).half().pin_memory() for _ in range(world)]
        out = torch.full((rows, n), float("nan"), dtype=torch.float16, device="cuda")
        grid = (triton.cdiv(m, 64) * triton.cdiv(n, 64),)
        ctx = lw.launch(grid, _ag_args(a, b, out, m, n, k), meta, peers, timeline=True)
        partial = a.float() @ b.float()
        want = partial[rank * rows:(rank + 1) * rows] + sum(p.float().cuda() for r, p in enumerate(peers) if r != rank)
        assert (out.float() - want).abs().max().item() / want.abs().max().item() < 2e-2
        wire = lw.launch_wire(out)
        for gch in wire.sends:
            lo, hi = ctx.plan.bounds(gch)
            assert (wire.outbox[lo:hi].float().cuda() - partial[lo:hi]).abs().max().item() < 0.5
        t = lw.timeline_ms()
        sent = sorted(v for name, v in t.items() if isinstance(name, tuple))
        assert len(sent) == (world - 1) * chunks
        if k >= 4096:  # a kernel that outlasts the host's enqueueing of the sends (they go after it)
            assert sent[0] < t["end"]
