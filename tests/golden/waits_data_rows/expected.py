import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def gather_rows(X, idx, out, NC: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Case 7: rows chosen by data (an embedding lookup): out[p] = X[idx[p]]."""
    pid = tl.program_id(0)
    row = tl.load(idx + pid)
    c = tl.arange(0, NC)
    # syncopy: tiles keep their launch order: the rows of its first read depend on loaded data, which changes from launch to launch
    # syncopy: wait for the chunks of X this program reads
    syncopy_lo, syncopy_hi = syncopy_device.chunk_range(X + row * NC + c, X, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    v = tl.load(X + row * NC + c)
    tl.store(out + pid * NC + c, v)
