"""ag_attention: O = sdpa(Q, all_gather(K), all_gather(V)) (context parallelism); shape M,N,K is M
sequence rows per rank, N heads, K the head dim (a power of two >= 16). Queries of rank r sit at
global positions r*M .. r*M + M - 1, so causal attention lets them see the keys of ranks <= r.
`syncopy run` launches alternate: even launches non-causal, odd ones causal."""
import math

import torch
import triton

from syncopy.templates import all_gather_rows, rank_of, world_size

DEFAULT_SHAPE = (32, 2, 16)
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 6e-2}
META = dict(BM=16, BN=16)


def inputs(rank, world, shape, dtype, seed=0):
    rows, heads, dim = shape
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    q, k, v = (torch.randn(rows, heads, dim, generator=g).to(dtype) for _ in range(3))
    return {"q": q, "k": k, "v": v, "causal": bool(seed % 2)}


def launch(fused, q, k, v, causal=False, group=None, **meta):
    """O = scaled_dot_product_attention(q, all_gather(k), all_gather(v), is_causal over global positions), fused."""
    meta = {**META, **meta}
    m, heads, dim = q.shape
    n = k.shape[0] * world_size(group)
    out = torch.empty_like(q)
    grid = (triton.cdiv(m, meta["BM"]), heads)
    fused[grid](q, k, v, out, m, n, rank_of(group) * m, 1.0 / math.sqrt(dim), H=heads, D=dim, CAUSAL=causal, **meta, group=group)
    return out


def reference(q, k, v, causal=False, group=None):
    keys, values = all_gather_rows(k, group), all_gather_rows(v, group)
    m, n = q.shape[0], keys.shape[0]
    start = rank_of(group) * m
    mask = None
    if causal:
        mask = torch.arange(n)[None, :] <= start + torch.arange(m)[:, None]
    o = torch.nn.functional.scaled_dot_product_attention(q.float().transpose(0, 1), keys.float().transpose(0, 1),
                                                         values.float().transpose(0, 1), attn_mask=mask)
    return o.transpose(0, 1).to(q.dtype)


# Types for `syncopy compile ag_attention` (fp16, [rows, heads, head dim] contiguous).
SIGNATURE = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "Out": "*fp16", "M": "i32", "N": "i32", "q_start": "i32", "sm_scale": "fp32"}
CONSTEXPRS = dict(H=8, D=64, BM=64, BN=64, CAUSAL=True)
