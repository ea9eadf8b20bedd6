"""A tutorial-style GEMM: 1-D launch, grouped tile ordering, pointers advanced in the K loop."""
import triton
import triton.language as tl


@triton.jit
def matmul_grouped(lhs, rhs, out, M, N, K,
                   s_lm, s_lk, s_rk, s_rn, s_om, s_on,
                   TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr, GROUP: tl.constexpr):
    tile = tl.program_id(axis=0)
    tiles_m = tl.cdiv(M, TM)
    tiles_n = tl.cdiv(N, TN)
    per_group = GROUP * tiles_n
    group = tile // per_group
    first_m = group * GROUP
    group_rows = min(tiles_m - first_m, GROUP)
    tm = first_m + ((tile % per_group) % group_rows)
    tn = (tile % per_group) // group_rows
    rm = (tm * TM + tl.arange(0, TM)) % M
    rn = (tn * TN + tl.arange(0, TN)) % N
    rk = tl.arange(0, TK)
    lp = lhs + (rm[:, None] * s_lm + rk[None, :] * s_lk)
    rp = rhs + (rk[:, None] * s_rk + rn[None, :] * s_rn)
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, TK)):
        x = tl.load(lp, mask=rk[None, :] < K - kk * TK, other=0.0)
        y = tl.load(rp, mask=rk[:, None] < K - kk * TK, other=0.0)
        acc = tl.dot(x, y, acc)
        lp += TK * s_lk
        rp += TK * s_rk
    res = acc.to(out.dtype.element_ty)
    om = tm * TM + tl.arange(0, TM)
    on = tn * TN + tl.arange(0, TN)
    tl.store(out + om[:, None] * s_om + on[None, :] * s_on, res, mask=(om[:, None] < M) & (on[None, :] < N))
