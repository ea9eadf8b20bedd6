"""Rank functions of tests/gpu/test_p2p_peers.py (module level, so that spawned ranks can import
them; imports inside the functions, as in tests/gpu/workers.py: the rank sets TRITON_INTERPRET=0).

What only GPUs show of p2p's peer handling (issue 28, items 1 and 2): that a job whose first p2p
launches write into a peer GPU without any torch copy across devices (reduce_scatter alone) runs,
that no process makes a context on a peer's GPU, and that a peer that stops launching is a
SyncopyTimeout naming it within a bound, with no stream of the survivor left to hang the process.
"""
from __future__ import annotations

import ctypes
import time

from tests.gpu.workers import _check, ag_gemm, reduce



def peer_contexts(rank: int, world: int) -> list[int]:
    """The GPUs other than this rank's on which this process holds an active primary context
    (cuDevicePrimaryCtxGetState): where CUDA IPC handles opened on the owner's device made one."""
    import torch

    lib = ctypes.CDLL("libcuda.so.1")
    found = []
    for i in range(torch.cuda.device_count()):
        if i == torch.cuda.current_device():
            continue
        device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        assert lib.cuDeviceGet(ctypes.byref(device), i) == 0
        assert lib.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) == 0
        if active.value:
            found.append(i)
    return found


def producer_first(rank: int, world: int) -> dict:
    """One rank per GPU; the process's first p2p launches are reduce_scatter and all_reduce (raw
    copies and write-values into the peers' memory, no torch copy that would have enabled peer
    access), then all_gather; after each, the contexts this process holds on other GPUs."""
    import torch

    torch.cuda.set_device(rank)
    out = {"rs": _check("gemm_rs p2p first", lambda: reduce(rank, world, "p2p", "gemm_rs"))}
    out["peer contexts after rs"] = peer_contexts(rank, world)
    out["ar"] = _check("gemm_ar p2p", lambda: reduce(rank, world, "p2p", "gemm_ar"))
    out["ag"] = _check("ag_gemm p2p", lambda: ag_gemm(rank, world, "p2p", launches=2))
    out["peer contexts"] = peer_contexts(rank, world)
    out["can access"] = [torch.cuda.can_device_access_peer(rank, p) for p in range(world) if p != rank]
    return out


def _told_apart() -> None:
    """Make this rank believe no other rank of the group shares its GPU: the asynchronous path
    (device-side handshake, bounded waits) even on one GPU."""
    from syncopy.runtime.transport.backends import p2p

    p2p.CudaMemory.shares_device = lambda self, group, device: False


def dead_peer(rank: int, world: int, one_gpu: bool = False) -> dict:
    """ag_gemm on p2p, timeout_s=1. Launch 1 on every rank; then rank 1 stays away past rank 0's
    bound (died, or skipped the launch) while rank 0 launches 2 and calls synchronize(): rank 0 must
    raise a SyncopyTimeout (or LaunchError) naming rank 1 within the bound (the kernel's timeout_s,
    then the bounded wait's wait_bound(timeout_s)), and take no more launches. Rank 1 then makes
    launch 2 late, so that rank 0's push stream, which waits on the device for rank 1's ready word
    with no deadline, drains before either process exits.

    one_gpu: both ranks on GPU 0, told they are apart (`_told_apart`). Safe only because rank 1
    runs no kernel while rank 0 waits: kernels of two processes on one GPU take turns, so every
    launch gets a timeout_s (10 s) that outlasts the turns of launch 1, where both run."""
    import torch

    import syncopy
    from syncopy import templates
    from syncopy.runtime.transport.backends.control import wait_bound

    torch.cuda.set_device(0 if one_gpu else rank)
    if one_gpu:
        _told_apart()
    t = templates.get("ag_gemm")
    dev = torch.device("cuda", torch.cuda.current_device())
    rows, n, k = 64, 64, 64
    meta = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)
    out: dict = {}

    def launch(fused, seed: int):
        from tests.gpu.workers import _gathered

        full, b = _gathered(world, rows, k, n, seed=seed)
        a = full[rank * rows:(rank + 1) * rows].contiguous().to(dev)
        return t.module.launch(fused, a, b.to(dev), **meta)

    timeout_s = 10.0 if one_gpu else 1.0
    out["bound"] = bound = timeout_s + wait_bound(timeout_s) + 3.0  # + 3 s: the launch itself, and reading the rings
    fused = t.fused(chunks_per_rank=2, backend="p2p", timeout_s=timeout_s)
    launch(fused, 1)
    fused.synchronize()
    out["asynchronous"] = all(be.asynchronous for _, be in fused.contexts.table.values())
    if rank == 1:
        time.sleep(bound + 5)
    t0 = time.perf_counter()
    try:
        launch(fused, 2)
        fused.synchronize()
        out["raised"] = None
    except (syncopy.SyncopyTimeout, syncopy.LaunchError) as exc:
        out["raised"], out["str"] = type(exc).__name__, str(exc)
    out["seconds"] = time.perf_counter() - t0
    if rank == 0:
        try:
            launch(fused, 3)
            out["after"] = None
        except syncopy.SyncopyError as exc:
            out["after"] = str(exc)
        time.sleep(max(0.0, bound + 10 - out["seconds"]))  # rank 1's late launch 2 lets our push stream go before we exit
    return out


def dead_peer_one_gpu(rank: int, world: int) -> dict:
    return dead_peer(rank, world, one_gpu=True)
