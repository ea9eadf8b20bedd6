"""A GEMM on a 2-D grid; row tiles are not aligned to chunks, so a tile often spans two of them."""
import triton
import triton.language as tl


@triton.jit
def gemm_2d(a, b, c, rows, cols, inner, sa0, sa1, sb0, sb1, sc0, sc1,
            BR: tl.constexpr, BC: tl.constexpr, BI: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    r = i * BR + tl.arange(0, BR)
    q = j * BC + tl.arange(0, BC)
    acc = tl.zeros((BR, BC), dtype=tl.float32)
    for start in range(0, inner, BI):
        kk = start + tl.arange(0, BI)
        av = tl.load(a + r[:, None] * sa0 + kk[None, :] * sa1, mask=(r[:, None] < rows) & (kk[None, :] < inner), other=0.0)
        bv = tl.load(b + kk[:, None] * sb0 + q[None, :] * sb1, mask=(kk[:, None] < inner) & (q[None, :] < cols), other=0.0)
        acc += tl.dot(av, bv)
    tl.store(c + r[:, None] * sc0 + q[None, :] * sc1, acc.to(c.dtype.element_ty), mask=(r[:, None] < rows) & (q[None, :] < cols))
