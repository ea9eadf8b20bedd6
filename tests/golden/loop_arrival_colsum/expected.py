import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def column_stats(X, S, MX, M, NC: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Per column block: the sum and the max over every row of X, BR rows an iteration. The loop only
    accumulates (a sum and a running max), so it runs in chunk-arrival order."""
    pid = tl.program_id(0)
    c = pid * BC + tl.arange(0, BC)
    total = tl.zeros([BC], dtype=tl.float32)
    top = tl.full([BC], float("-inf"), tl.float32)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    # syncopy: the loop only accumulates: its iterations run in chunk-arrival order, this rank's rows first
    syncopy_n = syncopy_device.trip_count(0, M, BR)
    syncopy_r0 = syncopy_device.first_row(X + tl.arange(0, BR)[:, None] * NC + c[None, :], X, syncopy_ctx)
    syncopy_r1 = syncopy_device.first_row(X + ((1 * BR) + tl.arange(0, BR))[:, None] * NC + c[None, :], X, syncopy_ctx)
    for syncopy_t in range(0, syncopy_n):
        r0 = 0 + syncopy_device.arrival_iteration(syncopy_t, syncopy_n, syncopy_r0, syncopy_r1, syncopy_ctx) * BR
        rows = r0 + tl.arange(0, BR)
        # syncopy: no bound before the loop (each iteration reads other rows of 'X', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of X this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], rows[:, None] < M, X, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        x = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=float("-inf"))
        top = tl.maximum(top, tl.max(x, 0))
        total += tl.sum(tl.where(rows[:, None] < M, x, 0.0), 0)
    tl.store(S + c, total)
    tl.store(MX + c, top)
