import triton
import triton.language as tl


@triton.jit
def col_major_grid(feat, wt, res, F, H, D, sf0, sf1, sw0, sw1, sr0, sr1,
                   BF: tl.constexpr, BH: tl.constexpr, BD: tl.constexpr):
    col_tile = tl.program_id(axis=0)
    row_tile = tl.program_id(axis=1)
    fr = row_tile * BF + tl.arange(0, BF)
    hc = col_tile * BH + tl.arange(0, BH)
    acc = tl.zeros((BF, BH), dtype=tl.float32)
    for d0 in range(0, D, BD):
        dd = d0 + tl.arange(0, BD)
        fv = tl.load(feat + fr[:, None] * sf0 + dd[None, :] * sf1, mask=(fr[:, None] < F) & (dd[None, :] < D), other=0.0)
        wv = tl.load(wt + dd[:, None] * sw0 + hc[None, :] * sw1, mask=(dd[:, None] < D) & (hc[None, :] < H), other=0.0)
        acc += tl.dot(fv, wv)
    tl.store(res + fr[:, None] * sr0 + hc[None, :] * sr1, acc, mask=(fr[:, None] < F) & (hc[None, :] < H))
