import triton
import triton.language as tl

SCALE = 2.0  # a module constant


def launch_helper(n, block):
    # plain Python: untouched
    return (triton.cdiv(n, block),)


@triton.jit
def first_kernel(u, v, n, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    o = i * BLOCK + tl.arange(0, BLOCK)
    tl.store(v + o, tl.load(u + o, mask=o < n) * SCALE, mask=o < n)


# between the kernels
@triton.jit
def second_kernel(u, v, n, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    o = i * BLOCK + tl.arange(0, BLOCK)
    tl.store(v + o, tl.load(u + o, mask=o < n) + 1.0, mask=o < n)


@triton.jit
def third_kernel(u,  v, n,
                 BLOCK :  tl.constexpr):   # odd spacing is kept
    pass
# trailing comment at the end of the file
