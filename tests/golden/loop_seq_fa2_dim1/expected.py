"""FA2's forward (flash_attn_triton.py style) over K and V [B, S, H, D] gathered along
S (dim 1): each iteration of its key loop reads `k_ptrs + start_n * stride_kn`; the loop re-assigns its variable,
so it keeps its written order and waits per iteration."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.heuristics({"EVEN_N": lambda args: args["seqlen_k"] % args["BLOCK_N"] == 0})
@triton.jit
def fa2_bshd(Q, K, V, Out, softmax_scale, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
             stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om, nheads, seqlen_q, seqlen_k,
             BLOCK_HEADDIM: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    start_m = tl.program_id(0)
    off_hb = tl.program_id(1)
    off_b = off_hb // nheads
    off_h = off_hb % nheads
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_HEADDIM)
    q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + (offs_m[:, None] * stride_qm + offs_d[None, :])
    k_ptrs = K + off_b * stride_kb + off_h * stride_kh + (offs_n[:, None] * stride_kn + offs_d[None, :])
    v_ptrs = V + off_b * stride_vb + off_h * stride_vh + (offs_n[:, None] * stride_vn + offs_d[None, :])
    lse_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    acc_o = tl.zeros([BLOCK_M, BLOCK_HEADDIM], dtype=tl.float32)
    q = tl.load(q_ptrs, mask=offs_m[:, None] < seqlen_q, other=0.0)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    # syncopy: this loop keeps its written order (each iteration waits for its own chunks): it assigns its variable 'start_n' in its body or reads it after the loop
    for start_n in range(0, seqlen_k, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        if EVEN_N:
            # syncopy: no bound before the loop (each iteration reads other rows of 'K', so each waits for its own chunks): wait before each read, from its own pointers
            # syncopy: wait for the chunks of K this read needs
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range(k_ptrs + start_n * stride_kn, K, syncopy_ctx, False)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            k = tl.load(k_ptrs + start_n * stride_kn)
        else:
            # syncopy: no bound before the loop (each iteration reads other rows of 'K', so each waits for its own chunks): wait before each read, from its own pointers
            # syncopy: wait for the chunks of K this read needs
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(k_ptrs + start_n * stride_kn, (start_n + offs_n)[:, None] < seqlen_k, K, syncopy_ctx, False)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            k = tl.load(k_ptrs + start_n * stride_kn, mask=(start_n + offs_n)[:, None] < seqlen_k, other=0.0)
        qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        qk += tl.dot(q, tl.trans(k))
        if not EVEN_N:
            qk += tl.where((start_n + offs_n)[None, :] < seqlen_k, 0, float("-inf"))
        m_ij = tl.maximum(tl.max(qk, 1) * softmax_scale, lse_i)
        p = tl.exp(qk * softmax_scale - m_ij[:, None])
        l_ij = tl.sum(p, 1)
        acc_o_scale = tl.exp(m_i - m_ij)
        acc_o = acc_o * acc_o_scale[:, None]
        if EVEN_N:
            # syncopy: no bound before the loop (each iteration reads other rows of 'V', so each waits for its own chunks): wait before each read, from its own pointers
            # syncopy: wait for the chunks of V this read needs
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range(v_ptrs + start_n * stride_vn, V, (syncopy_ctx + 8), False)
            syncopy_device.wait_chunks(syncopy_signals, (syncopy_ctx + 8), syncopy_lo, syncopy_hi)
            v = tl.load(v_ptrs + start_n * stride_vn)
        else:
            # syncopy: no bound before the loop (each iteration reads other rows of 'V', so each waits for its own chunks): wait before each read, from its own pointers
            # syncopy: wait for the chunks of V this read needs
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(v_ptrs + start_n * stride_vn, (start_n + offs_n)[:, None] < seqlen_k, V, (syncopy_ctx + 8), False)
            syncopy_device.wait_chunks(syncopy_signals, (syncopy_ctx + 8), syncopy_lo, syncopy_hi)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=(start_n + offs_n)[:, None] < seqlen_k, other=0.0)
        p = p.to(v.dtype)
        acc_o += tl.dot(p, v)
        m_i = m_ij
        l_i_new = tl.exp(lse_i - m_ij) + l_ij
        lse_i = m_ij + tl.log(l_i_new)
    o_scale = tl.exp(m_i - lse_i)
    acc_o = acc_o * o_scale[:, None]
    out_ptrs = Out + off_b * stride_ob + off_h * stride_oh + (offs_m[:, None] * stride_om + offs_d[None, :])
    tl.store(out_ptrs, acc_o, mask=offs_m[:, None] < seqlen_q)
