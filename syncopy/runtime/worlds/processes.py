"""Local worlds: N processes and a gloo group. CPU worlds run kernels under the Triton interpreter
(tests, the demo, `syncopy run`); GPU worlds (`interpret=False`) compile them, e.g. two ranks on one
GPU for the p2p backend's tests."""
from __future__ import annotations

import os
import pickle
import socket
import tempfile
import traceback
from datetime import timedelta
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn, world: int, port: int, out_dir: str, args: tuple, interpret: bool = True):
    # Before torch, triton and syncopy are imported: Triton reads it when a kernel is decorated.
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if os.environ.get("SYNCOPY_HANG_DUMP_S"):
        # Diagnosing a hung world: every rank prints its threads' stacks (stderr) after that long.
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["SYNCOPY_HANG_DUMP_S"]), exit=False)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    try:
        result = ("ok", fn(rank, world, *args))
    except BaseException as exc:  # reported by the parent with the rank
        result = ("error", f"{type(exc).__name__}: {exc}", traceback.format_exc())
    Path(out_dir, f"{rank}.pkl").write_bytes(pickle.dumps(result))
    # Rank 0 hosts the group's store: a rank that left as soon as it had reported would take it away
    # from peers still waiting on it (their error would then be the store's, not their own). Every
    # rank stays until the parent has seen each rank report or exit (bounded).
    import time

    deadline = time.monotonic() + 60.0
    while not Path(out_dir, "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def spawn(fn, world: int, *args, timeout_s: float = 600.0, interpret: bool = True, may_die: frozenset = frozenset(),
          start_method: str = "spawn") -> list:
    """Run `fn(rank, world, *args)` on `world` ranks joined by a gloo group; returns each rank's result.

    interpret: run Triton kernels under the interpreter (CPU tensors); False compiles them (GPU
    ranks: `fn` picks its device). A rank that raised makes this raise RuntimeError naming the rank
    and its error. may_die: ranks expected to die (fault injection): their result is their exit
    code, and the others go on. start_method: how rank processes start (multiprocessing's names;
    the CPU-world tests fork theirs from a server that imported torch once, tests/world/harness.py).
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out:
        ctx = mp.start_processes(_entry, args=(fn, world, free_port(), out, args, interpret), nprocs=world, join=False,
                                 start_method=start_method)
        import time

        deadline = time.monotonic() + timeout_s
        # Wait for every rank ourselves rather than with ctx.join(), which kills the others as soon as
        # one exits badly: a rank that has written its result and then dies in interpreter teardown
        # (a C++ thread of torch's process group still joinable at exit aborts the process) has done
        # its work, and its peers must be allowed to finish theirs.
        release = Path(out, "release")

        def release_when_all_reported() -> None:
            if not release.exists() and all(Path(out, f"{r}.pkl").exists() or not p.is_alive() for r, p in enumerate(ctx.processes)):
                release.touch()  # every rank reported (or is gone): they may leave (see _entry)

        while any(p.is_alive() for p in ctx.processes):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"world of {world} ranks did not finish in {timeout_s:g}s")
            for r, p in enumerate(ctx.processes):
                release_when_all_reported()
                p.join(timeout=0.05 if release.exists() else 0.02)
                if p.exitcode not in (None, 0) and r not in may_die and not Path(out, f"{r}.pkl").exists():
                    # Died before reporting (a crash, not an exception): its peers would only hang.
                    for q in ctx.processes:
                        q.kill()
                    raise RuntimeError(f"rank {r} died without a result (exit code {p.exitcode})")
        results = []
        for r in range(world):
            f = Path(out, f"{r}.pkl")
            if r in may_die and not f.exists():
                results.append(ctx.processes[r].exitcode)
                continue
            if not f.exists():
                code = ctx.processes[r].exitcode
                raise RuntimeError(f"rank {r} exited without a result (exit code {code})")
            res = pickle.loads(f.read_bytes())
            if res[0] == "error":
                raise RuntimeError(f"rank {r}: {res[1]}\n{res[2]}")
            results.append(res[1])
        return results
