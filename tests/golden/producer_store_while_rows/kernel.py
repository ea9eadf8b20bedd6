import triton
import triton.language as tl


@triton.jit
def copy_band(X, Out, M, N, ROWS_PER_PROGRAM, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    row = pid * ROWS_PER_PROGRAM
    end = row + ROWS_PER_PROGRAM
    while row < end:
        rows = row + tl.arange(0, BLOCK_M)
        keep = (rows[:, None] < tl.minimum(end, M)) & (cols[None, :] < N)
        x = tl.load(X + rows[:, None] * N + cols[None, :], mask=keep, other=0.0)
        tl.store(Out + rows[:, None] * N + cols[None, :], x, mask=keep)
        row += BLOCK_M
