"""Rank functions of tests/unit/test_resources.py: what an operator keeps across process-group cycles
and across many shard shapes. Each launch checks its result against torch (all_gather of the shards,
then RMS normalisation), with NaN-poisoned receive buffers and fresh data."""
from __future__ import annotations

import gc
import os
import weakref
from datetime import timedelta
from tests.oracles import worst

COLS, BLOCK, EPS = 12, 8, 1e-6
SCHEDULE = {"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": 2, "order": "ring"}


def os_resources() -> tuple[int, int]:
    """(OS threads, open file descriptors) of this process, after collecting garbage, once the counts
    settle (the same for half a second): threads and sockets of a destroyed group may still be on their
    way out on a loaded machine (up to 4 s)."""
    import time

    def count():
        gc.collect()
        return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))

    seen, same = count(), 0
    for _ in range(40):
        time.sleep(0.1)
        now = count()
        same = same + 1 if now == seen else 0
        if same == 5:
            break
        seen = now
    return seen


def _operator(**options):
    import syncopy
    from tests.kernels.rownorm import rms_rows

    return syncopy.overlap(SCHEDULE, timeout_s=20, poison_receive=True, **options)(rms_rows)


def launch_and_check(fused, rows: int, seed: int, group=None, cols: int = COLS) -> float:
    """One launch on `rows` x `cols` per rank; the largest error against torch."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed * 131 + rank))
    w = torch.randn(cols, generator=torch.Generator().manual_seed(seed))
    y = torch.full((rows * world, cols), float("nan"))
    fused[(rows * world,)](x, w, y, x.stride(0), cols, EPS, BLOCK=BLOCK, group=group)
    gathered = torch.empty(rows * world, cols)
    dist.all_gather_into_tensor(gathered, x, group=group)
    want = gathered * torch.rsqrt(gathered.pow(2).mean(dim=1, keepdim=True) + EPS) * w
    return float((y - want).abs().max())


def group_cycles(rank: int, world: int, ports: list[int]) -> dict:
    """Destroy and re-create the default group once per port, launching the same operator (and one
    made afresh each cycle) twice on each; OS threads and fds after each cycle."""
    import torch.distributed as dist

    kept = _operator()
    seen, errors = [], []
    for cycle, port in enumerate(ports):
        dist.destroy_process_group()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=60))
        fresh = _operator()
        for e in range(2):
            errors.append(launch_and_check(kept, 3 + e, seed=10 * cycle + e))
            errors.append(launch_and_check(fresh, 2, seed=10 * cycle + e + 5))
        sub = dist.new_group(list(range(world)))  # a sub-group made and destroyed within the cycle
        errors.append(launch_and_check(kept, 2, seed=10 * cycle + 9, group=sub))
        dist.destroy_process_group(sub)
        del fresh, sub
        seen.append(os_resources())
    dist.destroy_process_group()
    kept.release()
    seen.append(os_resources())
    return {"seen": seen, "worst": worst(errors)}


def many_shapes(rank: int, world: int, shapes: int, max_contexts: int) -> dict:
    """The contexts of `shapes` distinct shard shapes (2 x 1..`shapes`) on one operator kept to
    `max_contexts`: how many of their buffers are alive after each, and after `release()`. Made
    the way a first launch makes them, without running the kernel (the interpreter's seconds per
    launch would make this a long test; `evictions` launches)."""
    import torch
    import torch.distributed as dist

    fused = _operator()
    fused.max_contexts = max_contexts
    fused.build()
    buffers, alive = [], []
    for s in range(shapes):
        ctx, _ = fused.contexts.get(torch.empty(2, 1 + s), dist.group.WORLD, {})
        buffers.append(weakref.ref(ctx.buffer))
        del ctx  # an evicted context has no other reference: its buffer goes at once
        alive.append(sum(ref() is not None for ref in buffers))
    kept = len(fused.contexts.table)
    fused.release()
    gc.collect()
    return {"alive": alive, "kept": kept, "after_release": sum(ref() is not None for ref in buffers),
            "contexts_after_release": len(fused.contexts.table)}


def evictions(rank: int, world: int) -> dict:
    """Launches on five shard shapes, then the first again, on an operator kept to two contexts: every
    rank evicts alike and a shape that comes back is made again, right. Then ranks that keep
    different budgets are refused at the first launch of a shape."""
    fused = _operator()
    fused.max_contexts = 2
    errors, made = [], []
    for s, cols in enumerate([1, 2, 3, 4, 5, 1, 5]):
        errors.append(launch_and_check(fused, 2, seed=s, cols=cols))
        made.append(sorted(key[1][1] for key in fused.contexts.table))
    other = _operator()
    if rank == 1:
        other.max_contexts = 3
    try:
        launch_and_check(other, 2, seed=0)
        refused = "launched"
    except Exception as exc:
        refused = f"{type(exc).__name__}: {exc}"
    return {"worst": worst(errors), "kept": made, "refused": refused}
