"""Rung 4, producer side: the notify code (block barrier, acq_rel tile counter, release flag) compiled
and run on a GPU. A world of one moves nothing, so what is checked is the device protocol itself:
after every launch each chunk's flag holds the epoch and its counter exactly its target, launch
after launch with no reset, and the result equals torch's product. Skipped cleanly without CUDA."""
import os
import random
from datetime import timedelta

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs a CUDA device (and TRITON_INTERPRET unset)"),
]


@pytest.fixture(scope="module")
def world_of_one():
    import torch.distributed as dist

    from syncopy.runtime.worlds.processes import free_port

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=timedelta(seconds=60))
    yield


@pytest.mark.parametrize("name", ["gemm_rs", "gemm_ar"])
def test_producer_flags_and_counters_reach_their_targets_every_launch(world_of_one, name):
    from syncopy import device as dev
    from syncopy import templates

    t = templates.get(name)
    fused = t.fused(chunks_per_rank=3)
    rng = random.Random(0)
    worst = 0.0
    for it in range(200):
        m = rng.choice([96, 160, 250])
        a = torch.randn(m, 64, device="cuda", dtype=torch.float16)
        b = torch.randn(64, 96, device="cuda", dtype=torch.float16)
        c = t.module.launch(fused, a, b, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
        ref = a.float() @ b.float()
        worst = max(worst, (c.float() - ref).abs().max().item() / max(1.0, ref.abs().max().item()))
        ctx = next(ctx for (ctx, _) in fused.contexts.table.values() if ctx.buffer.shape[0] == m)
        torch.cuda.synchronize()
        n = ctx.n_chunks
        flags = ctx.signals[dev.SIG_HEADER : dev.SIG_HEADER + n].tolist()
        counters = ctx.signals[dev.SIG_HEADER + n + 2 : dev.SIG_HEADER + 2 * n + 2].tolist()
        assert flags == [ctx.epoch] * n, f"launch {it}: flags {flags}, epoch {ctx.epoch}"
        assert counters == ctx.targets, f"launch {it}: counters {counters}, targets {ctx.targets}"
    assert worst < 2e-2


def test_evicted_world_of_one_contexts_free_their_error_rings(world_of_one):
    """An AG-GEMM kept to one context, launched on three shapes in turn: each launch evicts the last
    shape's context, whose error ring is read and its CUDA events destroyed (cuEventDestroy) while
    nothing of it may still run; every launch stays right, as does one after release()."""
    from syncopy import templates

    t = templates.get("ag_gemm")
    fused = t.fused(chunks_per_rank=2)
    fused.max_contexts = 1
    rings = []
    worst = 0.0
    for it in range(9):
        m = [96, 160, 250][it % 3]
        a = torch.randn(m, 64, device="cuda", dtype=torch.float16)
        b = torch.randn(64, 96, device="cuda", dtype=torch.float16)
        c = t.module.launch(fused, a, b, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
        ref = a.float() @ b.float()
        worst = max(worst, (c.float() - ref).abs().max().item() / max(1.0, ref.abs().max().item()))
        (ctx, _), = fused.contexts.table.values()
        rings.append(ctx.own_errors)
    assert worst < 2e-2
    assert all(not r.done for r in rings[:-1]) and len(rings[-1].done) == rings[-1].RING  # the evicted ones were freed
    fused.release()
    assert not rings[-1].done
    a = torch.randn(96, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 96, device="cuda", dtype=torch.float16)
    c = t.module.launch(fused, a, b, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    assert (c.float() - a.float() @ b.float()).abs().max().item() < 2e-2 * max(1.0, (a.float() @ b.float()).abs().max().item())
