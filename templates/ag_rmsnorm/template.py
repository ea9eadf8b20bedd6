"""ag_rmsnorm: Y = rmsnorm(all_gather(X)) * W; shape M,N,K is M rows per rank and N columns (K unused)."""
import torch
import triton

from syncopy.templates import all_gather_rows, world_size

DEFAULT_SHAPE = (64, 96, 0)
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def inputs(rank, world, shape, dtype, seed=0):
    rows, cols, _ = shape
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    x = torch.randn(rows, cols, generator=g).to(dtype)
    w = torch.randn(cols, generator=torch.Generator().manual_seed(seed)).to(dtype)
    return {"x": x, "w": w}


def launch(fused, x, w, group=None):
    """Y = rmsnorm(all_gather(x)) * w, fused."""
    world = world_size(group)
    m, n = x.shape[0] * world, x.shape[1]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    fused[(m,)](x, w, y, x.stride(0), y.stride(0), n, 1e-6, BLOCK=triton.next_power_of_2(n), group=group)
    return y


def reference(x, w, group=None):
    f = all_gather_rows(x, group).float()
    return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


SIGNATURE = {"X": "*fp16", "W": "*fp16", "Y": "*fp16", "stride_x": "i32", "stride_y": "i32", "n_cols": "i32", "eps": "fp32"}
CONSTEXPRS = dict(BLOCK=1024)
