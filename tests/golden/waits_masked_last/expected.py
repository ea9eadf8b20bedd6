import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def masked_quad(X, out, M, NC: tl.constexpr, BM: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Case 1: four row blocks per program; the last program's last block(s) are masked off."""
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    pid = syncopy_pid0
    c = tl.arange(0, NC)
    # syncopy: wait for the chunks of X this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_affine(X + ((pid * 4) * BM + tl.arange(0, BM))[:, None] * NC + c[None, :], X + ((pid * 4 + (4 - 1)) * BM + tl.arange(0, BM))[:, None] * NC + c[None, :], True, (((pid * 4) * BM + tl.arange(0, BM)) - M)[:, None], (((pid * 4 + (4 - 1)) * BM + tl.arange(0, BM)) - M)[:, None], 4 - 1, X, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for i in tl.static_range(4):
        rows = (pid * 4 + i) * BM + tl.arange(0, BM)
        mask = rows < M
        v = tl.load(X + rows[:, None] * NC + c[None, :], mask=mask[:, None], other=0.0)
        tl.store(out + rows[:, None] * NC + c[None, :], v * 2.0 + 1.0, mask=mask[:, None])
