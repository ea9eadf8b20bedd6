"""A kernel that reads its communicated rows through Triton's `tl.load` under other names, as some
repositories write it: a module-level alias (`my_load = tl.load`) and an import under another name
(`from triton.language import load as direct_load`). syncopy reads both as `tl.load` (issue 31).

(Triton's interpreter cannot run the unfused kernel: a module-level alias of a builtin misses the
interpreter's patching; the fused kernel, whose calls syncopy writes as `tl.load`, runs there.)"""
import triton
import triton.language as tl
from triton.language import load as direct_load

my_load = tl.load


@triton.jit
def aliased_rows(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """out = 3 * X, BR rows per program, read twice through the two aliases."""
    pid = tl.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    c = tl.arange(0, NC)
    v = my_load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
    w = direct_load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
    tl.store(out + rows[:, None] * NC + c[None, :], v * 2 + w, mask=rows[:, None] < M)
