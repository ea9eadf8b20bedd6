"""Kernels whose program ids, reads, stores and math come from helpers of another module
(tests/kernels/tle_ext.py, imported as FlagGems imports its triton_lang_extension): syncopy follows
them as it follows helpers of the kernel's own file (issue 31, items 3 and 9). X and out are
[M, NC] row-major."""
import triton
import triton.language as tl

from tests.kernels import tle_ext as tle
from tests.kernels.tle_ext import exp, load_rows, store_rows


@triton.jit
def softplus_rows(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """out = log(1 + exp(X)), a block of BR rows a program; the program id and the exponential through
    helpers of another module, the read inline. (A Triton builtin under another name, `triton_cast =
    tl.cast`, is followed as well, but Triton's interpreter cannot run it: tests/unit/test_helpers_across_modules.py.)"""
    pid = tle.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    c = tl.arange(0, NC)
    x = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
    y = tl.log(1.0 + exp(x.to(tl.float32)))
    tl.store(out + rows[:, None] * NC + c[None, :], y, mask=rows[:, None] < M)


@triton.jit
def shifted_rows(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """out block p = X block p + X block p + 1 (zeros past M), read through a helper of another
    module handed the tensor and the rows."""
    pid = tle.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    v = load_rows(X, rows, M, NC) + load_rows(X, rows + BR, M, NC)
    store_rows(out, rows, v, M, NC)


@triton.jit
def doubled_rows(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """A producer (reduce_scatter / all_reduce of `out`): out = 2 X, its tile from tle.program_id and
    its stores through a helper of another module."""
    pid = tle.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    store_rows(out, rows, load_rows(X, rows, M, NC) * 2.0, M, NC)


@triton.jit
def own_rows_helper(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """tl.program_id read inside a helper of another module that does more than hand it back: tiles
    keep their launch order, and the transformed source says why."""
    rows = tle.tile_rows(BR)
    store_rows(out, rows, load_rows(X, rows, M, NC) + 1.0, M, NC)
