"""A GEMM whose output rows are reduce-scattered (row-parallel linear layer)."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def _tile(pid, width):
    # Tiles go row-major over the output.
    return pid // width, pid % width


@triton.jit
def row_parallel_linear(x, w, y, rows, cols, inner,
                        sx0, sx1, sw0, sw1, sy0, sy1,
                        BR: tl.constexpr, BC: tl.constexpr, BI: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """y = x @ w for this rank's slice of the inner dimension."""
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    tile_r, tile_c = _tile(syncopy_pid0, tl.cdiv(cols, BC))
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
    # syncopy: the chunks of y this program writes
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(out, keep, y, syncopy_ctx, True)
    tl.store(out, acc.to(y.dtype.element_ty), mask=keep)  # the partial sum of this rank
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)


def unrelated_host_helper(n):
    return n * 2  # stays byte for byte
