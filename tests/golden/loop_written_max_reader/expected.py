import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def new_records(X, out, M, NC: tl.constexpr, BR: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Per column: how many row blocks set a new maximum. The count reads the running max, so the
    loop keeps its written order."""
    c = tl.arange(0, NC)
    count = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    # syncopy: this loop keeps its written order (each iteration waits for its own chunks): it carries 'count' from iteration to iteration (its update reads 'top', which also changes from iteration to iteration)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        # syncopy: no bound before the loop (each iteration reads other rows of 'X', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of X this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], rows[:, None] < M, X, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        block_max = tl.max(tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=float("-inf")), 0)
        count += tl.where(block_max > top, 1.0, 0.0)
        top = tl.maximum(top, block_max)
    tl.store(out + c, count)
