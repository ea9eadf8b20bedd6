"""a2a_gemm: MoE dispatch + expert GEMM. Shape M,N,K: M the token rows a rank holds (it sends M/W to
each rank and receives as many), K the hidden size, N the expert width; E=2 experts per rank, the
tokens of each block grouped by expert (uniform routing, equal splits)."""
import torch
import torch.distributed as dist
import triton

from syncopy.templates import world_size

DEFAULT_SHAPE = (128, 32, 32)
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 6e-2}
EXPERTS = 2
META = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32)


def _tokens_per_block(m, world, block_m):
    group = EXPERTS * block_m
    return max(group, (m // world) // group * group)


def inputs(rank, world, shape, dtype, seed=0):
    m, n, k = shape
    t = _tokens_per_block(m, world, META["BLOCK_M"])
    x = torch.randn(world * t, k, generator=torch.Generator().manual_seed(seed * 1000 + rank)).to(dtype)
    w = torch.randn(EXPERTS, k, n, generator=torch.Generator().manual_seed(seed * 1000 + 500 + rank)).to(dtype)
    return {"x": x, "w": w}


def launch(fused, x, w, group=None, **meta):
    """Y = expert_gemm(all_to_all(x), w), fused: tiles of a peer's tokens start as those arrive."""
    meta = {**META, **meta}
    world = world_size(group)
    (m, k), n = x.shape, w.shape[2]
    t = m // world
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))
    fused[grid](x, w, y, m, n, k, t, t // EXPERTS, x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
                y.stride(0), y.stride(1), **meta, group=group)
    return y


def reference(x, w, group=None):
    """all_to_all_single, then each expert's rows times its weight."""
    received = torch.empty_like(x)
    dist.all_to_all_single(received, x.contiguous(), group=group)
    world = dist.get_world_size(group)
    t = x.shape[0] // world
    per = t // EXPERTS
    expert = (torch.arange(x.shape[0]) % t) // per
    out = torch.empty(x.shape[0], w.shape[2], dtype=torch.float32)
    for e in range(EXPERTS):
        rows = expert == e
        out[rows] = received[rows].float() @ w[e].float()
    return out.to(x.dtype)


# Types for `syncopy compile a2a_gemm` (fp16 operands, row-major).
SIGNATURE = {"X": "*fp16", "Wt": "*fp16", "Y": "*fp16", "M": "i32", "N": "i32", "K": "i32", "tokens_per_block": "i32",
             "tokens_per_expert": "i32", "stride_xm": "i32", "stride_xk": "i32", "stride_we": "i32", "stride_wk": "i32",
             "stride_wn": "i32", "stride_ym": "i32", "stride_yn": "i32"}
CONSTEXPRS = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
