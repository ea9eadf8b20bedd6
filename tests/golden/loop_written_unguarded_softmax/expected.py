import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def padded_attention(Q, KV, Out, M, N, L, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
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
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    # syncopy: this loop keeps its written order (each iteration waits for its own chunks): it carries 'acc' from iteration to iteration (rescaled by exp(max before - max after) without the first-block guard: a block whose scores are all -inf, run first, makes exp(-inf - -inf) = NaN; guard the new max as templates/ag_attention does (`m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)`, subtracted in both exps))
    for start in range(0, N, BN):
        rn = start + tl.arange(0, BN)
        # syncopy: no bound before the loop (each iteration reads other rows of 'KV', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of KV this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(KV + rn[:, None] * (2 * D) + rd[None, :], rn[:, None] < N, KV, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        k = tl.load(KV + rn[:, None] * (2 * D) + rd[None, :], mask=rn[:, None] < N, other=0.0)
        # syncopy: no bound before the loop (each iteration reads other rows of 'KV', so each waits for its own chunks): wait before each read, from its own pointers
        # syncopy: wait for the chunks of KV this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(KV + rn[:, None] * (2 * D) + D + rd[None, :], rn[:, None] < N, KV, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
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
