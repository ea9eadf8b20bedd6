import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def scaled_rows(src, scale, dst, total_rows, width, s_src, s_dst,
                ROWS: tl.constexpr, COLS: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    blk = syncopy_pid0
    rr = blk * ROWS + tl.arange(0, ROWS)
    cc = tl.arange(0, COLS)
    keep = (rr[:, None] < total_rows) & (cc[None, :] < width)
    # syncopy: wait for the chunks of src this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(src + rr[:, None] * s_src + cc[None, :], keep, src, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    vals = tl.load(src + rr[:, None] * s_src + cc[None, :], mask=keep, other=0.0)
    factor = tl.load(scale + cc, mask=cc < width, other=1.0)
    tl.store(dst + rr[:, None] * s_dst + cc[None, :], vals * factor[None, :], mask=keep)
