"""Rank bodies of the pipeline tests (spawned by tests/world/harness.py)."""
from __future__ import annotations

import torch

from tests.host_access import CountingHostAccess


def tp_mlp(rank: int, world: int, shape=(20, 32, 48), launches: int = 3, chunks: int = 2, dtype=torch.float32,
           trace=None) -> dict:
    """`launches` tp_mlp launches with fresh inputs each and NaN-poisoned receive buffers: the worst
    error against torch, and the ids of every buffer syncopy holds after each launch."""
    from syncopy import templates

    t = templates.get("tp_mlp")
    op = t.fused(chunks_per_rank=chunks, poison_receive=True, timeout_s=30.0, trace=trace or False)
    worst, held, graphs = 0.0, [], []
    for seed in range(launches):
        inp = t.module.inputs(rank, world, shape, dtype, seed=seed)
        y = t.module.launch(op, **inp)
        ref = t.module.reference(**inp)
        err = ((y.float() - ref.float()).abs().max() / max(1.0, ref.float().abs().max().item())).item()
        worst = max(worst, err if err == err else float("inf"))
        held.append(_held(op))
        graphs.append(id(op.pipeline.graph()))
    plan = next(iter(op.pipeline.plans.values()))
    return {"rank": rank, "err": worst, "held": held, "plans": len(op.pipeline.plans), "edges": [tuple(vars(e).values()) for e in plan.edges],
            "epochs": [link.epoch for link in plan.links.values()], "graph": op.pipeline.graph().text(),
            "same_graph": len(set(graphs)) == 1}


def _held(op) -> list:
    """The storage of every buffer, signal pad and table syncopy holds for `op` (an allocation changes it)."""
    ptrs = []
    for plan in op.pipeline.plans.values():
        for link in plan.links.values():
            ptrs += [link.ctx.data_ptr(), link.signals.data_ptr()]
        for v in plan.variants:
            for ctx, _ in v.contexts.table.values():
                ptrs += [t.data_ptr() for t in (ctx.buffer, ctx.signals, ctx.ctx, *ctx.extras)]
                ptrs += [entry[0].data_ptr() for entry in ctx.orders.values()]
    ptrs += [h.data_ptr() for h in op._hidden.values()]
    return ptrs


class _Skipped:
    """An operator whose launches do nothing (its other attributes are the operator's)."""

    def __init__(self, op):
        self.op = op

    def __getattr__(self, name):
        return getattr(self.op, name)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def starved_reader(rank: int, world: int) -> dict:
    """A launch in which the up projection announces nothing: the down projection's tiles wait on the
    device for rows of H and give up at the timeout, and the pipeline names the chunk."""
    from syncopy import templates
    from syncopy.errors import SyncopyTimeout

    t = templates.get("tp_mlp")
    op = t.fused(chunks_per_rank=2, timeout_s=1.0)
    inp = t.module.inputs(rank, world, (20, 32, 48), torch.float32)
    t.module.launch(op, **inp)
    plan = next(iter(op.pipeline.plans.values()))
    (link,) = plan.links.values()
    after_one = {"flags": link.signals[4:4 + link.chunks].tolist(), "counters": link.signals[6 + link.chunks:6 + 2 * link.chunks].tolist(),
                 "targets": link.signals[6 + 2 * link.chunks:6 + 3 * link.chunks].tolist()}
    plan.variants[0] = _Skipped(plan.variants[0])
    try:
        t.module.launch(op, **inp)
        error = None
    except SyncopyTimeout as exc:
        error = str(exc)
    # The next launch starts from new links (the starved one left its counts behind) and is correct.
    inp = t.module.inputs(rank, world, (20, 32, 48), torch.float32, seed=1)
    y, ref = t.module.launch(op, **inp), t.module.reference(**inp)
    return {"after_one": after_one, "error": error, "chunks": link.chunks, "after_err": (y - ref).abs().max().item(),
            "new_link": next(iter(op.pipeline.plans.values())).links != plan.links}


