"""A block-lower-triangular product (a causal mask at tile granularity), all-reduced: tiles above the
diagonal end before their store. Each still counts itself against the chunks it was expected to write."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def causal_scores(q, k, s, T, D, BT: tl.constexpr, BD: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    i = syncopy_pid0
    j = syncopy_pid1
    if j > i:
        # syncopy: a tile that ends here still counts itself against its chunks
        syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_table_lo, syncopy_table_hi)
        return  # above the diagonal: nothing to write
    rows = i * BT + tl.arange(0, BT)
    cols = j * BT + tl.arange(0, BT)
    d = tl.arange(0, BD)
    qt = tl.load(q + rows[:, None] * D + d[None, :], mask=(rows[:, None] < T) & (d[None, :] < D), other=0.0)
    kt = tl.load(k + cols[:, None] * D + d[None, :], mask=(cols[:, None] < T) & (d[None, :] < D), other=0.0)
    acc = tl.dot(qt, tl.trans(kt))
    keep = (rows[:, None] < T) & (cols[None, :] < T)
    if i == j:
        keep = keep & (cols[None, :] <= rows[:, None])
    # syncopy: the chunks of s this program writes
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(s + rows[:, None] * T + cols[None, :], keep, s, syncopy_ctx, True)
    tl.store(s + rows[:, None] * T + cols[None, :], acc, mask=keep)
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
