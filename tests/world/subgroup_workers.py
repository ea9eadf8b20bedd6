"""Rank functions for tests/world/test_subgroups.py: fused operators the way real jobs launch them.

World 4 (`run_subgroups`): two tensor-parallel groups launch one operator on their own data at
once, in both layouts ({0,1},{2,3} and {0,2},{1,3}), then the whole world, then a group again; a
group's first launch while the other ranks all-reduce among themselves; templates on sub-groups.
World 2 (`run_real_scripts`): two threads launching one operator at once, torch.inference_mode()
and torch.no_grad() with new shapes on every backend, inputs that require grad.

Every launch gets new data and NaN-poisoned receive buffers over a slow emulated link; every result
is compared with the torch reference on the same group. Shapes are tiny (the interpreter is slow).
The group launches of world 4 go over a holding link (HOLD) and report what it saw: that every chunk
of a peer in the group landed while a tile waited for it is asserted, not assumed (issue 26).
"""
from __future__ import annotations

from syncopy.runtime.transport.link import Link
from tests.oracles import worst

ROWS, COLS = 8, 16  # rows of A per rank; N = K of ag_gemm
META = dict(BLOCK_M=8, BLOCK_N=16, BLOCK_K=16, GROUP_M=1)
RS_META = dict(BLOCK_M=8, BLOCK_N=16, BLOCK_K=16)
LINK = Link(latency_s=0.01)  # a slow link: chunks take 10 ms each
# The group launches' link (runtime/transport/link.py, Hold): each remote chunk stays out of the buffer,
# its flag down, until a program of the kernel was seen polling that flag (or 3 s, far above a tile's
# time, with none polling): so it lands after the tiles that read it started, and the link says so.
HOLD = Link(latency_s=0.01, hold_until_waited=True, hold_s=3.0)
CONTIGUOUS, STRIDED = [[0, 1], [2, 3]], [[0, 2], [1, 3]]


def _outcome(fn) -> dict:
    try:
        return {"type": None, "err": fn()}
    except Exception as exc:  # the tests assert on the type and the one line
        return {"type": type(exc).__name__, "str": str(exc)}


def _ag(fused, group, seed: int, rows: int = ROWS, meta=META) -> float:
    """One ag_gemm launch on `group` with fresh data: max |fused - reference|."""
    import torch
    import torch.distributed as dist

    from syncopy import templates

    mod = templates.get("ag_gemm").module
    a = torch.randn(rows, COLS, generator=torch.Generator().manual_seed(seed * 100 + dist.get_rank()))
    b = torch.randn(COLS, COLS, generator=torch.Generator().manual_seed(seed * 100 + 99 + _first(group)))
    c = mod.launch(fused, a, b, group=group, **meta)
    return float((c - mod.reference(a, b, group=group)).abs().max())


