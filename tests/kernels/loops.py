"""Kernels whose loop over the rows of the communicated tensor carries values the loop order can
change (issue 30, part A, one kernel per numbered case and its variants), and kernels whose loop is
proven to run in any order (the controls). X: [M, NC], gathered along dim 0, BR rows an iteration,
one program; attention: Q [BM, D] local, K and V [N, D] gathered, keys at positions >= L masked.
Each returns what a reordered loop would change: the numbers, or NaN."""
import triton
import triton.language as tl


# --- case 1: a decayed sum beside a running max (any factor passed once a max existed) ---------

@triton.jit
def decayed_sum_with_max(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    c = tl.arange(0, NC)
    acc = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :])
        top = tl.maximum(top, tl.max(x, 0))
        acc = acc * 0.5 + tl.sum(x, 0)
    tl.store(out + c, acc)
    tl.store(out + NC + c, top)


@triton.jit
def decayed_sum_two_step_max(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    c = tl.arange(0, NC)
    acc = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :])
        top_new = tl.maximum(top, tl.max(x, 0))
        acc = 0.5 * acc + tl.sum(x, 0)
        top = top_new
    tl.store(out + c, acc)
    tl.store(out + NC + c, top)


@triton.jit
def rescaled_plain_sum(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """The softmax factor, guarded, but the term is the block's sum, not exp(x - max): order matters."""
    c = tl.arange(0, NC)
    acc = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :])
        top_new = tl.maximum(top, tl.max(x, 0))
        top_safe = tl.where(top_new == float("-inf"), 0.0, top_new)
        alpha = tl.exp(top - top_safe)
        acc = acc * alpha + tl.sum(x, 0)
        top = top_new
    tl.store(out + c, acc)


# --- case 2: the running max read by something else in the loop ---------------------------------

@triton.jit
def sum_of_running_max(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    c = tl.arange(0, NC)
    s = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :])
        top = tl.maximum(top, tl.max(x, 0))
        s += top
    tl.store(out + c, s)


@triton.jit
def count_new_records(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    c = tl.arange(0, NC)
    n = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        bm = tl.max(tl.load(X + rows[:, None] * NC + c[None, :]), 0)
        n += tl.where(bm > top, 1.0, 0.0)
        top = tl.maximum(top, bm)
    tl.store(out + c, n)


@triton.jit
def sum_until_max_passes(X, out, M, T, NC: tl.constexpr, BR: tl.constexpr):
    """A `break` written as a mask: blocks count until the running max passes T."""
    c = tl.arange(0, NC)
    s = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :])
        top = tl.maximum(top, tl.max(x, 0))
        s += tl.where(top < T, tl.sum(x, 0), 0.0)
    tl.store(out + c, s)


