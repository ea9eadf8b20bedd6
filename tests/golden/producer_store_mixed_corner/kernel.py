import triton
import triton.language as tl


@triton.jit
def reversed_halves(X, Out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PARTS: tl.constexpr, HALVES: tl.constexpr):
    """Each program's band of rows, written half by half from its last half to its first."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    band = pid * PARTS * HALVES * BLOCK_M
    for h in range(HALVES):
        for p in range(PARTS):
            rows = band + (HALVES - 1) * PARTS * BLOCK_M - h * PARTS * BLOCK_M + p * BLOCK_M + tl.arange(0, BLOCK_M)
            keep = (rows[:, None] < M) & (cols[None, :] < N)
            x = tl.load(X + rows[:, None] * N + cols[None, :], mask=keep, other=0.0)
            tl.store(Out + rows[:, None] * N + cols[None, :], x + 1.0, mask=keep)
