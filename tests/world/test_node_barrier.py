"""control.NodeBarrier, the p2p backend's per-launch barrier through a file every rank maps, on
real processes (world 3): nobody leaves a barrier before everybody reached it, launch after launch;
the file's name is gone once mapped; a rank that never comes is named after the deadline instead of
a hang; ranks that cannot map the file fall back to gloo's barrier (None)."""
from __future__ import annotations

import pytest

from tests.world.harness import spawn
from tests.world.workers import job, once, run_jobs

WORLD = 3
ROUNDS = 40
STOP_TIMEOUT_S = 0.5


@once
def _world() -> list[dict]:
    """The three cases in one spawned world (spawning costs seconds), the rank that never comes last."""
    jobs = {"rounds": (f"{__name__}:_rounds", (ROUNDS,)), "cannot map": (f"{__name__}:_cannot_map", ()),
            "one stops": (f"{__name__}:_one_stops", (STOP_TIMEOUT_S,))}
    return spawn(run_jobs, WORLD, jobs, timeout_s=300)


def _rounds(rank: int, world: int, rounds: int) -> dict:
    import os
    import random
    import time

    import torch.distributed as dist

    from syncopy.runtime.transport.backends.control import node_barrier

    barrier = node_barrier(dist.group.WORLD, timeout_s=30)
    rng = random.Random(rank)
    came, left = [], []
    for i in range(rounds):
        time.sleep(rng.random() * 2e-3)  # arrive in a different order every time
        came.append(time.monotonic())
        barrier.wait(f"round {i}")
        left.append(time.monotonic())
    return {"came": came, "left": left, "count": barrier.count, "files": sorted(f for f in os.listdir(os.path.dirname(barrier.path) or ".")
                                                                                  if f == os.path.basename(barrier.path))}


def _one_stops(rank: int, world: int, timeout_s: float) -> dict:
    import time

    import torch.distributed as dist

    from syncopy.runtime.transport.backends.control import node_barrier

    barrier = node_barrier(dist.group.WORLD, timeout_s=timeout_s)
    barrier.wait("round 0")
    if rank == 2:
        time.sleep(timeout_s * 3)  # stuck: never reaches round 1 while the others wait
        return {"error": None}
    t = time.monotonic()
    try:
        barrier.wait("the handshake of launch 2")
        return {"error": None}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "waited": time.monotonic() - t}


def _cannot_map(rank: int, world: int) -> dict:
    import mmap

    import torch.distributed as dist

    from syncopy.runtime.transport.backends import control

    mapped = mmap.mmap
    if rank == 1:  # as if this rank's temporary folder were another one
        def refuse(*args, **kwargs):
            raise OSError("no such file")

        mmap.mmap = refuse
    try:
        return {"barrier": control.node_barrier(dist.group.WORLD, timeout_s=5)}
    finally:
        mmap.mmap = mapped  # the world's next job maps its file


@pytest.mark.world
def test_nobody_leaves_a_barrier_before_everybody_came():
    rounds = ROUNDS
    results = job(_world(), "rounds")
    for i in range(rounds):
        last_in = max(r["came"][i] for r in results)
        first_out = min(r["left"][i] for r in results)
        assert first_out >= last_in, f"round {i}: a rank left {last_in - first_out:.6f}s before the last one came"
    assert [r["count"] for r in results] == [rounds] * WORLD
    assert all(r["files"] == [] for r in results)  # the name was removed once every rank had mapped it


@pytest.mark.world
def test_a_rank_that_never_comes_is_named_after_the_deadline():
    results = job(_world(), "one stops")
    for rank in (0, 1):
        assert results[rank]["error"] == (f"LaunchError: rank {rank}: rank(s) 2 did not reach the handshake of launch 2 within 0.5s "
                                          f"(stopped or stuck); re-create the process group"), results[rank]
        assert results[rank]["waited"] >= 0.5  # not before the deadline; the spawn deadline bounds it above
    assert results[2]["error"] is None


@pytest.mark.world
def test_ranks_that_cannot_map_the_file_keep_gloos_barrier():
    assert [r["barrier"] for r in job(_world(), "cannot map")] == [None] * WORLD
