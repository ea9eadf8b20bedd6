"""A guarded online softmax over K and V [B, S, H, D] gathered along S (dim 1), in FA2's
pointer style: its key loop is proven to run in any order, so it runs in chunk-arrival order along dim 1."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def guarded_attention_bshd(Q, K, V, Out, sm_scale, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                           stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om, nheads, seqlen_q, seqlen_k,
                           D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    pid = tl.program_id(0)
    off_hb = tl.program_id(1)
    off_b = off_hb // nheads
    off_h = off_hb % nheads
    rm = pid * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rd = tl.arange(0, D)
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + rm[:, None] * stride_qm + rd[None, :], mask=rm[:, None] < seqlen_q,
                other=0.0)
    k_ptrs = K + off_b * stride_kb + off_h * stride_kh + (rn[:, None] * stride_kn + rd[None, :])
    v_ptrs = V + off_b * stride_vb + off_h * stride_vh + (rn[:, None] * stride_vn + rd[None, :])
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    # syncopy: the loop only accumulates: its iterations run in chunk-arrival order, this rank's rows first
    syncopy_n = syncopy_device.trip_count(0, seqlen_k, BN)
    syncopy_r0 = syncopy_device.first_row_along(k_ptrs, K, syncopy_ctx)
    syncopy_r1 = syncopy_device.first_row_along(k_ptrs + (1 * BN) * stride_kn, K, syncopy_ctx)
    for syncopy_t in range(0, syncopy_n):
        start = 0 + syncopy_device.arrival_iteration(syncopy_t, syncopy_n, syncopy_r0, syncopy_r1, syncopy_ctx) * BN
        # syncopy: no bound before the loop (each iteration reads other rows of 'K', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of K this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(k_ptrs + start * stride_kn, (start + rn)[:, None] < seqlen_k, K, syncopy_ctx, False)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        k = tl.load(k_ptrs + start * stride_kn, mask=(start + rn)[:, None] < seqlen_k, other=0.0)
        # syncopy: no bound before the loop (each iteration reads other rows of 'V', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of V this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(v_ptrs + start * stride_vn, (start + rn)[:, None] < seqlen_k, V, (syncopy_ctx + 8), False)
        syncopy_device.wait_chunks(syncopy_signals, (syncopy_ctx + 8), syncopy_lo, syncopy_hi)
        v = tl.load(v_ptrs + start * stride_vn, mask=(start + rn)[:, None] < seqlen_k, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        s = tl.where((start + rn)[None, :] < seqlen_k, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(Out + off_b * stride_ob + off_h * stride_oh + rm[:, None] * stride_om + rd[None, :], acc, mask=rm[:, None] < seqlen_q)
