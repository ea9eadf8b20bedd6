"""Rank function of test_attention_trace.py (spawned: module level)."""
from __future__ import annotations


def traced_attention(rank: int, world: int, latency_s: float, hold: bool = False) -> dict:
    """ag_attention's kernel fused with `tensor: [K, V]` on a slow in-order link, traced: two launches
    (non-causal, then causal) with new data, each checked against torch's SDPA on the gathered K and
    V, then once through torch.ops.syncopy.ag_attention (causal). Returns the errors and, per launch, the chunks landed when each tile started and the total."""
    import torch

    import syncopy
    from syncopy import templates
    from syncopy.runtime.transport.link import Link
    from tests.templates.template_workers import meaning

    t = templates.get("ag_attention")
    # hold: each remote chunk stays out of the buffer, its flag down, until a tile was seen waiting for it
    # (Link.hold_until_waited): what a tile saw at its start does not depend on how fast this machine is.
    link = Link(latency_s=latency_s, hold_until_waited=True, hold_s=3.0) if hold else Link(latency_s=latency_s)
    fused = syncopy.overlap(t.schedule(), trace=True, poison_receive=True, link=link)(t.kernel())
    out = {"errors": [], "starts": [], "total": 0}
    for seed in (0, 1):
        inp = t.module.inputs(rank, world, (16, 2, 16), torch.float32, seed=seed)
        got = t.module.launch(fused, **inp, BM=16, BN=8)
        want = meaning("ag_attention", rank, world, inp)
        out["errors"].append(float(torch.nan_to_num((got.float() - want).abs(), nan=float("inf")).max()))
        trace = fused.last_trace
        out["starts"].append([arrived for _, _, arrived in trace.tile_starts])
        out["total"] = trace.total_chunks
    # The same operator as torch.ops.syncopy.ag_attention (templates/ops.py: q, k, v, causal).
    import syncopy.templates.ops as ops

    inp = t.module.inputs(rank, world, (16, 2, 16), torch.float32, seed=3)
    got = ops.ag_attention(inp["q"], inp["k"], inp["v"], causal=True)
    out["op_error"] = float((got.float() - meaning("ag_attention", rank, world, inp)).abs().max())
    return out
