import triton
import triton.language as tl


@triton.jit
def column_stats(X, S, MX, M, NC: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """Per column block: the sum and the max over every row of X, BR rows an iteration. The loop only
    accumulates (a sum and a running max), so it runs in chunk-arrival order."""
    pid = tl.program_id(0)
    c = pid * BC + tl.arange(0, BC)
    total = tl.zeros([BC], dtype=tl.float32)
    top = tl.full([BC], float("-inf"), tl.float32)
    for r0 in range(0, M, BR):
        rows = r0 + tl.arange(0, BR)
        x = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=float("-inf"))
        top = tl.maximum(top, tl.max(x, 0))
        total += tl.sum(tl.where(rows[:, None] < M, x, 0.0), 0)
    tl.store(S + c, total)
    tl.store(MX + c, top)
