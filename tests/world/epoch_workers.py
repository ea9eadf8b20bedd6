"""Rank functions of test_epoch_wrap.py: operators whose epochs cross 2^31 (the int32 words the
device compares wrap there), consumer and producer, on gloo."""
from __future__ import annotations

from syncopy.runtime.link import Link

NEAR = 2**31 - 3  # the epoch the contexts jump to after their first launch: launches 2^31 - 2 ... 2^31 + 1 follow


def run_across_the_wrap(rank: int, world: int) -> dict:
    """ag_gemm and gemm_rs: a first launch, then every context jumps near 2^31, then four launches
    with new data. Errors against torch per launch, and the last epoch word each context holds."""
    import torch

    from syncopy import templates

    out: dict = {}
    for name, shape in (("ag_gemm", (8, 16, 16)), ("gemm_rs", (16, 16, 16))):
        t = templates.get(name)
        mod = t.module
        fused = t.fused(chunks_per_rank=2, poison_receive=True, link=Link(latency_s=0.2), timeout_s=20)
        errs = []
        for it in range(5):
            if it == 1:
                for ctx, _ in fused._contexts.values():
                    ctx.epoch = NEAR
            inp = mod.inputs(rank, world, shape, torch.float32, seed=it)
            got, ref = mod.launch(fused, **inp), mod.reference(**inp)
            errs.append(float(torch.nan_to_num((got - ref).abs(), nan=float("inf")).max()))
        (ctx, _), = fused._contexts.values()
        out[name] = {"errs": errs, "epoch": ctx.epoch, "word": int(ctx.ctx[0])}
    return out