def _held(fn, group) -> dict:
    """`_outcome(fn)` for a launch over HOLD on `group`, with what the link saw: "remote" (the group's
    chunks of the other ranks: every one is read, ag_gemm's tiles cover every row), "waited" (landed
    once a program polled its flag) and "unwaited" (released at the bound, no program polling)."""
    import torch.distributed as dist

    from syncopy.runtime.transport.link import Hold

    before = len(Hold.records)
    out = _outcome(fn)
    held = Hold.records[before:]
    me, size = dist.get_rank(group), dist.get_world_size(group)
    out.update(remote=[g for g in range(2 * size) if g // 2 != me], waited=sorted(g for r in held for g in r["waited"]),
               unwaited=sorted(g for r in held for g in r["unwaited"]))
    return out


def _rs(fused, group, seed: int, rows: int = 2 * ROWS) -> float:
    """One gemm_rs launch on `group` (`rows` output rows in all) with fresh data."""
    import torch
    import torch.distributed as dist

    from syncopy import templates

    mod = templates.get("gemm_rs").module
    g = torch.Generator().manual_seed(seed * 100 + dist.get_rank())
    a, b = torch.randn(rows, COLS, generator=g), torch.randn(COLS, COLS, generator=g)
    c = mod.launch(fused, a, b, group=group, **RS_META)
    return float((c - mod.reference(a, b, group=group)).abs().max())


def _first(group) -> int:
    import torch.distributed as dist

    return dist.get_process_group_ranks(group)[0] if group is not None else 0


def _groups(layout: list[list[int]]):
    """Every rank creates every group of `layout` (torch's rule for new_group); returns this rank's."""
    import torch.distributed as dist

    made = [dist.new_group(ranks) for ranks in layout]
    return next(g for ranks, g in zip(layout, made) if dist.get_rank() in ranks)


def run_subgroups(rank: int, world: int) -> dict:
    import torch.distributed as dist

    from syncopy import templates

    out: dict = {}
    ag = templates.get("ag_gemm").fused(chunks_per_rank=2, poison_receive=True, link=HOLD, timeout_s=20)
    # A group's first launch (its internal groups are made here) while the other ranks all-reduce.
    busy = _groups(CONTIGUOUS)
    if rank in (0, 1):
        out["while_others_reduce"] = [_held(lambda s=s: _ag(ag, busy, seed=s), busy) for s in (1, 2)]
    else:
        import torch

        x = torch.ones(4)
        for _ in range(20):
            dist.all_reduce(x, group=busy)
        out["their_all_reduce"] = float(x[0])
    contiguous, strided = _groups(CONTIGUOUS), _groups(STRIDED)
    # Both groups of a layout at once, on the same operator, the same shapes: only their own data meets.
    out["contiguous"] = [_held(lambda s=s: _ag(ag, contiguous, seed=s), contiguous) for s in (3, 4)]
    out["strided"] = [_held(lambda s=s: _ag(ag, strided, seed=s), strided) for s in (5, 6)]
    out["world"] = [_held(lambda s=s: _ag(ag, None, seed=s), None) for s in (7, 8)]
    out["strided_again"] = [_held(lambda s=s: _ag(ag, strided, seed=s), strided) for s in (9, 10)]
    # The template ops (one operator per process) and a producer template, on sub-groups.
    out["template_op"] = _outcome(lambda: _template_op(contiguous))
    rs = templates.get("gemm_rs").fused(chunks_per_rank=2, poison_receive=True, link=LINK, timeout_s=20)
    out["gemm_rs"] = [_outcome(lambda s=s: _rs(rs, strided, seed=s)) for s in (11, 12)]
    # Every other template, once each on the strided groups (the shapes of test_host_backends.py).
    out["every_template"] = {name: _outcome(lambda name=name, shape=shape: _template(name, strided, shape))
                             for name, shape in OTHER_TEMPLATES.items()}
    # The GPU backends' protocols (their CPU variants) on sub-groups: handshakes and rounds per group.
    from tests.world.host_backend_workers import _use_host_backends

    _use_host_backends()
    for backend in ("p2p", "nccl"):
        op = templates.get("ag_gemm").fused(chunks_per_rank=2, poison_receive=True, timeout_s=20, backend=backend)
        out[backend] = [_outcome(lambda s=s: _ag(op, group, seed=s)) for s, group in ((13, strided), (14, contiguous))]
    return out


OTHER_TEMPLATES = {"ag_gemm_persistent": (9, 32, 32), "ag_rmsnorm": (6, 32, 0), "a2a_gemm": (96, 32, 32), "gemm_ar": (10, 16, 16)}


def _template(name: str, group, shape: tuple[int, int, int]) -> float:
    """One launch of template `name` on `group` against its reference, as an error relative to the
    template's own tolerance (<= 1e-4 passes, as _right asks)."""
    import torch
    import torch.distributed as dist

    from syncopy import templates

    t = templates.get(name)
    mod = t.module
    fused = t.fused(poison_receive=True, link=LINK, timeout_s=20)
    inp = mod.inputs(dist.get_rank(group), dist.get_world_size(group), shape, torch.float32, seed=15)
    got, ref = mod.launch(fused, **inp, group=group), mod.reference(**inp, group=group)
    err = float(torch.nan_to_num((got.float() - ref.float()).abs(), nan=float("inf")).max()) / max(1.0, float(ref.abs().max()))
    return err * 1e-4 / mod.TOLERANCE[torch.float32]


def _template_op(group) -> float:
    import torch

    from syncopy import templates

    a, b = torch.randn(ROWS, COLS), torch.randn(COLS, COLS)
    c = templates.ag_gemm(a, b, group=group, **META)
    return float((c - templates.get("ag_gemm").module.reference(a, b, group=group)).abs().max())


# --------------------------------------------------------------------------------------------------
# World 2: threads, modes, gradients
# --------------------------------------------------------------------------------------------------
def run_real_scripts(rank: int, world: int) -> dict:
    from syncopy import templates

    out: dict = {}
    ag = templates.get("ag_gemm").fused(chunks_per_rank=2, poison_receive=True, link=LINK, timeout_s=20)
    out["threads"] = _two_threads(ag, rank, world)
    out["after_threads"] = _outcome(lambda: _ag(ag, None, seed=30))
    out["modes"] = _modes(rank)
    out["grad"] = _grad(ag)
    out["no_grad_requires_grad"] = _outcome(lambda: _no_grad_requires_grad(ag))
    out["token_differs"] = _token_after_destroy()
    return out


def _two_threads(fused, rank: int, world: int) -> list:
    """Two threads launch `fused` 3 times each at once. Which launch of a rank meets which of its peer
    is up to the threads' order, so A (communicated) is the same in every launch and B (local) is each
    thread's own: every result is still checkable."""
    import threading

    import torch

    shards = [torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(40 + r)) for r in range(world)]
    gathered = torch.cat(shards)
    from syncopy import templates

    mod = templates.get("ag_gemm").module
    results: list = [None, None]

    def thread(t: int) -> None:
        errs = []
        try:
            for k in range(3):
                b = torch.randn(COLS, COLS, generator=torch.Generator().manual_seed(50 + 10 * t + k))
                c = mod.launch(fused, shards[rank].clone(), b, **META)
                errs.append(float((c - gathered @ b).abs().max()))
            results[t] = {"type": None, "err": worst(errs)}
        except Exception as exc:
            results[t] = {"type": type(exc).__name__, "str": str(exc)}

    threads = [threading.Thread(target=thread, args=(t,)) for t in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    return results


def _modes(rank: int) -> dict:
    """Under torch.inference_mode() and torch.no_grad(), each launch a new shape, on every backend
    (p2p and nccl in their CPU variants), for a consumer and a producer template; then outside."""
    import torch

    from syncopy import templates
    from tests.world.host_backend_workers import _use_host_backends

    _use_host_backends()
    out = {}
    for backend in ("gloo", "p2p", "nccl"):
        link = LINK if backend == "gloo" else None
        ag = templates.get("ag_gemm").fused(chunks_per_rank=2, poison_receive=True, link=link, timeout_s=20, backend=backend)
        rs = templates.get("gemm_rs").fused(chunks_per_rank=2, poison_receive=True, link=link, timeout_s=20, backend=backend)
        runs = []
        with torch.inference_mode():
            runs.append(_outcome(lambda: _ag(ag, None, seed=60, rows=ROWS)))
            runs.append(_outcome(lambda: _ag(ag, None, seed=61, rows=ROWS)))
            runs.append(_outcome(lambda: _rs(rs, None, seed=62, rows=2 * ROWS)))
        with torch.no_grad():
            runs.append(_outcome(lambda: _ag(ag, None, seed=63, rows=2 * ROWS)))
            runs.append(_outcome(lambda: _rs(rs, None, seed=64, rows=4 * ROWS)))
        # The shapes first seen under inference_mode, now outside it: the operator is not broken.
        runs.append(_outcome(lambda: _ag(ag, None, seed=65, rows=ROWS)))
        runs.append(_outcome(lambda: _rs(rs, None, seed=66, rows=2 * ROWS)))
        with torch.inference_mode():
            runs.append(_outcome(lambda: _ag(ag, None, seed=67, rows=2 * ROWS)))  # a shape first seen under no_grad
        out[backend] = runs
    return out


def _grad(fused) -> dict:
    """Inputs that require grad (grad enabled) are refused at once, on every rank alike; the operator
    and its reference work right afterwards with detached inputs."""
    import torch

    from syncopy import templates

    mod = templates.get("ag_gemm").module
    a, b = torch.randn(ROWS, COLS), torch.randn(COLS, COLS)
    out = {}
    out["a"] = _outcome(lambda: _done(mod.launch(fused, a.clone().requires_grad_(), b, **META)))
    out["b"] = _outcome(lambda: _done(mod.launch(fused, a, b.clone().requires_grad_(), **META)))
    out["reference"] = _outcome(lambda: _done(mod.launch(fused.reference, a.clone().requires_grad_(), b, **META)))
    out["template_op"] = _outcome(lambda: _done(templates.ag_gemm(a.clone().requires_grad_(), b, **META)))
    out["detached"] = _outcome(lambda: _ag(fused, None, seed=70))
    return out


def _done(result) -> float:
    return 0.0


def _no_grad_requires_grad(fused) -> float:
    """Under no_grad, inputs that require grad are fine (no graph would be recorded anyway)."""
    import torch

    from syncopy import templates

    mod = templates.get("ag_gemm").module
    a = torch.randn(ROWS, COLS, requires_grad=True)
    b = torch.randn(COLS, COLS, requires_grad=True)
    with torch.no_grad():
        c = mod.launch(fused, a, b, **META)
        return float((c - mod.reference(a, b)).abs().max())


def _token_after_destroy() -> bool:
    """A group made after another was destroyed never shares its cache key, even at the same id()."""
    import gc

    import torch.distributed as dist

    from syncopy.runtime.transport.backends import control

    old = dist.new_group([0, 1])
    token = control.group_token(old)
    dist.destroy_process_group(old)
    del old
    gc.collect()
    return control.group_token(dist.new_group([0, 1])) != token
