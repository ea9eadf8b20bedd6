import triton
import triton.language as tl


@triton.jit
def decayed_column_sum(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """Per column: a sum of the row blocks that halves the older blocks' weight each step, beside the
    running column max. The decay is not a softmax rescale: the loop keeps its written order."""
    c = tl.arange(0, NC)
    acc = tl.zeros([NC], dtype=tl.float32)
    top = tl.full([NC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        top = tl.maximum(top, tl.max(x, 0))
        acc = acc * 0.5 + tl.sum(x, 0)
    tl.store(out + c, acc)
    tl.store(out + NC + c, top)
