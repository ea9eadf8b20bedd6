"""A module of @triton.jit device functions in the style of FlagGems' triton_lang_extension (kernels
import it as `tle` and write `pid = tle.program_id(0)`), with helpers that read and store through the
pointers they are handed. tests/kernels/helper_modules.py imports it: syncopy follows these helpers
from there (issue 31, items 3 and 9)."""
import triton
from triton import language as tl


@triton.jit
def program_id(axis: int) -> tl.tensor:
    return tl.program_id(axis).to(tl.int64)


@triton.jit
def exp(x):
    return tl.exp(x)



@triton.jit
def load_rows(P, rows, M, NC: tl.constexpr):
    """Rows `rows` of a [M, NC] row-major tensor (zeros past M)."""
    c = tl.arange(0, NC)
    return tl.load(P + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)


@triton.jit
def store_rows(P, rows, value, M, NC: tl.constexpr):
    c = tl.arange(0, NC)
    tl.store(P + rows[:, None] * NC + c[None, :], value, mask=rows[:, None] < M)


@triton.jit
def tile_rows(BR: tl.constexpr):
    """This program's rows, from the program id the helper reads itself (not a plain hand-back)."""
    return tl.program_id(0) * BR + tl.arange(0, BR)
