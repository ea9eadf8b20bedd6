import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def scatter_rows(X, Out, index, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCKS: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    pid = syncopy_pid0
    cols = tl.arange(0, BLOCK_N)
    # syncopy: the chunks of Out this program writes; its write addresses depend on loaded data: the runtime probes them at every launch
    # syncopy: the rows of Out stored at line 14 are not bounded before this statement (the rows written are not affine in the loop counter): taken at the store, announced after the last store
    for b in range(BLOCKS):
        src = (pid * BLOCKS + b) * BLOCK_M + tl.arange(0, BLOCK_M)
        keep = (src[:, None] < M) & (cols[None, :] < N)
        x = tl.load(X + src[:, None] * N + cols[None, :], mask=keep, other=0.0)
        dst = tl.load(index + src, mask=src < M, other=0)
        tl.store(Out + dst[:, None] * N + cols[None, :], x, mask=keep)
    # syncopy: the chunks of Out this program writes, as the probe took them at its stores
    syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
