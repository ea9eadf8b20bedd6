"""Rank bodies of the pipeline tests (spawned by tests/world/harness.py)."""
from __future__ import annotations

import torch
import torch.distributed as dist


def tp_mlp(rank: int, world: int, shape=(20, 32, 48), launches: int = 3, chunks: int = 2, dtype=torch.float32,
           trace=None) -> dict:
    """`launches` tp_mlp launches with fresh inputs each and NaN-poisoned receive buffers: the worst
    error against torch, and the ids of every buffer syncopy holds after each launch."""
    from syncopy import templates

    t = templates.get("tp_mlp")
    op = t.fused(chunks_per_rank=chunks, poison_receive=True, timeout_s=30.0, trace=trace or False)
    worst, held = 0.0, []
    for seed in range(launches):
        inp = t.module.inputs(rank, world, shape, dtype, seed=seed)
        y = t.module.launch(op, **inp)
        ref = t.module.reference(**inp)
        err = ((y.float() - ref.float()).abs().max() / max(1.0, ref.float().abs().max().item())).item()
        worst = max(worst, err if err == err else float("inf"))
        held.append(_held(op))
    plan = next(iter(op.pipeline.plans.values()))
    return {"err": worst, "held": held, "plans": len(op.pipeline.plans), "edges": [tuple(vars(e).values()) for e in plan.edges],
            "epochs": [link.epoch for link in plan.links.values()]}


def _held(op) -> list:
    """The storage of every buffer, signal pad and table syncopy holds for `op` (an allocation changes it)."""
    ptrs = []
    for plan in op.pipeline.plans.values():
        for link in plan.links.values():
            ptrs += [link.ctx.data_ptr(), link.signals.data_ptr()]
        for v in plan.variants:
            for ctx, _ in v._contexts.values():
                ptrs += [t.data_ptr() for t in (ctx.buffer, ctx.signals, ctx.ctx, *ctx.extras)]
                ptrs += [entry[0].data_ptr() for entry in ctx.orders.values()]
    ptrs += [h.data_ptr() for h in op._hidden.values()]
    return ptrs
