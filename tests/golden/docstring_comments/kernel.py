"""Module docstring stays first."""
import triton
import triton.language as tl

# A comment above the kernel's decorator.


@triton.jit
def gather_sum(table, out, n, stride, BLOCK: tl.constexpr):
    """Sum each block of rows of `table` into `out`.

    The docstring must stay the first statement of the function.
    """
    # which block of rows this program owns
    part = tl.program_id(0)  # trailing comment on the program id
    offs = part * BLOCK + tl.arange(0, BLOCK)

    # read the rows (the first read: a wait goes above this comment block)
    # second comment line
    vals = tl.load(table + offs * stride, mask=offs < n, other=0.0)  # trailing comment on the read
    # after the read
    tl.store(out + part, tl.sum(vals, axis=0))
