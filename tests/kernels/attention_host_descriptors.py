"""Causal flash attention over gathered keys and values whose every tensor comes in as a tensor
descriptor made on the host (`triton.tools.tensor_descriptor.TensorDescriptor`, the path Triton's
fused-attention tutorial takes on Hopper): the kernel calls `desc_k.load([...])` on its parameters
directly, the key/value loop inline in one kernel and in a helper handed the descriptors in the
other. Each tile reads keys and values only up to its own last query row, so it needs only the
chunks holding them.

Descriptors are over [Z * H * N_CTX, HEAD_DIM] row-major tensors (the tutorial's layout); desc_q and
desc_o hold every query row on every rank, desc_k and desc_v are gathered (`tensor: [desc_k,
desc_v]`, dim 0): the launch passes descriptors over this rank's shards, and the fused kernel reads
descriptors over the gathered tensors. M receives the row-wise log2-sum-exp."""
import triton
import triton.language as tl


@triton.jit
def _host_band(acc, l_i, m_i, q, desc_k, desc_v, lo, hi, offset_y, qk_scale, BLOCK_N: tl.constexpr,
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
def attn_host_desc(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX, HEAD_DIM: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Host descriptors read directly, the key/value loop in the helper, off-band keys then the band."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    acc, l_i, m_i = _host_band(acc, l_i, m_i, q, desc_k, desc_v, 0, start_m * BLOCK_M, offset_y, qk_scale, BLOCK_N,
                               False, offs_m, offs_n)
    acc, l_i, m_i = _host_band(acc, l_i, m_i, q, desc_k, desc_v, start_m * BLOCK_M, (start_m + 1) * BLOCK_M, offset_y,
                               qk_scale, BLOCK_N, True, offs_m, offs_n)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(desc_o.dtype))


@triton.jit
def attn_host_desc_inline(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX, HEAD_DIM: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Host descriptors read directly, one key/value loop in the kernel up to the tile's last row."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    for start_n in tl.range(0, (start_m + 1) * BLOCK_M, BLOCK_N):
        k = desc_k.load([offset_y + start_n, 0]).T
        qk = tl.dot(q, k)
        keep = offs_m[:, None] >= (start_n + offs_n[None, :])
        qk = qk * qk_scale + tl.where(keep, 0, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        acc = acc * alpha[:, None]
        v = desc_v.load([offset_y + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_ij
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(desc_o.dtype))
