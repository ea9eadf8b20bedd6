"""Module docstring stays first."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device

# A comment above the kernel's decorator.


@triton.jit
def gather_sum(table, out, n, stride, BLOCK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Sum each block of rows of `table` into `out`.

    The docstring must stay the first statement of the function.
    """
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    # which block of rows this program owns
    part = syncopy_pid0  # trailing comment on the program id
    offs = part * BLOCK + tl.arange(0, BLOCK)

    # read the rows (the first read: a wait goes above this comment block)
    # second comment line
    # syncopy: wait for the chunks of table this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(table + offs * stride, offs < n, table, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    vals = tl.load(table + offs * stride, mask=offs < n, other=0.0)  # trailing comment on the read
    # after the read
    tl.store(out + part, tl.sum(vals, axis=0))
