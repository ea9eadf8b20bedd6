"""Rank bodies of test_reinit: ranks started as plain processes (multiprocessing spawn, no harness,
no forkserver), each joining the job as srun or mpirun would start it (env:// with rank 0 hosting
the TCPStore at MASTER_ADDR:MASTER_PORT, or a shared file://), and then, `cycles` times: init the
default process group, launch a fused kernel (the same operator every cycle, as a module-level
decorated kernel is), check it against torch, destroy the group."""
from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path

INIT_TIMEOUT_S = 60.0  # bounds every wait of a cycle: a rank that hangs is killed by the test, and its file says how far it got


def _kernel():
    import triton
    import triton.language as tl

    import syncopy

    @syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 2, "order": "ring"}, timeout_s=20.0)
    @triton.jit
    def mm(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            rk = k + tl.arange(0, BK)
            a = tl.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    return mm


def _launch_and_check(mm, rank: int, world: int, cycle: int) -> float:
    """One launch of `mm` on the default group; its error against all_gather + matmul (NaN stays NaN)."""
    import torch
    import torch.distributed as dist
    import triton

    g = torch.Generator().manual_seed(1000 * cycle + rank)
    rows, n, k = 16, 16, 16
    a_shard = torch.randn(rows, k, generator=g)
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(cycle))
    m = rows * world
    c = torch.full((m, n), float("nan"))
    mm[(triton.cdiv(m, 16), triton.cdiv(n, 16))](a_shard, b, c, m, n, k, BM=16, BN=16, BK=16, group=dist.group.WORLD)
    shards = [torch.empty_like(a_shard) for _ in range(world)]
    dist.all_gather(shards, a_shard)
    want = torch.cat(shards) @ b
    return ((c - want).abs().max() / want.abs().max().clamp(min=1.0)).item()


STORE_GONE_S = 30.0


def _await_removed(where: str) -> None:
    """A file:// store's file is removed by torch when the last process holding the store lets it go:
    once every rank has destroyed its group, unless something still holds the old store (syncopy's
    internal groups did: the old store's file then stayed, and reusing it met the old keys)."""
    import time

    deadline = time.monotonic() + STORE_GONE_S
    while os.path.exists(where):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the file:// store {where} was still there {STORE_GONE_S:g}s after destroy_process_group: "
                               "something in this job still holds the old store")
        time.sleep(0.05)


def _await_port_free(port: int) -> None:
    """env://: the TCPStore server rank 0 hosted on MASTER_PORT stops listening when the last holder
    of the store lets it go. While it listened, the next init's server shared the port with it
    (connections went to either), and the other ranks met the old job's keys: "Connection refused"
    to its stale addresses, or rank 0 never returned. A plain bind (allowed past connections in
    TIME_WAIT, not past a listening socket) says whether it is gone."""
    import socket
    import time

    deadline = time.monotonic() + STORE_GONE_S
    while True:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("", port))
                return
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the env:// store's server was still listening on port {port} {STORE_GONE_S:g}s after "
                               "destroy_process_group: something in this job still holds the old store")
        time.sleep(0.05)


def cycles(rank: int, world: int, method: str, where: str, cycles: int, out_dir: str, fused: bool = True) -> None:
    """The rank's body (multiprocessing's target). method: "env" (MASTER_ADDR/MASTER_PORT, set by the
    test: one port per cycle, comma-separated; rank 0 hosting the store) or "file" (`where`-<cycle> is the shared file of each cycle). Writes, after every step,
    `out_dir/<rank>.json`: the steps done and each launch's error, or the error that stopped it. After
    each destroy the old store must be gone before the next init: with file:// every rank waits for
    the cycle's file to go (`_await_removed`), with env:// rank 0 for its port (`_await_port_free`).
    fused=False: the same cycles with torch alone (an all_reduce for the launch), the control that
    the machine re-initialises at all."""
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    report = {"inits": 0, "launches": 0, "destroys": 0, "stores_removed": 0, "errors": [], "failure": None}
    path = Path(out_dir, f"{rank}.json")

    def save() -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(report))
        tmp.replace(path)

    ports = os.environ.get("MASTER_PORT", "").split(",")  # env://: one port per cycle (tests/world/test_reinit.py)
    try:
        mm = _kernel() if fused else None
        for cycle in range(cycles):
            if method == "env":
                os.environ["MASTER_PORT"] = ports[cycle]
            store = f"{where}-{cycle}"  # a file per cycle: torch's documentation forbids reusing one that may not be gone yet
            init = "env://" if method == "env" else f"file://{store}"
            dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=INIT_TIMEOUT_S))
            report["inits"] += 1
            save()
            if fused:
                report["errors"].append(_launch_and_check(mm, rank, world, cycle))
            else:
                t = torch.ones(4)
                dist.all_reduce(t)
                report["errors"].append((t - world).abs().max().item())
            report["launches"] += 1
            save()
            dist.barrier()  # every rank has checked before the store's host (rank 0) destroys it
            dist.destroy_process_group()
            report["destroys"] += 1
            save()
            if method == "file" or rank == 0:  # env://: rank 0 hosted the store
                _await_removed(store) if method == "file" else _await_port_free(int(os.environ["MASTER_PORT"]))
                report["stores_removed"] += 1
                save()
    except BaseException as exc:
        report["failure"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
        save()
        sys.exit(1)
    save()
