"""Loops over a sequence gathered along dim 1 (context parallelism), written the way public
repositories write them (issue 31, item 6):

- `fa2_bshd`: FlashAttention-2's Triton forward (Tri Dao's flash_attn_triton.py `_fwd_kernel`) over
  K and V laid out [B, S, H, D], strides passed, one program per (query block, batch * head):
  `k_ptrs` made once before the key loop, each iteration reading `k_ptrs + start_n * stride_kn`,
  its loop variable re-assigned through `tl.multiple_of`, every load written twice under the
  constexpr `if EVEN_N:` (set by @triton.heuristics), the masked arm for a ragged seqlen_k.
- `state_passing`: Mamba-2's state-passing scan (ssd_state_passing.py `_state_passing_fwd_kernel`):
  states [B, C, H, D] of C sequence chunks, one program per (block of D, batch, head), the running
  state decayed by exp(dA_cs[c]) and stored after every chunk: pointers stepped in the loop
  (`states_ptrs += stride_states_chunk`), the tensor's own pointer moved first (`states_ptr += ...`).
- `linear_recurrence`: the linear-attention recurrence (fused_recurrent kernels of
  flash-linear-attention): q, k, v [B, T, H, K], a state h [K, K] updated per time step,
  h = h + k_t v_t^T, o_t = q_t h, every pointer stepped by its time stride (`p_k += stride_kt`).
- `linear_recurrence_constexpr_steps`: the same recurrence as flash-linear-attention writes it, over a
  contiguous [B, T, H, K] with H and K constexprs: every pointer stepped by `H * K`, no stride passed.
  syncopy cannot tell which rows an iteration reads, so the loop waits for all of them before it and
  says so (SyncopyFallbackWarning).

- `guarded_attention_bshd`: templates/ag_attention's guarded online softmax over the same [B, S, H, D]
  layout and FA2's pointer style: proven to run in any order, so its key loop runs in chunk-arrival
  order along dim 1.

K / states / k are the communicated tensors (gathered along the sequence, dim 1); V too where listed.
"""
import triton
import triton.language as tl


@triton.heuristics({"EVEN_N": lambda args: args["seqlen_k"] % args["BLOCK_N"] == 0})
@triton.jit
def fa2_bshd(Q, K, V, Out, softmax_scale, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
             stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om, nheads, seqlen_q, seqlen_k,
             BLOCK_HEADDIM: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
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
    for start_n in range(0, seqlen_k, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        if EVEN_N:
            k = tl.load(k_ptrs + start_n * stride_kn)
        else:
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
            v = tl.load(v_ptrs + start_n * stride_vn)
        else:
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


@triton.jit
def state_passing(states_ptr, out_ptr, final_states_ptr, dA_cs_ptr, dim, nchunks, stride_states_batch,
                  stride_states_chunk, stride_states_head, stride_states_dim, stride_out_batch, stride_out_chunk,
                  stride_out_head, stride_out_dim, stride_final_states_batch, stride_final_states_head,
                  stride_final_states_dim, stride_dA_cs_batch, stride_dA_cs_chunk, stride_dA_cs_head,
                  BLOCK_SIZE: tl.constexpr):
    pid_b = tl.program_id(axis=1)
    pid_h = tl.program_id(axis=2)
    pid_m = tl.program_id(axis=0)
    states_ptr += pid_b * stride_states_batch + pid_h * stride_states_head
    dA_cs_ptr += pid_b * stride_dA_cs_batch + pid_h * stride_dA_cs_head
    out_ptr += pid_b * stride_out_batch + pid_h * stride_out_head
    final_states_ptr += pid_b * stride_final_states_batch + pid_h * stride_final_states_head
    offs_m = pid_m * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    states_ptrs = states_ptr + offs_m * stride_states_dim
    out_ptrs = out_ptr + offs_m * stride_out_dim
    final_states_ptrs = final_states_ptr + offs_m * stride_final_states_dim
    states = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    tl.store(out_ptrs, states, mask=offs_m < dim)
    out_ptrs += stride_out_chunk
    for c in range(nchunks):
        new_states = tl.load(states_ptrs, mask=offs_m < dim, other=0.0).to(tl.float32)
        dA_cs = tl.load(dA_cs_ptr).to(tl.float32)
        scale = tl.exp(dA_cs)
        states = scale * states + new_states
        if c < nchunks - 1:
            tl.store(out_ptrs, states, mask=offs_m < dim)
        else:
            tl.store(final_states_ptrs, states, mask=offs_m < dim)
        states_ptrs += stride_states_chunk
        dA_cs_ptr += stride_dA_cs_chunk
        out_ptrs += stride_out_chunk


@triton.jit
def linear_recurrence(q, k, v, o, T, stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                      stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh, K: tl.constexpr):
    i_b = tl.program_id(0)
    i_h = tl.program_id(1)
    o_k = tl.arange(0, K)
    p_q = q + i_b * stride_qb + i_h * stride_qh + o_k
    p_k = k + i_b * stride_kb + i_h * stride_kh + o_k
    p_v = v + i_b * stride_vb + i_h * stride_vh + o_k
    p_o = o + i_b * stride_ob + i_h * stride_oh + o_k
    h = tl.zeros([K, K], dtype=tl.float32)
    for _ in range(0, T):
        b_q = tl.load(p_q).to(tl.float32)
        b_k = tl.load(p_k).to(tl.float32)
        b_v = tl.load(p_v).to(tl.float32)
        h += b_k[:, None] * b_v[None, :]
        b_o = tl.sum(h * b_q[:, None], 0)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty))
        p_q += stride_qt
        p_k += stride_kt
        p_v += stride_vt
        p_o += stride_ot


@triton.jit
def linear_recurrence_constexpr_steps(q, k, v, o, T, H: tl.constexpr, K: tl.constexpr):
    i_b = tl.program_id(0)
    i_h = tl.program_id(1)
    o_k = tl.arange(0, K)
    p_q = q + (i_b * T * H + i_h) * K + o_k
    p_k = k + (i_b * T * H + i_h) * K + o_k
    p_v = v + (i_b * T * H + i_h) * K + o_k
    p_o = o + (i_b * T * H + i_h) * K + o_k
    h = tl.zeros([K, K], dtype=tl.float32)
    for _ in range(0, T):
        b_q = tl.load(p_q).to(tl.float32)
        b_k = tl.load(p_k).to(tl.float32)
        b_v = tl.load(p_v).to(tl.float32)
        h += b_k[:, None] * b_v[None, :]
        b_o = tl.sum(h * b_q[:, None], 0)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty))
        p_q += H * K
        p_k += H * K
        p_v += H * K
        p_o += H * K


@triton.jit
def guarded_attention_bshd(Q, K, V, Out, sm_scale, stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                           stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om, nheads, seqlen_q, seqlen_k,
                           D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
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
    for start in range(0, seqlen_k, BN):
        k = tl.load(k_ptrs + start * stride_kn, mask=(start + rn)[:, None] < seqlen_k, other=0.0)
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
