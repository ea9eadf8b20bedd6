"""gemm_ar: C = sum over ranks of A_r @ B_r on every rank; shape M,N,K with M the output rows (any)
and K each rank's slice of the inner dimension."""
import torch
import torch.distributed as dist
import triton

from syncopy.templates import matmul_operands, refusals_told, same_on_every_rank

DEFAULT_SHAPE = (90, 64, 48)
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 6e-2}
META = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2)


def inputs(rank, world, shape, dtype, seed=0):
    m, n, k = shape
    a = torch.randn(m, k, generator=torch.Generator().manual_seed(seed * 1000 + rank)).to(dtype)
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(seed * 1000 + 500 + rank)).to(dtype)
    return {"a": a, "b": b}


@refusals_told
def launch(fused, a, b, group=None, **meta):
    """all_reduce(a @ b), fused: each chunk is reduced as soon as its tiles are stored."""
    meta = {**META, **meta}
    matmul_operands("gemm_ar", a, b)
    (m, k), n = a.shape, b.shape[1]
    facts = {"a with {} rows": m, "b with {} columns": n, "a and b as {}": str(a.dtype)}
    why = ("all_reduce sums every rank's a @ b: give every rank's a the same rows and its b the same columns, "
           "in one dtype")
    with same_on_every_rank("gemm_ar", facts, why):  # said with the launch (runtime/launch/agreement.py)
        c = torch.empty(m, n, dtype=a.dtype, device=a.device)
        grid = (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
        fused[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **meta, group=group)
    return c


def reference(a, b, group=None):
    """mm, then all_reduce."""
    full = a.float() @ b.float()
    dist.all_reduce(full, group=group)
    return full.to(a.dtype)


# Types for `syncopy compile gemm_ar` (fp16 operands, row-major).
SIGNATURE = {"A": "*fp16", "B": "*fp16", "C": "*fp16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_ak": "i32",
             "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32", "stride_cn": "i32"}
CONSTEXPRS = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8)
