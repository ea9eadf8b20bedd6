import triton
import triton.language as tl


@triton.jit
def scaled_rows(src, scale, dst, total_rows, width, s_src, s_dst,
                ROWS: tl.constexpr, COLS: tl.constexpr):
    blk = tl.program_id(0)
    rr = blk * ROWS + tl.arange(0, ROWS)
    cc = tl.arange(0, COLS)
    keep = (rr[:, None] < total_rows) & (cc[None, :] < width)
    vals = tl.load(src + rr[:, None] * s_src + cc[None, :], mask=keep, other=0.0)
    factor = tl.load(scale + cc, mask=cc < width, other=1.0)
    tl.store(dst + rr[:, None] * s_dst + cc[None, :], vals * factor[None, :], mask=keep)
