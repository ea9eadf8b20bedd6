"""Kernels for the read checker's tests (tests/world/test_read_check.py): plain row blocks, whose
waits or counts a too-narrow `binding.rows` in the schedule makes unsound on purpose, and reads
where checked mode used to look at the wrong time or not at all (an elif's test, a while's later
tests, a helper imported from another file). Each of the latter stores one value per program:
column 0 of its block's first row (elif), the count of leading finite rows of its block (while),
the sum of column 0 over its block (helper)."""
import triton
import triton.language as tl

from tests.kernels import read_check_helpers as rch


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


@triton.jit
def first_of_block_elif(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    base = X + pid * BR * NC
    if pid == 0:
        v = tl.load(base)
    elif tl.sum(tl.load(base + tl.arange(0, BR) * NC)) > -1e30:
        v = tl.load(base)
    else:
        v = -1.0
    tl.store(out + pid, v)


@triton.jit
def finite_rows_while(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    base = X + pid * BR * NC
    i = 0
    while (i < BR) & (tl.load(base + i * NC, mask=i < BR, other=0.0) > -1e30):
        i += 1
    tl.store(out + pid, tl.zeros([], dtype=tl.float32) + i)


@triton.jit
def block_sum_imported(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    s = rch.block_sum(X, pid, NC, BR)
    tl.store(out + pid, s)
