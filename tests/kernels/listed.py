"""Kernels that read several communicated tensors (`tensor: [A, B]`, issue 30 part B), written the
way users write them: pointers moved to the program's rows first (`X += row * N`, as Triton's
layer-norm tutorial does) or plain offsets, the tensors read in either order, a per-row scale read
before the data it scales. tests/world/listed_workers.py launches each with every order of its list.
"""
import triton
import triton.language as tl


@triton.jit
def swiglu_fwd(A, B, Y, M, N: tl.constexpr, BR: tl.constexpr):
    """SwiGLU forward, BR rows per program: y = silu(a) * b, `a` read before `b`."""
    row0 = tl.program_id(0) * BR
    A += row0 * N
    B += row0 * N
    Y += row0 * N
    r = tl.arange(0, BR)
    c = tl.arange(0, N)
    m = (row0 + r)[:, None] < M
    a = tl.load(A + r[:, None] * N + c[None, :], mask=m, other=0.0)
    b = tl.load(B + r[:, None] * N + c[None, :], mask=m, other=0.0)
    tl.store(Y + r[:, None] * N + c[None, :], a * tl.sigmoid(a) * b, mask=m)


@triton.jit
def swiglu_offsets(A, B, Y, M, N, BR: tl.constexpr, BN: tl.constexpr):
    """The same with plain offsets and a loop over column blocks; `b` is read first this time."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    for c0 in range(0, N, BN):
        cols = c0 + tl.arange(0, BN)
        offs = rows[:, None] * N + cols[None, :]
        m = (rows[:, None] < M) & (cols[None, :] < N)
        b = tl.load(B + offs, mask=m, other=0.0)
        a = tl.load(A + offs, mask=m, other=0.0)
        tl.store(Y + offs, a * tl.sigmoid(a) * b, mask=m)


@triton.jit
def dequant_rows(Q, S, Y, M, N: tl.constexpr, BR: tl.constexpr):
    """Dequantise BR rows per program: y = q * s[row], the per-row scale `s` read before `q`."""
    row0 = tl.program_id(0) * BR
    S += row0
    Q += row0 * N
    Y += row0 * N
    r = tl.arange(0, BR)
    c = tl.arange(0, N)
    rm = (row0 + r) < M
    s = tl.load(S + r, mask=rm, other=0.0)
    q = tl.load(Q + r[:, None] * N + c[None, :], mask=rm[:, None], other=0.0)
    tl.store(Y + r[:, None] * N + c[None, :], q * s[:, None], mask=rm[:, None])


@triton.jit
def dequant_row(Q, S, Y, N, BN: tl.constexpr):
    """One row per program: its scale is one scalar load, then the row in column blocks."""
    row = tl.program_id(0)
    s = tl.load(S + row)
    for c0 in range(0, N, BN):
        cols = c0 + tl.arange(0, BN)
        q = tl.load(Q + row * N + cols, mask=cols < N, other=0.0)
        tl.store(Y + row * N + cols, q * s, mask=cols < N)


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


@triton.jit
def swiglu_desc(A, B, Y, M, N: tl.constexpr, BR: tl.constexpr):
    """SwiGLU forward reading `a` through pointers, then `b` through a tensor descriptor (TMA on sm_90)."""
    row0 = tl.program_id(0) * BR
    r = row0 + tl.arange(0, BR)
    c = tl.arange(0, N)
    m = r[:, None] < M
    a = tl.load(A + r[:, None] * N + c[None, :], mask=m, other=0.0)
    b_desc = tl.make_tensor_descriptor(B, shape=[M, N], strides=[N, 1], block_shape=[BR, N])
    b = b_desc.load([row0, 0])
    tl.store(Y + r[:, None] * N + c[None, :], a * tl.sigmoid(a) * b, mask=m)


@triton.jit
def _rows_of(P, row0, M, N: tl.constexpr, BR: tl.constexpr):
    r = row0 + tl.arange(0, BR)
    c = tl.arange(0, N)
    return tl.load(P + r[:, None] * N + c[None, :], mask=r[:, None] < M, other=0.0)


@triton.jit
def swiglu_helper(A, B, Y, M, N: tl.constexpr, BR: tl.constexpr):
    """SwiGLU forward whose loads are a helper's, `b` read first."""
    row0 = tl.program_id(0) * BR
    b = _rows_of(B, row0, M, N, BR)
    a = _rows_of(A, row0, M, N, BR)
    r = row0 + tl.arange(0, BR)
    c = tl.arange(0, N)
    tl.store(Y + r[:, None] * N + c[None, :], a * tl.sigmoid(a) * b, mask=r[:, None] < M)


@triton.jit
def _silu_mul(P, Q, offs, m):
    a = tl.load(P + offs, mask=m, other=0.0)
    return a * tl.sigmoid(a) * tl.load(Q + offs, mask=m, other=0.0)


@triton.jit
def swiglu_pair(A, B, Y, M, N: tl.constexpr, BR: tl.constexpr):
    """SwiGLU forward whose one helper is handed both listed tensors (checked mode checks each in its copy)."""
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    offs = r[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(Y + offs, _silu_mul(A, B, offs, r[:, None] < M), mask=r[:, None] < M)


@triton.jit
def _mul_silu(P, Q, offs, m):
    b = tl.load(Q + offs, mask=m, other=0.0)
    a = tl.load(P + offs, mask=m, other=0.0)
    return a * tl.sigmoid(a) * b


@triton.jit
def swiglu_pair_b_first(A, B, Y, M, N: tl.constexpr, BR: tl.constexpr):
    """swiglu_pair whose helper reads B, the second listed tensor, first (checked mode's test of B's own checks)."""
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    offs = r[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(Y + offs, _mul_silu(A, B, offs, r[:, None] < M), mask=r[:, None] < M)
