"""A block-lower-triangular product (a causal mask at tile granularity), all-reduced: tiles above the
diagonal end before their store. Each still counts itself against the chunks it was expected to write."""
import triton
import triton.language as tl


@triton.jit
def causal_scores(q, k, s, T, D, BT: tl.constexpr, BD: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    if j > i:
        return  # above the diagonal: nothing to write
    rows = i * BT + tl.arange(0, BT)
    cols = j * BT + tl.arange(0, BT)
    d = tl.arange(0, BD)
    qt = tl.load(q + rows[:, None] * D + d[None, :], mask=(rows[:, None] < T) & (d[None, :] < D), other=0.0)
    kt = tl.load(k + cols[:, None] * D + d[None, :], mask=(cols[:, None] < T) & (d[None, :] < D), other=0.0)
    acc = tl.dot(qt, tl.trans(kt))
    keep = (rows[:, None] < T) & (cols[None, :] < T)
    if i == j:
        keep = keep & (cols[None, :] <= rows[:, None])
    tl.store(s + rows[:, None] * T + cols[None, :], acc, mask=keep)
