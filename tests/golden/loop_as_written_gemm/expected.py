import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def mm_k_gathered(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """C = A @ B with B's rows (the K dimension) gathered: the K loop runs along the communicated dim,
    its pointers stepped each iteration; loop_order: as_written makes each iteration wait for its own
    chunks and keeps the order the loop is written in."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * K + rk[None, :]
    b_ptrs = B + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (k + rk[None, :] < K), other=0.0)
        # syncopy: no bound before the loop (each iteration reads other rows of 'B', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of B this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(b_ptrs, (k + rk[:, None] < K) & (rn[None, :] < N), B, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        b = tl.load(b_ptrs, mask=(k + rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BK
        b_ptrs += BK * N
    tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
