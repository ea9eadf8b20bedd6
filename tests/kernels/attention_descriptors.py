"""Causal flash attention over gathered keys and values (`tensor: [desc_k, desc_v]`, dim 0) in the
styles of Triton's fused-attention tutorial: tensor descriptors made by a @triton.jit helper that
passes host descriptors through (`_maybe_make_tensor_desc`, branching on isinstance) or made in the
kernel, the key/value loop in a helper handed the descriptors, the off-band keys first and the
diagonal band second, and those helpers in this file or imported from another module. Each tile
reads keys and values only up to its own last query row, so it needs only the chunks holding them.

Tensors are [Z * H * N_CTX, HEAD_DIM] row-major (the tutorial's layout); desc_q and desc_o hold every
query row on every rank, desc_k and desc_v are gathered. M receives the row-wise log2-sum-exp."""
import triton
import triton.language as tl

from tests.kernels import attention_helpers as ah


@triton.jit
def _maybe_make_tensor_desc(desc_or_ptr, shape, strides, block_shape):
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    else:
        return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)


@triton.jit
def _attend_band(acc, l_i, m_i, q, desc_k, desc_v, lo, hi, offset_y, qk_scale, BLOCK_N: tl.constexpr,
                 MASKED: tl.constexpr, offs_m, offs_n):
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


@triton.jit
def attn_desc_by_helper(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX, HEAD_DIM: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The tutorial's way: every descriptor made by _maybe_make_tensor_desc over the argument it replaces."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    y_dim = Z * H * N_CTX
    desc_q = _maybe_make_tensor_desc(desc_q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    desc_k = _maybe_make_tensor_desc(desc_k, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_v = _maybe_make_tensor_desc(desc_v, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = _maybe_make_tensor_desc(desc_o, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    acc, l_i, m_i = _attend_band(acc, l_i, m_i, q, desc_k, desc_v, 0, start_m * BLOCK_M, offset_y, qk_scale, BLOCK_N,
                                 False, offs_m, offs_n)
    acc, l_i, m_i = _attend_band(acc, l_i, m_i, q, desc_k, desc_v, start_m * BLOCK_M, (start_m + 1) * BLOCK_M, offset_y,
                                 qk_scale, BLOCK_N, True, offs_m, offs_n)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(desc_o.dtype))


@triton.jit
def attn_desc_in_kernel(sm_scale, M, Z, H, Q, K, V, Out, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
    """Descriptors made in the kernel with tl.make_tensor_descriptor, under names of their own."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    y_dim = Z * H * N_CTX
    desc_q = tl.make_tensor_descriptor(Q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    desc_k = tl.make_tensor_descriptor(K, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_v = tl.make_tensor_descriptor(V, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = tl.make_tensor_descriptor(Out, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    acc, l_i, m_i = _attend_band(acc, l_i, m_i, q, desc_k, desc_v, 0, start_m * BLOCK_M, offset_y, qk_scale, BLOCK_N,
                                 False, offs_m, offs_n)
    acc, l_i, m_i = _attend_band(acc, l_i, m_i, q, desc_k, desc_v, start_m * BLOCK_M, (start_m + 1) * BLOCK_M, offset_y,
                                 qk_scale, BLOCK_N, True, offs_m, offs_n)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(desc_o.dtype))


@triton.jit
def attn_desc_imported(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX, HEAD_DIM: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """attn_desc_by_helper with its helpers imported from tests/kernels/attention_helpers.py."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    y_dim = Z * H * N_CTX
    desc_q = ah.maybe_make_tensor_desc(desc_q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    desc_k = ah.maybe_make_tensor_desc(desc_k, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_v = ah.maybe_make_tensor_desc(desc_v, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = ah.maybe_make_tensor_desc(desc_o, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    acc, l_i, m_i = ah.attend_band(acc, l_i, m_i, q, desc_k, desc_v, 0, start_m * BLOCK_M, offset_y, qk_scale, BLOCK_N,
                                   False, offs_m, offs_n)
    acc, l_i, m_i = ah.attend_band(acc, l_i, m_i, q, desc_k, desc_v, start_m * BLOCK_M, (start_m + 1) * BLOCK_M, offset_y,
                                   qk_scale, BLOCK_N, True, offs_m, offs_n)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(desc_o.dtype))


@triton.jit
def _attend_stage(acc, l_i, m_i, q, desc_k, desc_v, offset_y, start_m, qk_scale, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, STAGE: tl.constexpr, offs_m, offs_n, N_CTX):
    """The tutorial's inner loop as published: its bounds chosen by `if STAGE == ...` inside the helper."""
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
    else:
        lo, hi = 0, N_CTX
    return _attend_band(acc, l_i, m_i, q, desc_k, desc_v, lo, hi, offset_y, qk_scale, BLOCK_N, STAGE == 2, offs_m, offs_n)


@triton.jit
def attn_stage_branches(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX, HEAD_DIM: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr):
    """The tutorial's kernel with its stage calls (`if STAGE & 1:` off-band, `if STAGE & 2:` the band;
    STAGE 3 is causal): the helper's bounds come from its constexpr branch on the `4 - STAGE` (and 2)
    each call hands it, which syncopy resolves at each call."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    y_dim = Z * H * N_CTX
    desc_q = _maybe_make_tensor_desc(desc_q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    desc_k = _maybe_make_tensor_desc(desc_k, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_v = _maybe_make_tensor_desc(desc_v, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = _maybe_make_tensor_desc(desc_o, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    if STAGE & 1:
        acc, l_i, m_i = _attend_stage(acc, l_i, m_i, q, desc_k, desc_v, offset_y, start_m, qk_scale, BLOCK_M, BLOCK_N,
                                      4 - STAGE, offs_m, offs_n, N_CTX)
    if STAGE & 2:
        acc, l_i, m_i = _attend_stage(acc, l_i, m_i, q, desc_k, desc_v, offset_y, start_m, qk_scale, BLOCK_M, BLOCK_N,
                                      2, offs_m, offs_n, N_CTX)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(desc_o.dtype))
