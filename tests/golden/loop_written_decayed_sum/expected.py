import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def decayed_column_sum(X, out, M, NC: tl.constexpr, BR: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Per column: a sum of the row blocks that halves the older blocks' weight each step, beside the
    running column max. The decay is not a softmax rescale: the loop keeps its written order."""
    c = tl.arange(0, NC)
    acc = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    # syncopy: this loop keeps its written order (each iteration waits for its own chunks): it carries 'acc' from iteration to iteration (rescaled by 0.5, which is not the online-softmax rescale exp(max before - max after))
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        # syncopy: no bound before the loop (each iteration reads other rows of 'X', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of X this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], rows[:, None] < M, X, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        x = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        top = tl.maximum(top, tl.max(x, 0))
        acc = acc * 0.5 + tl.sum(x, 0)
    tl.store(out + c, acc)
    tl.store(out + NC + c, top)
