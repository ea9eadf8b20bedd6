"""MoE-style combine, reduce-scattered: each program writes its rows of expert output back to the token
rows an index tensor names, so the rows a tile writes change with the data of every launch."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def combine(expert_out, token_of, out, n_rows, H, BR: tl.constexpr, BH: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    pid = syncopy_pid0
    r = pid * BR + tl.arange(0, BR)
    h = tl.arange(0, BH)
    keep = (r[:, None] < n_rows) & (h[None, :] < H)
    v = tl.load(expert_out + r[:, None] * H + h[None, :], mask=keep, other=0.0)
    dest = tl.load(token_of + r, mask=r < n_rows, other=0)
    # syncopy: the chunks of out this program writes; its write addresses depend on loaded data: the runtime probes them at every launch
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(out + dest[:, None] * H + h[None, :], keep, out, syncopy_ctx, True)
    tl.atomic_add(out + dest[:, None] * H + h[None, :], v, mask=keep)
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
