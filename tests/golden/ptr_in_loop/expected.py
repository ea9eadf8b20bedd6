import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def mm_rebuild(xs, ws, ys, MM, NN, KK, sx_m, sx_k, sw_k, sw_n, sy_m, sy_n,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    a = syncopy_pid0
    b = syncopy_pid1
    om = a * BM + tl.arange(0, BM)
    on = b * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    # syncopy: wait for the chunks of xs this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_affine((xs + om[:, None] * sx_m + tl.arange(0, BK)[None, :] * sx_k), (xs + om[:, None] * sx_m + ((tl.cdiv(KK, BK) - 1) * BK + tl.arange(0, BK))[None, :] * sx_k), om[:, None] < MM, (tl.arange(0, BK)[None, :] - KK), (((tl.cdiv(KK, BK) - 1) * BK + tl.arange(0, BK))[None, :] - KK), tl.cdiv(KK, BK) - 1, xs, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for kb in range(tl.cdiv(KK, BK)):
        ok = kb * BK + tl.arange(0, BK)
        xp = xs + om[:, None] * sx_m + ok[None, :] * sx_k
        wp = ws + ok[:, None] * sw_k + on[None, :] * sw_n
        xv = tl.load(xp, mask=(om[:, None] < MM) & (ok[None, :] < KK), other=0.0)
        wv = tl.load(wp, mask=(ok[:, None] < KK) & (on[None, :] < NN), other=0.0)
        acc += tl.dot(xv, wv)
    tl.store(ys + om[:, None] * sy_m + on[None, :] * sy_n, acc, mask=(om[:, None] < MM) & (on[None, :] < NN))
