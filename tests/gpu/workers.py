"""Rank functions of the GPU world tests (module level, so that spawned ranks can import them).

Every rank runs the same checks in the same order (their launches are collective) and returns one
record per check; a check that raises is recorded, not propagated, so the others still run. The
tests assert on the records in the parent. Imports happen inside the functions: the spawned rank
sets TRITON_INTERPRET=0 first.
"""
from __future__ import annotations

import time
import traceback

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


def _backend_of(fused) -> str:
    return next(type(backend).__name__ for _, backend in fused._contexts.values())


def ag_gemm(rank: int, world: int, backend: str, template: str = "ag_gemm", launches: int = 4,
            shapes=((100, 128, 96), (64, 64, 64))) -> dict:
    """C = all_gather(A) @ B through `backend`, fp16, receive buffers NaN-poisoned before every
    launch, shapes alternating (one context each); against torch on the full A."""
    import torch

    from syncopy import templates

    t = templates.get(template)
    fused = t.fused(chunks_per_rank=3 if template == "ag_gemm" else 2, order="ring", backend=backend, poison_receive=True,
                    timeout_s=30.0)
    dev = torch.device("cuda", torch.cuda.current_device())
    worst = 0.0
    for it in range(launches):
        rows, n, k = shapes[it % len(shapes)]
        full, b = _gathered(world, rows, k, n, seed=it)
        a = full[rank * rows:(rank + 1) * rows].contiguous().to(dev)
        c = t.module.launch(fused, a, b.to(dev), **META, GROUP_M=4)
        worst = max(worst, _rel_err(c, full.to(dev).float() @ b.to(dev).float()))
    return {"worst": worst, "backend": _backend_of(fused), "epochs": sorted(ctx.epoch for ctx, _ in fused._contexts.values())}


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
        worst = max(worst, _rel_err(c, ref.to(dev)))
    return {"worst": worst, "backend": _backend_of(fused)}


def withheld(rank: int, world: int, backend: str) -> dict:
    """Rank 1 never sends its chunk 0: rank 0 must raise SyncopyTimeout naming it, within the bound."""
    import torch

    import syncopy
    from syncopy import templates
    from syncopy.runtime.link import Faults

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
        "ag_gemm_persistent auto": _check("ag_gemm_persistent auto", lambda: ag_gemm(
            rank, world, "auto", template="ag_gemm_persistent", launches=2, shapes=((200, 128, 96),))),
        "gemm_rs p2p": _check("gemm_rs p2p", lambda: reduce(rank, world, "p2p", "gemm_rs")),
        "gemm_ar p2p": _check("gemm_ar p2p", lambda: reduce(rank, world, "p2p", "gemm_ar")),
        "withheld p2p": _check("withheld p2p", lambda: withheld(rank, world, "p2p")),
    }


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
        "gemm_rs nccl": _check("gemm_rs nccl", lambda: reduce(rank, world, "nccl", "gemm_rs")),
        "gemm_ar nccl": _check("gemm_ar nccl", lambda: reduce(rank, world, "nccl", "gemm_ar")),
        "gemm_rs p2p": _check("gemm_rs p2p", lambda: reduce(rank, world, "p2p", "gemm_rs")),
    }
