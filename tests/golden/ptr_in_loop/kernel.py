import triton
import triton.language as tl


@triton.jit
def mm_rebuild(xs, ws, ys, MM, NN, KK, sx_m, sx_k, sw_k, sw_n, sy_m, sy_n,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a = tl.program_id(0)
    b = tl.program_id(1)
    om = a * BM + tl.arange(0, BM)
    on = b * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(tl.cdiv(KK, BK)):
        ok = kb * BK + tl.arange(0, BK)
        xp = xs + om[:, None] * sx_m + ok[None, :] * sx_k
        wp = ws + ok[:, None] * sw_k + on[None, :] * sw_n
        xv = tl.load(xp, mask=(om[:, None] < MM) & (ok[None, :] < KK), other=0.0)
        wv = tl.load(wp, mask=(ok[:, None] < KK) & (on[None, :] < NN), other=0.0)
        acc += tl.dot(xv, wv)
    tl.store(ys + om[:, None] * sy_m + on[None, :] * sy_n, acc, mask=(om[:, None] < MM) & (on[None, :] < NN))
