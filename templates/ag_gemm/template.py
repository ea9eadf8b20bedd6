"""ag_gemm: C = all_gather(A) @ B; shape M,N,K with M the rows of A per rank."""
import torch
import triton

from syncopy.templates import all_gather_rows, matmul_operands, refusals_told, world_size

DEFAULT_SHAPE = (96, 64, 64)
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 6e-2}
META = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4)


def inputs(rank, world, shape, dtype, seed=0):
    rows, n, k = shape
    a = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed * 1000 + rank)).to(dtype)
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(seed)).to(dtype)
    return {"a": a, "b": b}


@refusals_told
def launch(fused, a, b, group=None, **meta):
    """C = all_gather(a) @ b, fused."""
    meta = {**META, **meta}
    world = world_size(group)
    matmul_operands("ag_gemm", a, b)
    m, k = a.shape[0] * world, a.shape[1]
    n = b.shape[1]
    c = torch.empty(m, n, dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
    fused[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **meta, group=group)
    return c


def reference(a, b, group=None):
    return (all_gather_rows(a, group).float() @ b.float()).to(a.dtype)


# Types for `syncopy compile ag_gemm` (fp16 operands, row-major).
SIGNATURE = {"A": "*fp16", "B": "*fp16", "C": "*fp16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_ak": "i32",
             "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32", "stride_cn": "i32"}
CONSTEXPRS = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8)
