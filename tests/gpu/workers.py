"""Rank functions of the GPU world tests (module level, so that spawned ranks can import them).

Every rank runs the same checks in the same order (their launches are collective) and returns one
record per check; a check that raises is recorded, not propagated, so the others still run. The
tests assert on the records in the parent. Imports happen inside the functions: the spawned rank
sets TRITON_INTERPRET=0 first.
"""
from __future__ import annotations

import time
import traceback
from tests import oracles

META = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)


def _check(name: str, fn) -> dict:
    try:
        record = {"ok": True, **fn()}
    except Exception as exc:
        record = {"ok": False, "type": type(exc).__name__, "str": str(exc), "trace": traceback.format_exc()[-4000:]}
    print(f"[gpu world] {name}: {record}", flush=True)  # shown by pytest if the test fails or the world hangs
    return record


def _rel_err(out, ref) -> float:
    """max |out - ref| / max(1, max |ref|); a NaN (a poisoned row never written) counts as inf."""
    import torch

    diff = torch.nan_to_num((out.float() - ref.float()).abs(), nan=float("inf"))
    return float(diff.max().item()) / max(1.0, float(ref.abs().max().item()))


def _gathered(world: int, rows: int, k: int, n: int, seed: int):
    """The full A (every rank's shard) and B, made identically on every rank, on the CPU."""
    import torch

    g = torch.Generator().manual_seed(seed)
    full = torch.randn(world * rows, k, generator=g).half()
    b = torch.randn(k, n, generator=g).half()
    return full, b


