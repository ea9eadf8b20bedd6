"""A @triton.jit helper imported by tests/kernels/read_check.py from this other file: checked mode
calls a checked copy of it, whose checks name the line of the kernel file's call."""
import triton
import triton.language as tl


@triton.jit
def block_sum(p, pid, NC: tl.constexpr, BR: tl.constexpr):
    return tl.sum(tl.load(p + (pid * BR + tl.arange(0, BR)) * NC))
