"""A GEMM whose output rows are reduce-scattered (row-parallel linear layer)."""
import triton
import triton.language as tl


@triton.jit
def _tile(pid, width):
    # Tiles go row-major over the output.
    return pid // width, pid % width


@triton.jit
def row_parallel_linear(x, w, y, rows, cols, inner,
                        sx0, sx1, sw0, sw1, sy0, sy1,
                        BR: tl.constexpr, BC: tl.constexpr, BI: tl.constexpr):
    """y = x @ w for this rank's slice of the inner dimension."""
    tile_r, tile_c = _tile(tl.program_id(0), tl.cdiv(cols, BC))
    offs_r = tile_r * BR + tl.arange(0, BR)
    offs_c = tile_c * BC + tl.arange(0, BC)
    offs_i = tl.arange(0, BI)
    acc = tl.zeros((BR, BC), dtype=tl.float32)
    for i in range(0, tl.cdiv(inner, BI)):
        xt = tl.load(x + offs_r[:, None] * sx0 + (i * BI + offs_i)[None, :] * sx1,
                     mask=(offs_r[:, None] < rows) & ((i * BI + offs_i)[None, :] < inner), other=0.0)
        wt = tl.load(w + (i * BI + offs_i)[:, None] * sw0 + offs_c[None, :] * sw1,
                     mask=((i * BI + offs_i)[:, None] < inner) & (offs_c[None, :] < cols), other=0.0)
        acc = tl.dot(xt, wt, acc)
    out = y + offs_r[:, None] * sy0 + offs_c[None, :] * sy1
    keep = (offs_r[:, None] < rows) & (offs_c[None, :] < cols)
    tl.store(out, acc.to(y.dtype.element_ty), mask=keep)  # the partial sum of this rank


def unrelated_host_helper(n):
    return n * 2  # stays byte for byte
