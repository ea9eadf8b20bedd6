"""A kernel reading several communicated tensors: dequantisation whose per-row scale S is read before its data Q (tests/kernels/listed.py)."""
import triton
import triton.language as tl


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
