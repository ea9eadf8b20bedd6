"""Rung 4: the fused kernels on a real GPU, peers emulated by copy-engine copies (one GPU suffices).
Skipped cleanly without CUDA."""
import os
import random

import pytest
import torch

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

    from syncopy.runtime.loopback import LoopbackWorld

    shard, b, peers, full = _gemm_case(world, rows, n, k, dtype, rank, seed)
    m = rows * world
    c = torch.empty(m, n, dtype=dtype, device="cuda")
    meta = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)
    grid = (triton.cdiv(m, 64) * triton.cdiv(n, 64),)
    lw = lw or LoopbackWorld(fk, world, rank)
    if poison:
        for ctx in lw.contexts.values():
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


@pytest.mark.parametrize("copies", ["before", "after", "beside"])
def test_copies_issued_before_after_or_beside_the_launch(copies):
    # The three host orders the benchmark compares: all correct, launch after launch on one world.
    from syncopy.runtime.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 3)
    lw = LoopbackWorld(fk, 4, rank=2)
    for seed in range(3):
        assert _run_ag_gemm(fk, 4, 129, 128, 96, torch.float16, rank=2, seed=seed, lw=lw, poison=True, copies=copies) < 2e-2


def test_ag_gemm_fp32_presignalled_equals_reference():
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 2)
    assert _run_ag_gemm(fk, 4, 96, 64, 64, torch.float32, presignal=True) < 1e-2


@pytest.mark.parametrize("world,chunks,programs", [(2, 2, 8), (4, 3, 20)])
def test_persistent_descriptor_gemm_template_on_loopback(world, chunks, programs):
    # One program per "SM" loops over tiles; A is read through a tensor descriptor (TMA on sm_90).
    from syncopy.runtime.loopback import LoopbackWorld
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
    from syncopy.runtime.loopback import LoopbackWorld
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

    from syncopy.runtime.loopback import LoopbackWorld
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
    from syncopy.runtime.loopback import LoopbackWorld
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
    from syncopy.runtime.loopback import LoopbackWorld
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
            worst = max(worst, err)
    assert worst < 2e-2


def test_signals_are_never_reset_epochs_increase():
    from syncopy.runtime.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = _fused(ag_gemm_kernel, "A", 2)
    lw = LoopbackWorld(fk, 2)
    for _ in range(5):
        assert _run_ag_gemm(fk, 2, 64, 64, 64, torch.float16, lw=lw) < 2e-2
    ctx = next(iter(lw.contexts.values()))
    assert ctx.epoch == 5 and int(ctx.signals[4:8].min()) == 5
