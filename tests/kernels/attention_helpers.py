"""@triton.jit helpers of the attention kernels of tests/kernels/attention_descriptors.py that live in a
module of their own (imported there): the descriptor maker and the key/value loop, as the Triton
tutorial writes them in its own file. syncopy follows them across the import (issue 31, item 1)."""
import triton
import triton.language as tl


@triton.jit
def maybe_make_tensor_desc(desc_or_ptr, shape, strides, block_shape):
    """A descriptor made on the host passes through; a pointer gets one made in the kernel."""
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    else:
        return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)


@triton.jit
def attend_band(acc, l_i, m_i, q, desc_k, desc_v, lo, hi, offset_y, qk_scale, BLOCK_N: tl.constexpr,
                MASKED: tl.constexpr, offs_m, offs_n):
    """Online-softmax attention of q over the keys and values of rows [lo, hi) (base-2 exponent,
    scale folded in); MASKED: a key after its query row is left out."""
    offsetkv_y = offset_y + lo
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = desc_k.load([offsetkv_y, 0]).T
        qk = tl.dot(q, k)
        if MASKED:
            keep = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(keep, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([offsetkv_y, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        offsetkv_y += BLOCK_N
    return acc, l_i, m_i
