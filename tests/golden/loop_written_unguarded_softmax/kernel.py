import triton
import triton.language as tl


@triton.jit
def padded_attention(Q, KV, Out, M, N, L, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Attention of BM queries over N keys and values packed in KV ([N, 2 * D]: the key, then the
    value), keys at positions >= L being padding: the textbook online softmax, without a guard for a
    block whose keys are all padding. In arrival order such a block can come first, where
    exp(-inf - -inf) is NaN: the loop keeps its written order."""
    rm = tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, N, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(KV + rn[:, None] * (2 * D) + rd[None, :], mask=rn[:, None] < N, other=0.0)
        v = tl.load(KV + rn[:, None] * (2 * D) + D + rd[None, :], mask=rn[:, None] < N, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        s = tl.where((rn[None, :] < L) & (rn[None, :] < N), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(Out + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < M)
