"""Rank functions of tests/world/test_timeouts.py: a first launch whose compile, on one rank, takes
longer than every bound of the launch (timeout_s and the host waits' 2 * timeout_s + 5 s)."""
from __future__ import annotations

import os
import time

TIMEOUT_S = 1.0
SLOW_COMPILE_S = 9.0  # past wait_bound(TIMEOUT_S) = 7 s, as a GPU compile may be past a 20 s timeout
DIE_AFTER_S = 2.0  # how long the dying rank compiles (beating) before it dies


def _compile_slowly_on(rank: int, slow_rank: int, then=None, seconds: float = SLOW_COMPILE_S):
    """Make rank `slow_rank`'s kernel compiles take `seconds` (then call `then`); returns what undoes it."""
    from syncopy.runtime.launch import warmup

    compile_kernel = warmup.compile_kernel

    def undo():
        warmup.compile_kernel = compile_kernel

    if rank != slow_rank:
        return undo

    def slow(*args, **kwargs):
        time.sleep(seconds)
        if then is not None:
            then()
        compile_kernel(*args, **kwargs)

    warmup.compile_kernel = slow
    return undo


def slow_compile(rank: int, world: int, slow_rank: int) -> dict:
    """An all_gather (rows kernel, fp32) and an all_reduce (gemm_ar template, fp16), two launches
    each with fresh data, NaN-poisoned receive buffers, the harness's slow link; `slow_rank`
    compiles each for SLOW_COMPILE_S."""
    undo = _compile_slowly_on(rank, slow_rank)
    try:
        return _launch_after_slow_compiles(rank, world)
    finally:
        undo()  # the world's later jobs (tests/world/test_timeouts.py) compile at full speed


def _launch_after_slow_compiles(rank: int, world: int) -> dict:
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.templates import available
    from tests.kernels.rownorm import rms_rows
    from tests.world.resource_workers import launch_and_check

    rows = syncopy.overlap({"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": 2, "order": "ring"},
                           timeout_s=TIMEOUT_S, poison_receive=True)(rms_rows)
    out = {"rows": [], "ar": [], "first_s": []}
    for e in range(2):
        t = time.monotonic()
        out["rows"].append(launch_and_check(rows, 2, seed=e))
        if e == 0:
            out["first_s"].append(time.monotonic() - t)
    ar = available()["gemm_ar"]
    fused = ar.fused(timeout_s=TIMEOUT_S, poison_receive=True)
    mod = ar.module
    for e in range(2):
        x = mod.inputs(rank, world, (40, 32, 32), torch.float16, seed=e)
        t = time.monotonic()
        with torch.no_grad():
            c = mod.launch(fused, x["a"], x["b"])
        if e == 0:
            out["first_s"].append(time.monotonic() - t)
        want = mod.reference(x["a"], x["b"])
        out["ar"].append(float((c.float() - want.float()).abs().max() / max(1.0, float(want.float().abs().max()))))
    dist.barrier()
    return out


def dies_while_compiling(rank: int, world: int, dying_rank: int) -> dict:
    """`dying_rank` dies in the middle of its first compile: the others name it, in bounded time."""
    import syncopy
    from tests.kernels.rownorm import rms_rows
    from tests.world.resource_workers import launch_and_check

    _compile_slowly_on(rank, dying_rank, then=lambda: os._exit(3), seconds=DIE_AFTER_S)
    rows = syncopy.overlap({"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": 2, "order": "ring"},
                           timeout_s=TIMEOUT_S, poison_receive=True)(rms_rows)
    t = time.monotonic()
    try:
        launch_and_check(rows, 2, seed=0)
        return {"error": None}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "seconds": time.monotonic() - t}


LATE_S = 6.0  # past wait_bound(TIMEOUT_S) of ranks 0 and 1's second launch: they time out waiting for the late rank


def late_rank(rank: int, world: int, late: int) -> dict:
    """gemm_ar (fp16): a first launch together, then rank `late` launches its second LATE_S late.
    The others time out (rightly: it never sent) and stay alive, as a job's ranks do after an error;
    the late rank finds their connections closed and must not call them dropped out."""
    import torch

    from syncopy.templates import available
    from tests.world.workers import stay_until_reported

    ar = available()["gemm_ar"]
    fused = ar.fused(timeout_s=TIMEOUT_S, poison_receive=True)
    mod = ar.module
    x = mod.inputs(rank, world, (40, 32, 32), torch.float16, seed=0)
    with torch.no_grad():
        mod.launch(fused, x["a"], x["b"])
        if rank == late:
            time.sleep(LATE_S)
        try:
            mod.launch(fused, x["a"], x["b"])
            error = None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    # Alive (rank 0 hosts the store) until the late rank has its error.
    stay_until_reported(rank, [late], LATE_S + 60)
    return {"error": error}