class _Watch:
    """If a launch has not returned after `seconds`, print what every context of `fused` holds on the
    device (epoch, error slot, flags), read on a side stream while the kernel still runs: a hung
    world then says whether the chunks' flags never rose or the kernel never saw them."""

    def __init__(self, fused, seconds: float, label: str):
        import threading

        self.fused, self.seconds, self.label = fused, seconds, label
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import torch

        if self.done.wait(self.seconds):
            return
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            for ctx, _ in list(self.fused.contexts.table.values()):
                snap = ctx.signals.to("cpu", non_blocking=False).tolist()
                print(f"[gpu world] {self.label}: still in the launch after {self.seconds:g}s; epoch {ctx.epoch}, "
                      f"signals {snap[:64]}", flush=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()


def _snapshot(fused) -> str:
    """Every context's signal pad as this rank sees it, and each peer's as seen through our mapping of
    it (p2p): a flag a peer raised that its owner does not see means a mapping to the wrong memory."""
    import torch

    torch.cuda.synchronize()
    out = []
    for ctx, backend in fused.contexts.table.values():
        n = ctx.n_flags + 6
        mine = ctx.signals[:n].tolist()
        peers = {r: s[:n].tolist() for r, (_, s) in (getattr(backend, "peers", None) or {}).items()}
        out.append(f"epoch {ctx.epoch} mine {mine} peers' via IPC {peers} ptr {ctx.signals.data_ptr():#x}")
    return "; ".join(out)


def _backend_of(fused) -> str:
    return next(type(backend).__name__ for _, backend in fused.contexts.table.values())


def ag_gemm(rank: int, world: int, backend: str, template: str = "ag_gemm", launches: int = 4,
            shapes=((100, 128, 96), (64, 64, 64)), timeout_s: float = 30.0) -> dict:
    """C = all_gather(A) @ B through `backend`, fp16, receive buffers NaN-poisoned before every
    launch, shapes alternating (one context each); against torch on the full A."""
    import torch

    from syncopy import templates

    t = templates.get(template)
    fused = t.fused(chunks_per_rank=3 if template == "ag_gemm" else 2, order="ring", backend=backend, poison_receive=True,
                    timeout_s=timeout_s)
    dev = torch.device("cuda", torch.cuda.current_device())
    worst = 0.0
    for it in range(launches):
        rows, n, k = shapes[it % len(shapes)]
        full, b = _gathered(world, rows, k, n, seed=it)
        a = full[rank * rows:(rank + 1) * rows].contiguous().to(dev)
        try:
            with _Watch(fused, 2 * timeout_s + 20, f"{template} {backend} launch {it}"):
                c = t.module.launch(fused, a, b.to(dev), **META, GROUP_M=4)
        except Exception as exc:
            raise RuntimeError(f"launch {it}: {type(exc).__name__}: {exc} | {_snapshot(fused)}") from exc
        worst = oracles.worst([worst, _rel_err(c, full.to(dev).float() @ b.to(dev).float())])
    return {"worst": worst, "backend": _backend_of(fused), "epochs": sorted(ctx.epoch for ctx, _ in fused.contexts.table.values()),
            "shared_device": any(getattr(be, "shared_device", False) for _, be in fused.contexts.table.values())}


def late_pushes(rank: int, world: int, delay_s: float = 0.5) -> dict:
    """ag_gemm on p2p with rank 1's pushes held back `delay_s` after the launch handshake. Two ranks on
    one GPU deliver every chunk before either kernel starts (processes on one GPU take turns; see
    backends/p2p.py), so rank 0 must wait for the late pushes, not launch and time out."""
    from syncopy.runtime.transport.backends import p2p

    start = p2p.Push.start

    def late_start(self):
        if rank == 1:
            time.sleep(delay_s)
        return start(self)

    p2p.Push.start = late_start
    try:
        t0 = time.perf_counter()
        out = ag_gemm(rank, world, "p2p", launches=2, timeout_s=10.0)
        out["seconds"] = time.perf_counter() - t0
        return out
    finally:
        p2p.Push.start = start


def reduce(rank: int, world: int, backend: str, template: str, launches: int = 3) -> dict:
    """gemm_rs (this rank's rows of sum_r A_r @ B_r) or gemm_ar (all of it) through `backend`."""
    import torch

    from syncopy import templates

    t = templates.get(template)
    fused = t.fused(chunks_per_rank=2, backend=backend, poison_receive=True, timeout_s=30.0)
    dev = torch.device("cuda", torch.cuda.current_device())
    m, n, k = 128, 64, 96
    worst = 0.0
    for it in range(launches):
        g = torch.Generator().manual_seed(100 + it)
        a_all = [torch.randn(m, k, generator=g).half() for _ in range(world)]
        b_all = [torch.randn(k, n, generator=g).half() for _ in range(world)]
        c = t.module.launch(fused, a_all[rank].to(dev), b_all[rank].to(dev), **META)
        full = sum(a.float() @ b.float() for a, b in zip(a_all, b_all))
        rows = m // world
        ref = full[rank * rows:(rank + 1) * rows] if template == "gemm_rs" else full
        worst = oracles.worst([worst, _rel_err(c, ref.to(dev))])
    reducers = [type(getattr(b, "reducer", None)).__name__ for _, b in fused.contexts.table.values()]
    return {"worst": worst, "backend": _backend_of(fused), "reducers": reducers}


def withheld(rank: int, world: int, backend: str) -> dict:
    """Rank 1 never sends its chunk 0: rank 0 must raise SyncopyTimeout naming it, within the bound."""
    import torch

    import syncopy
    from syncopy import templates
    from syncopy.runtime.transport.link import Faults

    t = templates.get("ag_gemm")
    fused = t.fused(chunks_per_rank=2, backend=backend, timeout_s=1.0, faults=Faults.of(drop=[(1, 0)]))
    dev = torch.device("cuda", torch.cuda.current_device())
    rows, n, k = 64, 64, 64
    full, b = _gathered(world, rows, k, n, seed=7)
    a = full[rank * rows:(rank + 1) * rows].contiguous().to(dev)
    start = time.perf_counter()
    try:
        t.module.launch(fused, a, b.to(dev), **META, GROUP_M=4)
        out = {"raised": None}
    except syncopy.SyncopyTimeout as exc:
        out = {"raised": "SyncopyTimeout", "rank": exc.rank, "chunk": list(exc.chunk), "epoch": exc.epoch, "str": str(exc)}
    out["seconds"] = time.perf_counter() - start
    return out


def nccl_async(rank: int, world: int) -> dict:
    """ag_gemm on nccl: after a first launch, warm launches of new data under
    torch.cuda.set_sync_debug_mode("error") (no host sync on the launch path), checked after
    synchronize(); then a late peer: rank 1 starts launch 2 of a 1 s operator 3 s late, and rank 0's
    timeout surfaces at synchronize() naming epoch 2, with no rank left hanging."""
    import torch

    import syncopy
    from syncopy import templates

    t = templates.get("ag_gemm")
    dev = torch.device("cuda", torch.cuda.current_device())
    fused = t.fused(chunks_per_rank=2, order="ring", backend="nccl", poison_receive=True, timeout_s=30.0)
    rows, n, k = 256, 128, 64
    data = [_gathered(world, rows, k, n, seed=20 + it) for it in range(4)]
    inputs = [(full[rank * rows:(rank + 1) * rows].contiguous().to(dev), b.to(dev)) for full, b in data]
    outs = [t.module.launch(fused, *inputs[0], **META, GROUP_M=4)]
    fused.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs += [t.module.launch(fused, *inputs[it], **META, GROUP_M=4) for it in range(1, 4)]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    fused.synchronize()
    worst = oracles.worst(_rel_err(c, full.to(dev).float() @ b.to(dev).float()) for c, (full, b) in zip(outs, data))
    late = t.fused(chunks_per_rank=1, order="ring", backend="nccl", timeout_s=1.0)
    said = []
    for it in range(2):
        full, b = data[it]
        a = full[rank * rows:(rank + 1) * rows].contiguous().to(dev)
        if it == 1 and rank == 1:
            time.sleep(3)
        t0 = time.perf_counter()
        try:
            t.module.launch(late, a, b.to(dev), **META, GROUP_M=4)
            late.synchronize()
            said.append({"raised": None})
        except syncopy.SyncopyError as exc:
            said.append({"raised": type(exc).__name__, "epoch": getattr(exc, "epoch", None), "str": str(exc)})
        said[-1]["seconds"] = time.perf_counter() - t0
    return {"worst": worst, "late": said}


def nccl_refuses_big_grid(rank: int, world: int) -> dict:
    """A non-persistent grid larger than the SMs nccl leaves to the kernel is refused before anything moves."""
    import torch

    import syncopy
    from syncopy import templates

    t = templates.get("ag_gemm")
    fused = t.fused(chunks_per_rank=1, backend="nccl", timeout_s=30.0)
    dev = torch.device("cuda", torch.cuda.current_device())
    rows, n, k = 2048, 4096, 64  # 64 x 64 tiles of a 4096 x 4096 C: 4096 programs
    full, b = _gathered(world, rows, k, n, seed=3)
    a = full[rank * rows:(rank + 1) * rows].contiguous().to(dev)
    try:
        t.module.launch(fused, a, b.to(dev), **META, GROUP_M=4)
        return {"raised": None}
    except syncopy.LaunchError as exc:
        return {"raised": "LaunchError", "str": str(exc)}


def one_gpu(rank: int, world: int) -> dict:
    """Two ranks on GPU 0 (CUDA IPC between two processes on one device works): the p2p backend."""
    import torch

    torch.cuda.set_device(0)
    return {
        "ag_gemm p2p": _check("ag_gemm p2p", lambda: ag_gemm(rank, world, "p2p")),
        "late p2p": _check("late p2p", lambda: late_pushes(rank, world)),
        "ag_gemm_persistent auto": _check("ag_gemm_persistent auto", lambda: ag_gemm(
            rank, world, "auto", template="ag_gemm_persistent", launches=2, shapes=((200, 128, 96),), timeout_s=10.0)),
        "gemm_rs p2p": _check("gemm_rs p2p", lambda: reduce(rank, world, "p2p", "gemm_rs")),
        "gemm_ar p2p": _check("gemm_ar p2p", lambda: reduce(rank, world, "p2p", "gemm_ar")),
        "withheld p2p": _check("withheld p2p", lambda: withheld(rank, world, "p2p")),
        # A world that saw a timeout goes on working: a fresh operator after it.
        "after timeout p2p": _check("after timeout p2p", lambda: ag_gemm(rank, world, "p2p", launches=2, timeout_s=10.0)),
    }


def one_gpu_sends(rank: int, world: int) -> dict:
    """Two ranks on GPU 0 told they are alone on their GPUs: p2p's reduce_scatter and all_reduce then
    take the device-side path (SendReduce: send streams behind the kernel's flags, the owner's
    reduction behind delivered words; all_reduce's reduced rows pushed to every peer behind it),
    which one-rank-per-GPU deployments run."""
    import torch

    from syncopy.runtime.transport.backends.p2p import CudaMemory

    torch.cuda.set_device(0)
    CudaMemory.shares_device = lambda self, group, device: False

    return {"gemm_rs p2p sends": _check("gemm_rs p2p sends", lambda: reduce(rank, world, "p2p", "gemm_rs", launches=4)),
            "gemm_ar p2p sends": _check("gemm_ar p2p sends", lambda: reduce(rank, world, "p2p", "gemm_ar", launches=4))}


def two_gpus(rank: int, world: int) -> dict:
    """One rank per GPU: p2p across devices, and nccl (which refuses two ranks on one GPU)."""
    import torch

    torch.cuda.set_device(rank)
    return {
        "ag_gemm p2p": _check("ag_gemm p2p", lambda: ag_gemm(rank, world, "p2p")),
        "ag_gemm nccl": _check("ag_gemm nccl", lambda: ag_gemm(rank, world, "nccl")),
        "ag_gemm_persistent nccl": _check("ag_gemm_persistent nccl", lambda: ag_gemm(
            rank, world, "nccl", template="ag_gemm_persistent", launches=2, shapes=((200, 128, 96),))),
        "big grid nccl": _check("big grid nccl", lambda: nccl_refuses_big_grid(rank, world)),
        "async nccl": _check("async nccl", lambda: nccl_async(rank, world)),
        "gemm_rs nccl": _check("gemm_rs nccl", lambda: reduce(rank, world, "nccl", "gemm_rs")),
        "gemm_ar nccl": _check("gemm_ar nccl", lambda: reduce(rank, world, "nccl", "gemm_ar")),
        "gemm_rs p2p": _check("gemm_rs p2p", lambda: reduce(rank, world, "p2p", "gemm_rs")),
    }
