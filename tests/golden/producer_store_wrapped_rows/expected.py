import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def rotate_rows(X, Out, M, N, shift, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STEPS: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Out[(r + shift) % M] = 2 * X[r]: each program walks STEPS row blocks, strided over the programs."""
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    pid = syncopy_pid0
    cols = tl.arange(0, BLOCK_N)
    # syncopy: the rows of Out stored at line 15 are not bounded before this statement (the rows written are not affine in the loop counter): taken at the store, announced after the last store
    for step in range(STEPS):
        src = pid * BLOCK_M + step * tl.num_programs(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        x = tl.load(X + src[:, None] * N + cols[None, :], mask=(src[:, None] < M) & (cols[None, :] < N), other=0.0)
        dst = (src + shift) % M
        # the destination wraps around the end of Out
        tl.store(Out + dst[:, None] * N + cols[None, :], 2.0 * x, mask=(src[:, None] < M) & (cols[None, :] < N))
    # syncopy: the chunks of Out this program writes, as the probe took them at its stores
    syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
