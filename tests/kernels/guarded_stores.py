"""Stores under a test of the loop counter, as Mamba's state passing writes them (`if c < nchunks - 1:`
store the state after chunk c into slot c + 1): the launch's extent check bounds such a store at the
last iteration the test lets through, where that is proven (infer._guard_last_iteration).

One program per row of x and out [R, n * BLOCK], block c of a row at columns c * BLOCK ...:
- `shifted_store`: out block c + 1 = x block c for c < n - 1, as the state passing's `out_ptrs`.
- `shifted_store_moving_bound`: the same with the test's bound re-assigned in the loop (to the same
  value): not proven the same every iteration, so the check keeps the loop's last iteration.
- `shifted_store_past`: `if c < n:` stores block c + 1 for every c: the last row's last block is past
  the end of out.
"""
import triton
import triton.language as tl


@triton.jit
def shifted_store(x_ptr, out_ptr, n, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x_ptr += row * stride_row
    out_ptrs = out_ptr + row * stride_row + BLOCK + offs
    for c in range(n):
        x = tl.load(x_ptr + c * BLOCK + offs)
        if c < n - 1:
            tl.store(out_ptrs, x)
        out_ptrs += BLOCK


@triton.jit
def shifted_store_moving_bound(x_ptr, out_ptr, n, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x_ptr += row * stride_row
    out_ptrs = out_ptr + row * stride_row + BLOCK + offs
    last = n - 1
    for c in range(n):
        x = tl.load(x_ptr + c * BLOCK + offs)
        if c < last:
            tl.store(out_ptrs, x)
        last = n - 1
        out_ptrs += BLOCK


@triton.jit
def shifted_store_past(x_ptr, out_ptr, n, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x_ptr += row * stride_row
    out_ptrs = out_ptr + row * stride_row + BLOCK + offs
    for c in range(n):
        x = tl.load(x_ptr + c * BLOCK + offs)
        if c < n:
            tl.store(out_ptrs, x)
        out_ptrs += BLOCK
