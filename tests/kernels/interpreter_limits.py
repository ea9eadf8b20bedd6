"""Kernels that run on a GPU but not under Triton's interpreter (issue 31 item 11): a float argument's
`.to(...)` (the interpreter keeps it a Python float), a libdevice function it does not implement."""
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def scaled_rows(X, Y, eps, N: tl.constexpr):
    pid = tl.program_id(0)
    c = tl.arange(0, N)
    x = tl.load(X + pid * N + c)
    tl.store(Y + pid * N + c, x * eps.to(tl.float32))


@triton.jit
def rsqrt_rows(X, Y, N: tl.constexpr):
    pid = tl.program_id(0)
    c = tl.arange(0, N)
    x = tl.load(X + pid * N + c)
    tl.store(Y + pid * N + c, x * libdevice.rsqrt(tl.sum(x * x, 0) + 1.0))
