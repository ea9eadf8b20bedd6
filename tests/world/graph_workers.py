"""Rank bodies of tests/world/test_graph_executes.py."""
from __future__ import annotations

import torch


def sends_follow_the_graph(rank: int, world: int, in_order: bool = False) -> dict:
    """Two AG-GEMM launches on the gloo backend; between them this rank's send nodes are put in the
    reverse order in its context's instruction graph. What each launch sent, in the order it sent it.
    `in_order`: the operator gets the harness's in-order slow link (else the process's default link)."""
    from syncopy import explain, templates

    t = templates.get("ag_gemm")
    shape = (16, 32, 32)
    link = {}
    if in_order:
        from tests.world.harness import IN_ORDER

        link = {"link": IN_ORDER}
    op = t.fused(chunks_per_rank=2, order="ring", trace=True, poison_receive=True, timeout_s=30.0, **link)
    out = {"errs": [], "sent": []}
    for seed in range(2):
        inp = t.module.inputs(rank, world, shape, torch.float32, seed=seed)
        y, ref = t.module.launch(op, **inp), t.module.reference(**inp)
        out["errs"].append((y - ref).abs().max().item())
        sends = sorted(op.last_trace.sends.items(), key=lambda kv: kv[1][0])  # (chunk, peer) by when the send began
        out["sent"].append([list(key) for key, _ in sends])
        (ctx, _), = op.contexts.table.values()
        if seed == 0:
            out["graph"] = ctx.graph.text()
            out["explained"] = explain.for_template("ag_gemm", world, rank, shape, 2, "ring").text()
            out["same_graph"] = ctx.instructions()[0] is ctx.graph
            g = ctx.graph
            g.nodes = [n for n in g.nodes if n.kind != "send"] + [n for n in g.nodes if n.kind == "send"][::-1]
    return out
