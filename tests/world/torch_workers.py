"""Rank bodies of test_torch_integration: the profiler, custom operators and torch.compile."""
from __future__ import annotations

import torch
import torch.distributed as dist
from tests.oracles import worst


def profiled_and_compiled(rank: int, world: int) -> dict:
    import syncopy.templates.ops as ops
    from syncopy import templates
    from syncopy.templates.ag_gemm import template as ag

    torch.manual_seed(rank)
    out = {}
    # 1. A decorator launch shows up in torch.profiler under the kernel's name, its transfers inside.
    fused = templates.get("ag_gemm").fused(chunks_per_rank=2)
    a, b = torch.randn(32, 16), torch.randn(16, 32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        ag.launch(fused, a, b)
    out["profiled"] = sorted({e.name for e in prof.events() if e.name.startswith("syncopy::")})

    # 2. A module calling two template operators, compiled whole (fullgraph: a graph break fails),
    # run twice with new data, against the unfused reference.
    group_name = dist.group.WORLD.group_name

    class Mlp(torch.nn.Module):
        def __init__(self, up, down):
            super().__init__()
            self.up, self.down = up, down

        def forward(self, x):
            h = torch.ops.syncopy.ag_gemm(x, self.up, group_name).relu()
            return torch.ops.syncopy.gemm_rs(h, self.down, group_name) * 0.5

    errors = []
    for step in range(2):
        g = torch.Generator().manual_seed(100 + step)
        up, down = torch.randn(16, 24, generator=g), torch.randn(24, 16, generator=g)
        x = torch.randn(32, 16, generator=torch.Generator().manual_seed(10 * step + rank))
        model = torch.compile(Mlp(up, down), backend="aot_eager", fullgraph=True)
        y = model(x)
        full = torch.cat([torch.empty_like(x) for _ in range(world)])
        dist.all_gather_into_tensor(full, x)
        partial = (full @ up).relu() @ down
        dist.all_reduce(partial)
        want = partial.chunk(world)[rank] * 0.5
        errors.append((y - want).abs().max().item() / max(1.0, want.abs().max().item()))
    out["compiled_err"] = worst(errors)
    out["shape"] = tuple(y.shape)
    # 3. The Python wrapper names the group itself; fake tensors give the launch's real shape.
    out["wrapper_shape"] = tuple(ops.ag_gemm(x, up).shape)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = torch.ops.syncopy.gemm_rs(mode.from_tensor(torch.empty(32 * world, down.shape[0])), mode.from_tensor(down), group_name)
    out["fake_shape"] = tuple(fake.shape)
    return out


def differentiable_mlp(rank: int, world: int) -> dict:
    """The sequence-parallel MLP through the template operators, forward and backward, twice, against
    the same computation in plain torch autograd on the gathered tensors."""
    import syncopy.templates.ops as ops

    out = {"errors": []}
    for step in range(2):
        g = torch.Generator().manual_seed(200 + step)
        up, down = torch.randn(16, 24, generator=g), torch.randn(24, 16, generator=g)  # this rank's slices, alike per step
        up = up + rank  # each rank its own column slice of W_up, its row slice of W_down
        down = down - rank
        x = torch.randn(32, 16, generator=torch.Generator().manual_seed(10 * step + rank))
        dy = torch.randn(32, 16, generator=torch.Generator().manual_seed(50 * step + rank))
        xs, ups, downs = (t.clone().requires_grad_() for t in (x, up, down))
        y = ops.gemm_rs(ops.ag_gemm(xs, ups).relu(), downs)
        y.backward(dy)
        # Reference: the whole layer on every rank from gathered pieces, autograd by torch.
        xs_all = [torch.empty_like(x) for _ in range(world)]
        ups_all = [torch.empty_like(up) for _ in range(world)]
        downs_all = [torch.empty_like(down) for _ in range(world)]
        dys = [torch.empty_like(dy) for _ in range(world)]
        for parts, t in ((xs_all, x), (ups_all, up), (downs_all, down), (dys, dy)):
            dist.all_gather(parts, t)
        X = torch.cat(xs_all).requires_grad_()
        U = torch.cat(ups_all, dim=1).requires_grad_()
        D = torch.cat(downs_all, dim=0).requires_grad_()
        Y = (X @ U).relu() @ D
        Y.backward(torch.cat(dys))
        rows, cols = slice(32 * rank, 32 * (rank + 1)), slice(24 * rank, 24 * (rank + 1))

        def err(got, want):
            return (got - want).abs().max().item() / max(1.0, want.abs().max().item())

        out["errors"].append({"y": err(y, Y[rows]), "dx": err(xs.grad, X.grad[rows]), "dup": err(ups.grad, U.grad[:, cols]),
                              "ddown": err(downs.grad, D.grad[cols])})
    return out


def torch_tools(rank: int, world: int) -> dict:
    """Both checks above in one world (a spawn costs ~10 s on CI)."""
    return {"compiled": profiled_and_compiled(rank, world), "autograd": differentiable_mlp(rank, world)}
