import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def _my_rows(BR: tl.constexpr):
    return tl.program_id(0) * BR + tl.arange(0, BR)


@triton.jit
def helper_pid(X, out, M, NC: tl.constexpr, BR: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Case 6: tl.program_id inside a helper: out[p] = column sums of row block p."""
    pid = tl.program_id(0)
    rows = _my_rows(BR)
    c = tl.arange(0, NC)
    # syncopy: tiles keep their launch order: the helper _my_rows calls tl.program_id itself
    # syncopy: wait for the chunks of X this program reads
    syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], rows[:, None] < M, X, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
    tl.store(out + pid * NC + c, tl.sum(v.to(tl.float32), axis=0))
