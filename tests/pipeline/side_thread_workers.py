"""Rank bodies of tests/pipeline/test_side_thread.py."""
from __future__ import annotations

import os

import torch


def evicted_and_repeated(rank: int, world: int) -> dict:
    """(1) tp_mlp with one context kept per operator and group (SYNCOPY_MAX_CONTEXTS=1) on shapes A, A,
    B, B, A: the fifth launch finds its plan warm but its operators' contexts gone, and must remake them
    on the caller's thread (the side thread once deadlocked there on the group's turn). (2) One GEMM-RS
    operator launched twice in a pipeline: its context runs one graph operator's transfers, not both."""
    import syncopy
    from syncopy import templates

    os.environ["SYNCOPY_MAX_CONTEXTS"] = "1"
    try:
        t = templates.get("tp_mlp")
        op = t.fused(chunks_per_rank=1, poison_receive=True, timeout_s=20.0)
        placed, errs = [], []
        for seed, m in enumerate((4, 4, 6, 6, 4)):
            inp = t.module.inputs(rank, world, (m, 8, 8), torch.float32, seed=seed)
            y, ref = t.module.launch(op, **inp), t.module.reference(**inp)
            errs.append((y - ref).abs().max().item())
            placed.append(op.pipeline.placement.why)
    finally:
        del os.environ["SYNCOPY_MAX_CONTEXTS"]
    rs = templates.get("gemm_rs")
    twice = rs.fused(timeout_s=20.0, poison_receive=True)
    pipe = syncopy.pipeline()
    rs_errs, sends = [], []
    for seed in range(3):
        i1 = rs.module.inputs(rank, world, (16, 8, 8), torch.float32, seed=seed)
        i2 = rs.module.inputs(rank, world, (16, 8, 8), torch.float32, seed=seed + 10)
        with pipe:
            c1 = rs.module.launch(twice, **i1)
            c2 = rs.module.launch(twice, **i2)
        rs_errs += [(c1 - rs.module.reference(**i1)).abs().max().item(), (c2 - rs.module.reference(**i2)).abs().max().item()]
        (ctx, _), = twice.contexts.table.values()
        sends.append(len(ctx.transfers("send")) == len([s for s in ctx.plan.steps if s.kind == "send"]))
    ops = sorted({n.op for n in pipe.graph().nodes if n.kind == "launch"})
    return {"errs": errs, "placed": placed, "rs_errs": rs_errs, "sends": sends, "ops": ops}
