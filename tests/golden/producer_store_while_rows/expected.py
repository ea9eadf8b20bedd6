import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def copy_band(X, Out, M, N, ROWS_PER_PROGRAM, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    pid = syncopy_pid0
    cols = tl.arange(0, BLOCK_N)
    row = pid * ROWS_PER_PROGRAM
    end = row + ROWS_PER_PROGRAM
    # syncopy: the rows of Out stored at line 15 are not bounded before this statement (row changes inside the loop in a way inference cannot follow): taken at the store, announced after the last store
    while row < end:
        rows = row + tl.arange(0, BLOCK_M)
        keep = (rows[:, None] < tl.minimum(end, M)) & (cols[None, :] < N)
        x = tl.load(X + rows[:, None] * N + cols[None, :], mask=keep, other=0.0)
        tl.store(Out + rows[:, None] * N + cols[None, :], x, mask=keep)
        row += BLOCK_M
    # syncopy: the chunks of Out this program writes, as the probe took them at its stores
    syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
