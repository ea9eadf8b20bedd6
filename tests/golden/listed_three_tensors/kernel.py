"""A kernel reading several communicated tensors: three listed tensors, the scale read first (tests/kernels/listed.py)."""
import triton
import triton.language as tl


@triton.jit
def layernorm_scaled(X, RESIDUAL, ROWSCALE, W, Y, N, eps, BLOCK: tl.constexpr):
    """Layer norm of x * rowscale[row] + residual: three communicated tensors, the scale read first."""
    row = tl.program_id(0)
    s = tl.load(ROWSCALE + row)
    X += row * N
    RESIDUAL += row * N
    Y += row * N
    cols = tl.arange(0, BLOCK)
    m = cols < N
    h = tl.load(X + cols, mask=m, other=0.0) * s + tl.load(RESIDUAL + cols, mask=m, other=0.0)
    mean = tl.sum(h, axis=0) / N
    d = tl.where(m, h - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(W + cols, mask=m, other=0.0)
    tl.store(Y + cols, d * rstd * w, mask=m)
