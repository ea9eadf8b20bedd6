import triton
import triton.language as tl


@triton.jit
def rotate_rows(X, Out, M, N, shift, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STEPS: tl.constexpr):
    """Out[(r + shift) % M] = 2 * X[r]: each program walks STEPS row blocks, strided over the programs."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    for step in range(STEPS):
        src = pid * BLOCK_M + step * tl.num_programs(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        x = tl.load(X + src[:, None] * N + cols[None, :], mask=(src[:, None] < M) & (cols[None, :] < N), other=0.0)
        dst = (src + shift) % M
        # the destination wraps around the end of Out
        tl.store(Out + dst[:, None] * N + cols[None, :], 2.0 * x, mask=(src[:, None] < M) & (cols[None, :] < N))
