"""A non-GEMM row kernel: one program per row, RMS normalisation, pointers moved to the row first."""
import triton
import triton.language as tl


@triton.jit
def rms_rows(X, W, Y, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        v = tl.load(X + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += v * v
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = cols < n_cols
        v = tl.load(X + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + cols, (v * rstd * w).to(Y.dtype.element_ty), mask=m)
