import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def _save_row(out, i, NC: tl.constexpr, value):
    tl.store(out + i * NC + tl.arange(0, NC), value)


@triton.jit
def running_max_history(X, out, M, NC: tl.constexpr, BR: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """out[0] = the column max, out[1 + i] = the running max after row block i, saved by a helper:
    the helper stores, so the loop keeps its written order."""
    c = tl.arange(0, NC)
    top = tl.full([NC], float("-inf"), tl.float32)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    # syncopy: this loop keeps its written order (each iteration waits for its own chunks): it calls the helper _save_row, which stores, prints or calls what syncopy cannot see (a side effect whose order may matter)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        # syncopy: no bound before the loop (each iteration reads other rows of 'X', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of X this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], rows[:, None] < M, X, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        top = tl.maximum(top, tl.max(tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M,
                                             other=float("-inf")), 0))
        _save_row(out, r0 // BR + 1, NC, top)
    tl.store(out + c, top)