def varying_tokens(rank: int, world: int, rows: list, max_rows: int) -> dict:
    """tp_mlp launched with a different token count each time under max_rows=: every result against
    torch, and the storage of the big buffers (gathered X, the partial of Y, H) across launches."""
    from syncopy import templates

    t = templates.get("tp_mlp")
    op = t.fused(chunks_per_rank=2, poison_receive=True, timeout_s=30.0, max_rows=max_rows)
    errs, storages = [], []
    for seed, m in enumerate(rows):
        inp = t.module.inputs(rank, world, (m, 16, 32), torch.float32, seed=seed)
        y, ref = t.module.launch(op, **inp), t.module.reference(**inp)
        errs.append((y - ref).abs().max().item())
        plan = op.pipeline.plans[next(reversed(op.pipeline.plans))]
        buffers = [ctx.buffer for v in plan.variants for ctx, _ in [next(reversed(v.contexts.table.values()))]]
        storages.append([b.untyped_storage().data_ptr() for b in buffers] + [op._hidden[next(reversed(op._hidden))].untyped_storage().data_ptr()])
    variants = next(iter(op.pipeline.plans.values())).variants
    grown = [a.grown for v in variants for a in v.contexts.arenas.values()] + [op.arena.grown]
    return {"errs": errs, "storages": storages, "grown": grown}


def changing_shapes(rank: int, world: int, rows: list, timeout_s: float = 5.0) -> dict:
    """tp_mlp launched with the token counts `rows` in turn (plans of earlier shapes come back): every
    launch's worst error against torch (inf for NaN or a launch that raised, with its message)."""
    from syncopy import templates
    from syncopy.errors import SyncopyError

    t = templates.get("tp_mlp")
    op = t.fused(chunks_per_rank=2, poison_receive=True, timeout_s=timeout_s)
    errs, errors = [], []
    for seed, m in enumerate(rows):
        inp = t.module.inputs(rank, world, (m, 16, 32), torch.float32, seed=seed)
        try:
            y = t.module.launch(op, **inp)
        except SyncopyError as exc:
            errs.append(float("inf"))
            errors.append(str(exc))
            break
        ref = t.module.reference(**inp)
        err = (y - ref).abs().max().item()
        errs.append(err if err == err else float("inf"))
    return {"errs": errs, "errors": errors, "plans": len(op.pipeline.plans)}


def starved_with_transfers(rank: int, world: int) -> dict:
    """A launch in which the up projection announces nothing on a world with transfers: the down
    projection's tiles give up on the link about when its own transfers give up on the chunks it
    never finished, and the error names the link (the cause), not the transfers."""
    from syncopy import templates
    from syncopy.errors import SyncopyTimeout

    t = templates.get("tp_mlp")
    op = t.fused(chunks_per_rank=2, timeout_s=1.0)
    inp = t.module.inputs(rank, world, (8, 16, 32), torch.float32)
    t.module.launch(op, **inp)
    plan = next(iter(op.pipeline.plans.values()))
    plan.variants[0] = _Skipped(plan.variants[0])
    try:
        t.module.launch(op, **inp)
        return {"error": None}
    except SyncopyTimeout as exc:
        return {"error": str(exc), "cause": str(exc.__cause__) if exc.__cause__ else None}


def warm_launches_read_no_link_word(rank: int, world: int, launches: int = 3) -> dict:
    """tp_mlp launched `launches` times; from the second on, every host read or torch write of a
    link's words (its context or signal pad) is counted: a warm launch enqueues them as stream
    operations and reads the error words from the pinned ring, never from the device."""
    from syncopy import templates

    t = templates.get("tp_mlp")
    op = t.fused(chunks_per_rank=2, poison_receive=True, timeout_s=30.0)
    touched: list[str] = []
    errs = []
    for seed in range(launches):
        inp = t.module.inputs(rank, world, (8, 16, 32), torch.float32, seed=seed)
        if seed == 0:
            y = t.module.launch(op, **inp)
        else:
            storages = {x.untyped_storage().data_ptr() for plan in op.pipeline.plans.values()
                        for link in plan.links.values() for x in (link.ctx, link.signals)}
            with CountingHostAccess(storages, touched):
                y = t.module.launch(op, **inp)
        errs.append((y - t.module.reference(**inp)).abs().max().item())
    return {"touched": touched, "errs": errs, "epochs": [link.epoch for plan in op.pipeline.plans.values()
                                                         for link in plan.links.values()]}




