import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def act_rows(inp, outp, count, stride_in, stride_out, BLOCK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, USE_RELU: tl.constexpr = True):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    prog = syncopy_pid0
    rows = prog * BLOCK + tl.arange(0, BLOCK)
    # syncopy: wait for the chunks of inp this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(inp + rows * stride_in, rows < count, inp, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    x = tl.load(inp + rows * stride_in, mask=rows < count, other=0.0)
    if USE_RELU:
        x = tl.maximum(x, 0.0)
    tl.store(outp + rows * stride_out, x, mask=rows < count)
