"""The linear-attention recurrence (flash-linear-attention's fused_recurrent style) over
k and v [B, T, H, K] gathered along time (dim 1): every pointer stepped by its time stride each step."""
import triton
import triton.language as tl


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
