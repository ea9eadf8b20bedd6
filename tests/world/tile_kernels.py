"""Tiny kernels for the CPU-world tests: each program reads its rows of the communicated tensor `X`,
writes what it saw into `out` at its own (program ids), and counts its runs in `count`, so a test can
check that every tile of the grid ran exactly once after syncopy remapped the program ids."""
import triton
import triton.language as tl


@triton.jit
def tag_tiles_1d(X, out, count, rows, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    r = pid * BR + tl.arange(0, BR)
    c = tl.arange(0, NC)
    v = tl.load(X + r[:, None] * NC + c[None, :], mask=r[:, None] < rows, other=0.0)
    tl.store(out + pid, tl.sum(tl.sum(v, axis=1), axis=0))
    tl.atomic_add(count + pid, 1)


@triton.jit
def tag_tiles_2d(X, out, count, rows, NC: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    r = i * BR + tl.arange(0, BR)
    c = j * BC + tl.arange(0, BC)
    v = tl.load(X + r[:, None] * NC + c[None, :], mask=(r[:, None] < rows) & (c[None, :] < NC), other=0.0)
    n1 = tl.num_programs(1)
    tl.store(out + i * n1 + j, tl.sum(tl.sum(v, axis=1), axis=0))
    tl.atomic_add(count + i * n1 + j, 1)


@triton.jit
def tag_tiles_3d(X, out, count, rows, NC: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    k = tl.program_id(2)
    r = i * BR + tl.arange(0, BR)
    c = j * BC + tl.arange(0, BC)
    v = tl.load(X + r[:, None] * NC + c[None, :], mask=(r[:, None] < rows) & (c[None, :] < NC), other=0.0)
    n1 = tl.num_programs(1)
    n2 = tl.num_programs(2)
    slot = (i * n1 + j) * n2 + k
    tl.store(out + slot, tl.sum(tl.sum(v, axis=1), axis=0) * (k + 1))
    tl.atomic_add(count + slot, 1)