def compiled_mlp(rank: int, world: int, shape=(8, 16, 32), launches: int = 2) -> dict:
    """torch.ops.syncopy.tp_mlp inside a module compiled whole (fullgraph: a graph break fails), launched
    with fresh data each time, against the template's unfused reference; and its fake (meta) shape."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode

    import syncopy.templates.ops  # noqa: F401  (registers torch.ops.syncopy.*)
    from syncopy import templates

    module = templates.get("tp_mlp").module
    group_name = dist.group.WORLD.group_name

    class Block(torch.nn.Module):
        def forward(self, x, w1, w2):
            return x + torch.ops.syncopy.tp_mlp(x * 2.0, w1, w2, group_name)

    model = torch.compile(Block(), backend="aot_eager", fullgraph=True)
    errs = []
    for seed in range(launches):
        inp = module.inputs(rank, world, shape, torch.float32, seed=seed)
        y = model(inp["x"], inp["w1"], inp["w2"])
        want = inp["x"] + module.reference(inp["x"] * 2.0, inp["w1"], inp["w2"])
        errs.append((y - want).abs().max().item())
    with FakeTensorMode() as mode:
        fake = torch.ops.syncopy.tp_mlp(*(mode.from_tensor(inp[k]) for k in ("x", "w1", "w2")), group_name)
    return {"errs": errs, "fake_shape": tuple(fake.shape), "shape": tuple(y.shape)}


def differentiable_mlp(rank: int, world: int, shape=(8, 16, 24), steps: int = 2) -> dict:
    """syncopy.templates.ops.tp_mlp forward and backward with fresh data each step, against the same
    layer in plain torch autograd on the gathered pieces: the worst relative error of y and each gradient."""
    import torch.distributed as dist

    import syncopy.templates.ops as ops
    from syncopy import templates

    module = templates.get("tp_mlp").module
    worst: dict[str, float] = {}
    for step in range(steps):
        inp = module.inputs(rank, world, shape, torch.float32, seed=10 + step)
        dy = torch.randn(inp["x"].shape, generator=torch.Generator().manual_seed(50 * step + rank))
        x, w1, w2 = (inp[k].clone().requires_grad_() for k in ("x", "w1", "w2"))
        y = ops.tp_mlp(x, w1, w2)
        y.backward(dy)
        pieces = {}
        for name, t in (("x", inp["x"]), ("w1", inp["w1"]), ("w2", inp["w2"]), ("dy", dy)):
            parts = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(parts, t.contiguous())
            pieces[name] = parts
        X = torch.cat(pieces["x"]).requires_grad_()
        W1 = torch.cat(pieces["w1"], dim=1).requires_grad_()  # rank r holds columns r of W1, rows r of W2
        W2 = torch.cat(pieces["w2"], dim=0).requires_grad_()
        Y = torch.nn.functional.gelu(X @ W1, approximate="tanh") @ W2
        Y.backward(torch.cat(pieces["dy"]))
        m, f = shape[0], shape[2]
        rows, cols = slice(m * rank, m * (rank + 1)), slice(f * rank, f * (rank + 1))
        for name, got, want in (("y", y, Y[rows]), ("dx", x.grad, X.grad[rows]), ("dw1", w1.grad, W1.grad[:, cols]),
                                ("dw2", w2.grad, W2.grad[cols])):
            err = ((got - want).abs().max() / max(1.0, want.abs().max().item())).item()
            worst[name] = max(worst.get(name, 0.0), err if err == err else float("inf"))
    return worst


def linked_checks(rank: int, world: int) -> dict:
    """One world for five checks (each spawn costs seconds): shapes that come back, the pipeline as a
    compiled custom operator and differentiated, warm launches that touch no link word from the host,
    then (last: it leaves the group broken) a starved link's error."""
    return {"rank": rank, "changing": changing_shapes(rank, world, [16, 2, 16, 2]), "compiled": compiled_mlp(rank, world),
            "autograd": differentiable_mlp(rank, world), "warm": warm_launches_read_no_link_word(rank, world),
            "starved": starved_with_transfers(rank, world)}
