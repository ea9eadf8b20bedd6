"""nccl beside DDP on two GPUs (issue 28, defect 6): syncopy's rounds interleaved with a DDP step's
gradient all-reduce and an all_reduce from another stream, both on DDP's own NCCL communicator,
launch after launch with nothing synchronised between them. NCCL_LAUNCH_ORDER_IMPLICIT=1 is set as
docs/gpu.md asks (NCCL 2.26+ then orders the two communicators' kernels as the host issued them).

Checked: every ag_gemm result against torch, every all_reduce's sum, DDP's gradients equal on both
ranks, no hang (the world is bounded), and that the fused kernel left free what one of DDP's NCCL
kernels may take. Needs two GPUs (NCCL refuses two ranks on one); benchmarks/gpu_check.sh runs it
where two are present (`pytest -m gpu2 tests/gpu`).
"""
import os

import pytest
import torch

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
GPUS = torch.cuda.device_count() if CUDA else 0
TOL = 2e-2  # fp16 operands, fp32 accumulation
WORLD_TIMEOUT_S = float(os.environ.get("SYNCOPY_GPU_WORLD_TIMEOUT_S", 150))

pytestmark = [
    pytest.mark.gpu2,
    pytest.mark.skipif(not CUDA, reason="needs CUDA devices (and TRITON_INTERPRET unset)"),
    pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (NCCL refuses two ranks on one GPU); found {GPUS}"),
]


def test_nccl_launches_beside_ddp_on_another_communicator_are_right_and_never_hang(monkeypatch):
    from syncopy.runtime.worlds.processes import spawn
    from tests.gpu import beside_workers

    monkeypatch.setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1")  # the ranks inherit it (spawned after)
    results = spawn(beside_workers.nccl_beside_ddp, 2, timeout_s=WORLD_TIMEOUT_S, interpret=False)
    for rank, r in enumerate(results):
        rec = r["beside ddp"]
        assert rec["ok"], f"rank {rank}: {rec['type']}: {rec['str']}\n{rec['trace']}"
        assert rec["worst"] < TOL and rec["sums_right"] and rec["grads_equal"], (rank, rec)
        assert rec["reserved"] >= rec["uncapped"], (rank, rec)  # DDP's communicator's kernels find their SMs
