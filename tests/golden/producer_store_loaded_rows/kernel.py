import triton
import triton.language as tl


@triton.jit
def scatter_rows(X, Out, index, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCKS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    for b in range(BLOCKS):
        src = (pid * BLOCKS + b) * BLOCK_M + tl.arange(0, BLOCK_M)
        keep = (src[:, None] < M) & (cols[None, :] < N)
        x = tl.load(X + src[:, None] * N + cols[None, :], mask=keep, other=0.0)
        dst = tl.load(index + src, mask=src < M, other=0)
        tl.store(Out + dst[:, None] * N + cols[None, :], x, mask=keep)
