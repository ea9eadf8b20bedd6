"""Flash-attention forward over keys and values that every program streams in blocks of BN rows,
with online softmax (a running max m_i, sum l_i, and rescaled accumulator): one program per BM query
rows and head. Q, Out: [M, H, D] (this rank's queries); K, V: [N, H, D] (the whole sequence).
CAUSAL: query row i (at global position q_start + i) sees keys at positions <= its own. The update
is guarded so that a block whose keys are all masked for a row leaves that row unchanged: the result
does not depend on the order the key blocks come in."""
import triton
import triton.language as tl


@triton.jit
def attention(Q, K, V, Out, M, N, q_start, sm_scale, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
              CAUSAL: tl.constexpr):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    rm = pid * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(Q + (rm[:, None] * H + h) * D + rd[None, :], mask=rm[:, None] < M, other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    hi = N
    if CAUSAL:
        hi = tl.minimum(N, q_start + (pid + 1) * BM)
    for start in range(0, hi, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + (rn[:, None] * H + h) * D + rd[None, :], mask=rn[:, None] < N, other=0.0)
        v = tl.load(V + (rn[:, None] * H + h) * D + rd[None, :], mask=rn[:, None] < N, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        keep = rn[None, :] < N
        if CAUSAL:
            keep = keep & (q_start + rm[:, None] >= rn[None, :])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(Out + (rm[:, None] * H + h) * D + rd[None, :], acc.to(Out.dtype.element_ty), mask=rm[:, None] < M)