@triton.jit
def max_of_running_sum(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """A max whose term reads another carried value: the highest prefix sum."""
    c = tl.arange(0, NC)
    s = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        s += tl.sum(tl.load(X + rows[:, None] * NC + c[None, :]), 0)
        top = tl.maximum(top, s)
    tl.store(out + c, top)


@triton.jit
def sum_above_running_min(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """A running min (two-step) whose new value a sum reads."""
    c = tl.arange(0, NC)
    s = tl.zeros([NC], dtype=tl.float32)
    low = tl.full([NC], float("inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :])
        low_new = tl.minimum(low, tl.min(x, 0))
        s += tl.sum(x - low_new[None, :], 0)
        low = low_new
    tl.store(out + c, s)


# --- case 3: stores inside the loop, through helpers too ---------------------------------------

@triton.jit
def _record(out, i, NC: tl.constexpr, value):
    tl.store(out + (i + 1) * NC + tl.arange(0, NC), value)


@triton.jit
def _record_twice_removed(out, i, NC: tl.constexpr, value):
    _record(out, i, NC, value)


@triton.jit
def _bump(out, NC: tl.constexpr, value):
    tl.atomic_add(out + tl.arange(0, NC), value)


@triton.jit
def max_history_helper(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """out[1 + i] = the running max after iteration i, written by a helper."""
    c = tl.arange(0, NC)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        top = tl.maximum(top, tl.max(tl.load(X + rows[:, None] * NC + c[None, :]), 0))
        _record(out, r0 // BR, NC, top)
    tl.store(out + c, top)


@triton.jit
def max_history_nested_helper(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    c = tl.arange(0, NC)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        top = tl.maximum(top, tl.max(tl.load(X + rows[:, None] * NC + c[None, :]), 0))
        _record_twice_removed(out, r0 // BR, NC, top)
    tl.store(out + c, top)


@triton.jit
def max_history_store(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    c = tl.arange(0, NC)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        top = tl.maximum(top, tl.max(tl.load(X + rows[:, None] * NC + c[None, :]), 0))
        tl.store(out + (r0 // BR + 1) * NC + c, top)
    tl.store(out + c, top)


@triton.jit
def sum_and_atomic_helper(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """A proven sum, and an atomic through a helper: the loop keeps its order all the same."""
    c = tl.arange(0, NC)
    s = tl.zeros([NC], dtype=tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.sum(tl.load(X + rows[:, None] * NC + c[None, :]), 0)
        s += x
        _bump(out + NC, NC, x)
    tl.store(out + c, s)


# --- case 4: online-softmax attention with a key padding mask, without the first-block guard -----

@triton.jit
def padded_attention(Q, K, V, Out, M, N, L, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """The textbook online softmax; keys at positions >= L are padding."""
    rm = tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, N, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + rn[:, None] * D + rd[None, :])
        v = tl.load(V + rn[:, None] * D + rd[None, :])
        s = tl.dot(q, tl.trans(k)) * sm_scale
        s = tl.where(rn[None, :] < L, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(Out + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < M)


@triton.jit
def padded_attention_exp2(Q, K, V, Out, M, N, L, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """The same in base 2 (the scale folds in log2(e)), the operands of each update the other way round."""
    rm = tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, other=0.0)
    m_i = tl.zeros((BM,), tl.float32) - float("inf")
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, N, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + rn[:, None] * D + rd[None, :])
        v = tl.load(V + rn[:, None] * D + rd[None, :])
        s = tl.where(rn[None, :] < L, tl.dot(q, tl.trans(k)) * (sm_scale * 1.4426950408889634), float("-inf"))
        m_new = tl.maximum(tl.max(s, 1), m_i)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = tl.sum(p, 1) + alpha * l_i
        acc = tl.dot(p, v) + alpha[:, None] * acc
        m_i = m_new
    tl.store(Out + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < M)


@triton.jit
def padded_attention_half_guard(Q, K, V, Out, M, N, L, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """The factor guarded, the weights not: exp(s - m_new) is still exp(-inf - -inf) on a masked first block."""
    rm = tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, N, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + rn[:, None] * D + rd[None, :])
        v = tl.load(V + rn[:, None] * D + rd[None, :])
        s = tl.where(rn[None, :] < L, tl.dot(q, tl.trans(k)) * sm_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(Out + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < M)


@triton.jit
def padded_attention_mask_tensor(Q, K, V, KM, Out, M, N, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Unguarded, the padding read from a mask tensor KM (1: a real key), as models pass it."""
    rm = tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, N, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + rn[:, None] * D + rd[None, :])
        v = tl.load(V + rn[:, None] * D + rd[None, :])
        keep = tl.load(KM + rn) != 0
        s = tl.where(keep[None, :], tl.dot(q, tl.trans(k)) * sm_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(Out + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < M)


# --- controls: proven, run in arrival order ----------------------------------------------------

@triton.jit
def guarded_padded_attention(Q, K, V, Out, M, N, L, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """The online softmax with the first-block guard of templates/ag_attention: proven."""
    rm = tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, N, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + rn[:, None] * D + rd[None, :])
        v = tl.load(V + rn[:, None] * D + rd[None, :])
        s = tl.where(rn[None, :] < L, tl.dot(q, tl.trans(k)) * sm_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(Out + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < M)


@triton.jit
def sum_max_count(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """A sum, a running max, a running min (two-step) and a block count, none reading another: proven."""
    c = tl.arange(0, NC)
    s = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    low = tl.full([NC], float("inf"), tl.float32)
    n = 0
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :])
        s += tl.sum(x, 0)
        top = tl.maximum(top, tl.max(x, 0))
        low_new = tl.minimum(tl.min(x, 0), low)
        n += 1
        low = low_new
    tl.store(out + c, s)
    tl.store(out + NC + c, top)
    tl.store(out + 2 * NC + c, low + n * 0.0)
