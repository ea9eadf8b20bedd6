"""MoE-style combine, reduce-scattered: each program writes its rows of expert output back to the token
rows an index tensor names, so the rows a tile writes change with the data of every launch."""
import triton
import triton.language as tl


@triton.jit
def combine(expert_out, token_of, out, n_rows, H, BR: tl.constexpr, BH: tl.constexpr):
    pid = tl.program_id(0)
    r = pid * BR + tl.arange(0, BR)
    h = tl.arange(0, BH)
    keep = (r[:, None] < n_rows) & (h[None, :] < H)
    v = tl.load(expert_out + r[:, None] * H + h[None, :], mask=keep, other=0.0)
    dest = tl.load(token_of + r, mask=r < n_rows, other=0)
    tl.atomic_add(out + dest[:, None] * H + h[None, :], v, mask=keep)
