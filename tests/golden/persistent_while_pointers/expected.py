"""A persistent GEMM as a while loop over tiles, pointer loads."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def rolling_tiles(P, Q, R, m, n, k, sp0, sp1, sq0, sq1, sr0, sr1,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, LANES: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    cur = tl.program_id(0)
    across = tl.cdiv(n, BN)
    jobs = tl.cdiv(m, BM) * across
    # syncopy: run tiles in chunk-arrival order
    cur = syncopy_device.tile_of(syncopy_order, cur)
    while cur < jobs:
        bi = cur // across
        bj = cur % across
        ri = bi * BM + tl.arange(0, BM)
        rj = bj * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        # syncopy: wait for the chunks of P this tile reads
        if SYNCOPY_TABLE:
            syncopy_lo, syncopy_hi = syncopy_device.tile_range(syncopy_order, cur, syncopy_ctx)
        else:
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range_affine(P + ri[:, None] * sp0 + rk[None, :] * sp1, P + ri[:, None] * sp0 + ((tl.cdiv(k, BK) - 1) * BK + rk[None, :]) * sp1, ri[:, None] < m, (rk[None, :] - k), (((tl.cdiv(k, BK) - 1) * BK + rk[None, :]) - k), tl.cdiv(k, BK) - 1, P, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        syncopy_device.trace_tile_start_at(syncopy_signals, syncopy_trace, syncopy_ctx, syncopy_order, cur, SYNCOPY_TRACE)
        for kk in range(0, tl.cdiv(k, BK)):
            p = tl.load(P + ri[:, None] * sp0 + (kk * BK + rk[None, :]) * sp1,
                        mask=(ri[:, None] < m) & (kk * BK + rk[None, :] < k), other=0.0)
            q = tl.load(Q + (kk * BK + rk[:, None]) * sq0 + rj[None, :] * sq1,
                        mask=(kk * BK + rk[:, None] < k) & (rj[None, :] < n), other=0.0)
            acc = tl.dot(p, q, acc)
        tl.store(R + ri[:, None] * sr0 + rj[None, :] * sr1, acc.to(R.dtype.element_ty),
                 mask=(ri[:, None] < m) & (rj[None, :] < n))
        cur += LANES
        cur = syncopy_device.advance_tile(syncopy_order, cur, LANES)
