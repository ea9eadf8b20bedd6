"""p2p between GPUs (issue 28, items 1 and 2), in real multi-process worlds (tests/gpu/peer_workers.py).

Two GPUs (`gpu2`): a process whose first p2p launches are reduce_scatter and all_reduce writes into
the peer's GPU with raw copies and write-values, before any torch copy across devices could have
enabled peer access: it must run, and equal torch (before the fix: an invalid-address error or a
fault at the first launch). Peers' memory is mapped in this rank's own context: no process holds a
context on another rank's GPU. A peer that stops launching is a timeout naming it within the bound.

One GPU (`gpu`): the same dead peer, with two processes on GPU 0 told they are on different devices
(the asynchronous path). Safe because the absent rank runs no kernel while the survivor waits, and
launch 1, where both run and their kernels take turns on the GPU, has a timeout that outlasts the turns.
Skipped cleanly without CUDA.
"""
import os

import pytest
import torch

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
GPUS = torch.cuda.device_count() if CUDA else 0
WORLD_TIMEOUT_S = max(150.0, float(os.environ.get("SYNCOPY_GPU_WORLD_TIMEOUT_S", 150)))  # the one-GPU dead peer: ~100 s
TOL = 2e-2  # fp16 operands, fp32 accumulation

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA device (and TRITON_INTERPRET unset)")]


def _spawn(fn):
    from syncopy.runtime.worlds.processes import spawn

    return spawn(fn, 2, timeout_s=WORLD_TIMEOUT_S, interpret=False)


@pytest.mark.gpu2
@pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (one rank each); found {GPUS}")
def test_p2p_producer_first_job_runs_across_gpus_and_makes_no_context_on_the_peer_gpu():
    from tests.gpu import peer_workers

    for rank, r in enumerate(_spawn(peer_workers.producer_first)):
        if r["can access"] != [True]:
            pytest.skip(f"GPU {rank} has no peer access to the other: p2p refuses such a node (use nccl)")
        for name in ("rs", "ar", "ag"):
            rec = r[name]
            assert rec["ok"], f"rank {rank}: {name}: {rec.get('type')}: {rec.get('str')}\n{rec.get('trace')}"
            assert rec["worst"] < TOL, (rank, name, rec)
            assert rec["backend"] == "P2PBackend", (rank, name, rec)
        assert r["rs"]["reducers"] == ["SendReduce"], r["rs"]
        assert r["peer contexts after rs"] == [] and r["peer contexts"] == [], (rank, r)


def _dead_peer_checks(results) -> None:
    r0, r1 = results
    assert r0["asynchronous"] and r1["asynchronous"], results  # the device-side handshake, bounded waits
    assert r0["raised"] in ("SyncopyTimeout", "LaunchError"), r0
    assert "rank 1" in r0["str"], r0["str"]
    assert r0["seconds"] < r0["bound"], r0  # within the bound (the kernel's timeout, then the bounded wait's), never a hang
    assert r0["after"] is not None, r0  # the operator takes no more launches


@pytest.mark.gpu2
@pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (one rank each); found {GPUS}")
def test_p2p_dead_peer_across_gpus_is_a_timeout_naming_it_within_the_bound():
    from tests.gpu import peer_workers

    _dead_peer_checks(_spawn(peer_workers.dead_peer))


def test_p2p_dead_peer_on_one_gpu_told_apart_is_a_timeout_naming_it_within_the_bound():
    from tests.gpu import peer_workers
    from tests.gpu.test_backends import _exclusive_compute_mode

    if _exclusive_compute_mode():
        pytest.skip("GPU 0 is in an exclusive compute mode: two ranks cannot share it")
    _dead_peer_checks(_spawn(peer_workers.dead_peer_one_gpu))
