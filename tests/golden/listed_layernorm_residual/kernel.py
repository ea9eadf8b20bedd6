"""A kernel reading several communicated tensors: layer norm with a residual input (tests/kernels/listed.py)."""
import triton
import triton.language as tl


@triton.jit
def layernorm_residual(X, RESIDUAL, W, Y, N, eps, BLOCK: tl.constexpr):
    """Layer norm of x + residual, one row per program (Triton's tutorial, with a residual input):
    three passes over the row in column blocks, `x` and the residual read in each."""
    row = tl.program_id(0)
    X += row * N
    RESIDUAL += row * N
    Y += row * N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.0)
        acc += x + tl.load(RESIDUAL + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        h = tl.load(X + cols, mask=cols < N, other=0.0) + tl.load(RESIDUAL + cols, mask=cols < N, other=0.0)
        d = tl.where(cols < N, h - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        h = tl.load(X + cols, mask=cols < N, other=0.0) + tl.load(RESIDUAL + cols, mask=cols < N, other=0.0)
        w = tl.load(W + cols, mask=cols < N, other=0.0)
        tl.store(Y + cols, (h - mean) * rstd * w, mask=cols < N)
