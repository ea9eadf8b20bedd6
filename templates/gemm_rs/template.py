"""gemm_rs: C_r = rows r*M/W..(r+1)*M/W of sum over ranks of A_r @ B_r; shape M,N,K with M the total
output rows (a multiple of the world size) and K each rank's slice of the inner dimension."""
import torch
import torch.distributed as dist
import triton

from syncopy.templates import matmul_operands, refusals_told, refuse, same_on_every_rank, world_size

DEFAULT_SHAPE = (96, 64, 48)
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 6e-2}
META = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)


def inputs(rank, world, shape, dtype, seed=0):
    m, n, k = shape
    m -= m % world  # every rank keeps the same number of rows
    a = torch.randn(m, k, generator=torch.Generator().manual_seed(seed * 1000 + rank)).to(dtype)
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(seed * 1000 + 500 + rank)).to(dtype)
    return {"a": a, "b": b}


@refusals_told
def launch(fused, a, b, group=None, **meta):
    """This rank's rows of reduce_scatter(a @ b), fused: chunks leave as their tiles finish."""
    meta = {**META, **meta}
    world = world_size(group)
    matmul_operands("gemm_rs", a, b)
    (m, k), n = a.shape, b.shape[1]
    if m % world:
        refuse("gemm_rs", f"a has {m} rows, which {world} ranks cannot share evenly (rank r keeps rows r*M/{world}.."
                          f"(r+1)*M/{world} of the sum); give a a multiple of {world} rows")
    facts = {"a with {} rows": m, "b with {} columns": n, "a and b as {}": str(a.dtype)}
    why = ("reduce_scatter sums every rank's a @ b: give every rank's a the same rows and its b the same "
           "columns, in one dtype")
    with same_on_every_rank("gemm_rs", facts, why):  # said with the launch (runtime/launch/agreement.py)
        c = torch.empty(m // world, n, dtype=a.dtype, device=a.device)
        grid = (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))
        # C's strides are those of the full (unreduced) product, which the kernel writes.
        fused[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), n, 1, **meta, group=group)
    return c


def reference(a, b, group=None):
    """mm, then reduce_scatter (all_reduce and this rank's rows: gloo has no reduce_scatter)."""
    full = a.float() @ b.float()
    dist.all_reduce(full, group=group)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    rows = a.shape[0] // world
    return full[rank * rows:(rank + 1) * rows].to(a.dtype)


# Types for `syncopy compile gemm_rs` (fp16 operands, row-major).
SIGNATURE = {"A": "*fp16", "B": "*fp16", "C": "*fp16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_ak": "i32",
             "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32", "stride_cn": "i32"}
CONSTEXPRS = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
