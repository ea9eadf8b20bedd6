"""A kernel reading several communicated tensors: SwiGLU forward listed as [B, A] while the kernel reads A first (tests/kernels/listed.py)."""
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
