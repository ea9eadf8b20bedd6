import triton
import triton.language as tl


@triton.jit
def layer_norm_rows(Inp, Gamma, Out, row_stride, ncols, eps, BLK: tl.constexpr):
    line = tl.program_id(0)
    Inp += line * row_stride
    Out += line * row_stride
    total = tl.zeros([BLK], dtype=tl.float32)
    for base in range(0, ncols, BLK):
        idx = base + tl.arange(0, BLK)
        total += tl.load(Inp + idx, mask=idx < ncols, other=0.0).to(tl.float32)
    mean = tl.sum(total, axis=0) / ncols
    sq = tl.zeros([BLK], dtype=tl.float32)
    for base in range(0, ncols, BLK):
        idx = base + tl.arange(0, BLK)
        x = tl.load(Inp + idx, mask=idx < ncols, other=0.0).to(tl.float32)
        sq += tl.where(idx < ncols, (x - mean) * (x - mean), 0.0)
    inv = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / ncols + eps)
    for base in range(0, ncols, BLK):
        idx = base + tl.arange(0, BLK)
        x = tl.load(Inp + idx, mask=idx < ncols, other=0.0).to(tl.float32)
        g = tl.load(Gamma + idx, mask=idx < ncols, other=0.0)
        tl.store(Out + idx, (x - mean) * inv * g, mask=idx < ncols)
