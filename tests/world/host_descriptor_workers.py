"""Rank functions of tests/world/test_host_descriptors.py (spawned: module level): attention kernels
launched with tensor descriptors made on the host (`TensorDescriptor`, Triton's fused-attention
tutorial on Hopper) over this rank's key and value shards, fused with `tensor: [desc_k, desc_v]`,
three launches of new data (NaN-poisoned receive buffers), against torch (the verifier's examples:
tests/world/verify_families.py, run_host_descriptors)."""
from __future__ import annotations

import math

from tests.world.helper_workers import BLOCK, CHUNKS, D, LAUNCHES, ROWS, _gathered, _gen, _worst, causal_attention

#: kernel -> the module that holds it (each reads desc_k and desc_v, passed as host descriptors)
KERNELS = {"attn_host_desc": "attention_host_descriptors", "attn_host_desc_inline": "attention_host_descriptors",
           "attn_desc_by_helper": "attention_descriptors"}
#: the kernels that hand desc_k and desc_v to one helper, inside which checked mode does not look (it
#: checks descriptor reads in the kernel only, read_check.py): verified under these conditions only
#: (tests/world/verify_families.py)
HELPER_HANDED = ("attn_host_desc", "attn_desc_by_helper")
CONDITIONS = ("reordered", "held")


def kernel_of(name: str):
    import importlib

    return getattr(importlib.import_module(f"tests.kernels.{KERNELS[name]}"), name)


def host_launch(name: str, rank: int, world: int, launch: int) -> tuple:
    """(grid, args, kwargs, (q, out, lse, k, v)) of one launch: every query row on every rank, this
    rank's ROWS keys and values; every tensor handed in as a host TensorDescriptor, the keys and values
    over this rank's shards."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    n = world * ROWS
    g = _gen(launch, rank, len(name), 7)
    q = torch.randn(n, D, generator=g)
    k, v = (torch.randn(ROWS, D, generator=g) for _ in range(2))
    out, lse = torch.full((n, D), float("nan")), torch.full((n,), float("nan"))
    desc = [TensorDescriptor(t, list(t.shape), [D, 1], [BLOCK, D]) for t in (q, k, v, out)]
    meta = dict(HEAD_DIM=D, BLOCK_M=BLOCK, BLOCK_N=BLOCK)
    return (n // BLOCK, 1), [1.0 / math.sqrt(D), lse, 1, 1, *desc, n], meta, (q, out, lse, k, v)


def traced(rank: int, world: int, name: str, hold: bool) -> dict:
    """`name` fused on a slow in-order link (hold: each remote chunk held until a tile is seen waiting
    for it), traced over three launches of new data: the errors of the output and of M against torch,
    per launch the chunks landed when each tile started, the total, the fallback warnings."""
    import warnings

    import syncopy
    from syncopy.runtime.transport.link import Link

    link = Link(latency_s=0.002, hold_until_waited=True, hold_s=3.0) if hold else Link(latency_s=0.002)
    sched = {"pattern": "all_gather", "kernel": name, "tensor": ["desc_k", "desc_v"], "dim": 0,
             "chunks_per_rank": CHUNKS, "order": "ring"}
    fused = syncopy.overlap(sched, trace=True, poison_receive=True, link=link)(kernel_of(name))
    out = {"errors": [], "starts": [], "total": 0, "warnings": []}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for launch in range(LAUNCHES):
            grid, args, meta, (q, o, lse, k, v) = host_launch(name, rank, world, launch)
            fused[grid](*args, **meta)
            want_o, want_lse = causal_attention(q, _gathered(k), _gathered(v))
            out["errors"].append(max(_worst(o, want_o), _worst(lse, want_lse)))
            trace = fused.last_trace
            out["starts"].append([arrived for _, _, arrived in sorted(trace.tile_starts, key=lambda t: t[1])])
            out["total"] = trace.total_chunks
    out["warnings"] = [str(w.message) for w in seen if issubclass(w.category, syncopy.SyncopyFallbackWarning)]
    return out

