"""Kernels for the read checker's tests (tests/world/test_read_check.py): plain row blocks, whose
waits or counts a too-narrow `binding.rows` in the schedule makes unsound on purpose."""
import triton
import triton.language as tl


@triton.jit
def double_rows(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    cols = tl.arange(0, NC)
    v = tl.load(X + rows[:, None] * NC + cols[None, :], mask=rows[:, None] < M, other=0.0)
    tl.store(out + rows[:, None] * NC + cols[None, :], v * 2.0, mask=rows[:, None] < M)


@triton.jit
def double_into(X, C, M, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    cols = tl.arange(0, NC)
    v = tl.load(X + rows[:, None] * NC + cols[None, :], mask=rows[:, None] < M, other=0.0)
    tl.store(C + rows[:, None] * NC + cols[None, :], v * 2.0, mask=rows[:, None] < M)
