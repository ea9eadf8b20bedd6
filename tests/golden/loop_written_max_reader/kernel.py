import triton
import triton.language as tl


@triton.jit
def new_records(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """Per column: how many row blocks set a new maximum. The count reads the running max, so the
    loop keeps its written order."""
    c = tl.arange(0, NC)
    count = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        block_max = tl.max(tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=float("-inf")), 0)
        count += tl.where(block_max > top, 1.0, 0.0)
        top = tl.maximum(top, block_max)
    tl.store(out + c, count)
