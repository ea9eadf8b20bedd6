"""CUDA_DEVICE_MAX_CONNECTIONS=1 on the GPU (issue 28, defect 7): worlds started with one hardware
queue for every stream (the parent sets the variable before spawning: CUDA reads it when it makes
the device's context, once per process).

One GPU: the world-of-one tp_mlp pipeline, two shapes, launch after launch. Its warm launches used
to enqueue op 2 first on a side stream, where the copy of op 2's result behind its kernel held op 1
back: a SyncopyTimeout on every warm launch. Now both run in order, and `placement.why` says why.
Two GPUs (gpu2): ag_gemm on nccl, whose rounds now go behind the kernel with one queue, and gemm_rs.
"""
import os

import pytest
import torch

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
GPUS = torch.cuda.device_count() if CUDA else 0
TOL = 2e-2  # fp16 operands, fp32 accumulation
WORLD_TIMEOUT_S = float(os.environ.get("SYNCOPY_GPU_WORLD_TIMEOUT_S", 120))

needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device (and TRITON_INTERPRET unset)")


def _ok(rec: dict) -> dict:
    assert rec["ok"], f"{rec['type']}: {rec['str']}\n{rec['trace']}"
    return rec


@pytest.mark.gpu
@needs_cuda
def test_the_world_of_one_pipeline_with_one_hardware_queue_is_right_and_never_times_out(monkeypatch):
    from syncopy.runtime.worlds.processes import spawn
    from tests.gpu import beside_workers

    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    (result,) = spawn(beside_workers.single_queue_world1, 1, timeout_s=WORLD_TIMEOUT_S, interpret=False)
    assert result["connections"] == 1
    rec = _ok(result["numerics"])  # a SyncopyTimeout would be recorded here
    assert rec["worst"] < TOL, rec
    warm = rec["placements"][2:]  # the first launch of each shape runs in order anyway
    assert warm and all(not side and not first for side, first, _ in warm), rec["placements"]
    assert all("CUDA_DEVICE_MAX_CONNECTIONS=1" in why for _, _, why in warm), rec["placements"]


@pytest.mark.gpu2
@needs_cuda
@pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (NCCL refuses two ranks on one GPU); found {GPUS}")
def test_nccl_with_one_hardware_queue_is_right_and_never_times_out(monkeypatch):
    from syncopy.runtime.worlds.processes import spawn
    from tests.gpu import beside_workers

    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    results = spawn(beside_workers.single_queue_nccl, 2, timeout_s=WORLD_TIMEOUT_S, interpret=False)
    for rank, r in enumerate(results):
        assert r["connections"] == 1
        for name in ("ag_gemm nccl", "gemm_rs nccl"):
            rec = _ok(r[name])
            assert rec["worst"] < TOL, (rank, name, rec)
