import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def reversed_halves(X, Out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PARTS: tl.constexpr, HALVES: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Each program's band of rows, written half by half from its last half to its first."""
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    pid = syncopy_pid0
    cols = tl.arange(0, BLOCK_N)
    band = pid * PARTS * HALVES * BLOCK_M
    # syncopy: a mask that changes with the loop is left out of this bound (rows outside the tensor clamp to it)
    # syncopy: the chunks of Out this program writes
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_clamped(Out + (band + (HALVES - 1) * PARTS * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * N + cols[None, :], cols[None, :] < N, Out, syncopy_ctx, True)
        syncopy_lo_1, syncopy_hi_1 = syncopy_device.chunk_range_clamped(Out + (band + (HALVES - 1) * PARTS * BLOCK_M + (PARTS - 1) * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * N + cols[None, :], cols[None, :] < N, Out, syncopy_ctx, True)
        syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_1, syncopy_hi_1)
        syncopy_lo_2, syncopy_hi_2 = syncopy_device.chunk_range_clamped(Out + (band + (HALVES - 1) * PARTS * BLOCK_M - (HALVES - 1) * PARTS * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * N + cols[None, :], cols[None, :] < N, Out, syncopy_ctx, True)
        syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_2, syncopy_hi_2)
        syncopy_lo_3, syncopy_hi_3 = syncopy_device.chunk_range_clamped(Out + (band + (HALVES - 1) * PARTS * BLOCK_M - (HALVES - 1) * PARTS * BLOCK_M + (PARTS - 1) * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * N + cols[None, :], cols[None, :] < N, Out, syncopy_ctx, True)
        syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_3, syncopy_hi_3)
    for h in range(HALVES):
        for p in range(PARTS):
            rows = band + (HALVES - 1) * PARTS * BLOCK_M - h * PARTS * BLOCK_M + p * BLOCK_M + tl.arange(0, BLOCK_M)
            keep = (rows[:, None] < M) & (cols[None, :] < N)
            x = tl.load(X + rows[:, None] * N + cols[None, :], mask=keep, other=0.0)
            tl.store(Out + rows[:, None] * N + cols[None, :], x + 1.0, mask=keep)
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
