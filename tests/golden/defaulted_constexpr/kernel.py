import triton
import triton.language as tl


@triton.jit
def act_rows(inp, outp, count, stride_in, stride_out, BLOCK: tl.constexpr, USE_RELU: tl.constexpr = True):
    prog = tl.program_id(0)
    rows = prog * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(inp + rows * stride_in, mask=rows < count, other=0.0)
    if USE_RELU:
        x = tl.maximum(x, 0.0)
    tl.store(outp + rows * stride_out, x, mask=rows < count)
