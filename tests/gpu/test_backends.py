"""Rung 4, GPU backends in real multi-process worlds (tests/gpu/workers.py runs the ranks).

One GPU: two ranks share GPU 0 (CUDA IPC works between two processes on one device) and run the p2p
backend: copy-engine pushes into the peer's buffer, flags raised by a copy of the epoch behind each
chunk, the kernel's bounded acquire poll. Two or more GPUs: one rank per GPU, p2p across devices
and nccl (NCCL refuses two ranks on one GPU, so those tests skip with fewer). Skipped cleanly
without CUDA; each world is started once per module and its records are checked test by test.
"""
import os
import shutil
import subprocess

import pytest
import torch

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
GPUS = torch.cuda.device_count() if CUDA else 0

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not CUDA, reason="needs a CUDA device (and TRITON_INTERPRET unset)"),
]
two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (NCCL refuses two ranks on one GPU); found {GPUS}")

TOL = 2e-2  # fp16 operands, fp32 accumulation
WORLD_TIMEOUT_S = float(os.environ.get("SYNCOPY_GPU_WORLD_TIMEOUT_S", 150))  # the whole world; gpu_check.sh gives all GPU tests 300 s


def _exclusive_compute_mode() -> bool:
    """Is GPU 0 in an exclusive compute mode (one process at a time: two ranks cannot share it)?"""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        mode = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=compute_mode", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "exclusive" in mode.lower()


@pytest.fixture(scope="module")
def one_gpu():
    from syncopy.runtime.worlds.processes import spawn
    from tests.gpu import workers

    if _exclusive_compute_mode():
        pytest.skip("GPU 0 is in an exclusive compute mode: two ranks cannot share it")
    return spawn(workers.one_gpu, 2, timeout_s=WORLD_TIMEOUT_S, interpret=False)


@pytest.fixture(scope="module")
def gpus():
    from syncopy.runtime.worlds.processes import spawn
    from tests.gpu import workers

    return spawn(workers.two_gpus, 2, timeout_s=WORLD_TIMEOUT_S, interpret=False)


def _records(results, name):
    for rank, r in enumerate(results):
        rec = r[name]
        assert rec["ok"], f"rank {rank}: {name}: {rec['type']}: {rec['str']}\n{rec['trace']}"
        yield rank, rec


def test_p2p_ag_gemm_two_ranks_on_one_gpu_equals_torch(one_gpu):
    # 4 launches over 2 shapes (2 contexts, 2 epochs each), buffers NaN-poisoned before every launch:
    # a row the pushes did not fill, or a flag that rose before its data, shows up as an error.
    for rank, rec in _records(one_gpu, "ag_gemm p2p"):
        assert rec["backend"] == "P2PBackend", rank
        assert rec["shared_device"], (rank, rec)  # found the other rank on GPU 0: chunks land before the launch
        assert rec["epochs"] == [2, 2], (rank, rec)
        assert rec["worst"] < TOL, (rank, rec)


def test_auto_picks_p2p_on_one_node_and_persistent_template_runs(one_gpu):
    # backend='auto' with every rank on one host: p2p; the persistent template sizes its grid with it.
    for rank, rec in _records(one_gpu, "ag_gemm_persistent auto"):
        assert rec["backend"] == "P2PBackend", rank
        assert rec["worst"] < TOL, (rank, rec)


@pytest.mark.parametrize("name", ["gemm_rs p2p", "gemm_ar p2p"])
def test_p2p_producer_templates_equal_torch(one_gpu, name):
    for rank, rec in _records(one_gpu, name):
        assert rec["backend"] == "P2PBackend", rank
        assert rec["worst"] < TOL, (rank, rec)


def test_p2p_reduce_scatter_sends_behind_the_kernels_flags():
    # The path of one rank per GPU, played by two processes on GPU 0: sends wait on the kernel's
    # flags on the device, the owner's reduction on the delivered words; 4 launches, new data each.
    from syncopy.runtime.worlds.processes import spawn
    from tests.gpu import workers

    if _exclusive_compute_mode():
        pytest.skip("GPU 0 is in an exclusive compute mode: two ranks cannot share it")
    results = spawn(workers.one_gpu_sends, 2, timeout_s=min(WORLD_TIMEOUT_S, 60), interpret=False)
    for name in ("gemm_rs p2p sends", "gemm_ar p2p sends"):  # all_reduce: the reduced rows pushed behind the reduction too
        for rank, rec in _records(results, name):
            assert rec["backend"] == "P2PBackend" and rec["reducers"] == ["SendReduce"], (name, rank, rec)
            assert rec["worst"] < TOL, (name, rank, rec)


def test_p2p_withheld_chunk_raises_timeout_naming_it(one_gpu):
    # Rank 1 never pushes its chunk 0: rank 0's kernel gives up after timeout_s (a 1 s poll budget)
    # and the host raises SyncopyTimeout(rank 0, chunk (1, 0), epoch 1); rank 1 gets everything.
    recs = dict(_records(one_gpu, "withheld p2p"))
    assert recs[1]["raised"] is None, recs[1]
    r0 = recs[0]
    assert r0["raised"] == "SyncopyTimeout", r0
    assert (r0["rank"], tuple(r0["chunk"]), r0["epoch"]) == (0, (1, 0), 1), r0
    assert r0["seconds"] < 60, r0  # bounded (the first launch also compiles the kernel)


def test_p2p_world_works_on_after_a_timeout(one_gpu):
    # The withheld-chunk check left rank 0 with a timed-out operator; a new one must run normally.
    for rank, rec in _records(one_gpu, "after timeout p2p"):
        assert rec["worst"] < TOL, (rank, rec)


def test_p2p_ranks_on_one_gpu_wait_for_a_late_peer_before_launching(one_gpu):
    # Rank 1 enqueues its pushes 0.5 s late. A kernel launched before they landed would hold the GPU
    # while they queue in the other process (kernels of two processes take turns); rank 0 must wait.
    for rank, rec in _records(one_gpu, "late p2p"):
        assert rec["worst"] < TOL, (rank, rec)


@two_gpus
def test_p2p_across_two_gpus_equals_torch(gpus):
    for rank, rec in _records(gpus, "ag_gemm p2p"):
        assert rec["backend"] == "P2PBackend" and rec["worst"] < TOL, (rank, rec)


@two_gpus
@pytest.mark.parametrize("name", ["ag_gemm nccl", "ag_gemm_persistent nccl", "gemm_rs nccl", "gemm_ar nccl", "gemm_rs p2p"])
def test_across_two_gpus_equals_torch(gpus, name):
    for rank, rec in _records(gpus, name):
        assert rec["worst"] < TOL, (rank, rec)


@two_gpus
def test_nccl_refuses_a_grid_that_could_starve_it(gpus):
    for rank, rec in _records(gpus, "big grid nccl"):
        assert rec["raised"] == "LaunchError", (rank, rec)
        assert "launches 4096 programs" in rec["str"] and "persistent kernel" in rec["str"], rec["str"]


@two_gpus
def test_nccl_warm_launches_do_not_sync_and_a_late_peer_is_named(gpus):
    # Warm launches ran under set_sync_debug_mode("error"); a peer 3 s late past a 1 s timeout
    # makes rank 0's launch 2 fail at synchronize(), naming epoch 2, and nobody hangs.
    for rank, rec in _records(gpus, "async nccl"):
        assert rec["worst"] < TOL, (rank, rec)
        first, second = rec["late"]
        assert first["raised"] is None, (rank, rec)
        if rank == 0:
            assert second["raised"] == "SyncopyTimeout" and second["epoch"] == 2, (rank, rec)
            assert second["str"].startswith("rank 0 waited 1s for chunk 0 of rank 1 (epoch 2)"), second
        assert second["seconds"] < 30, (rank, rec)


def test_occupancy_on_this_gpu(monkeypatch):
    from syncopy.runtime.streams import occupancy

    monkeypatch.delenv("SYNCOPY_NCCL_SMS", raising=False)
    monkeypatch.delenv("NCCL_MAX_NCHANNELS", raising=False)
    cuda = torch.device("cuda", 0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert occupancy.sm_count(cuda) == sms
    assert occupancy.programs(cuda, "nccl") == sms - occupancy.DEFAULT_NCCL_SMS
    assert occupancy.programs(cuda, "p2p", n_tiles=10**6) == sms


def test_nccl_options_on_this_torch():
    # The dedicated communicator's options: NCCL's stream at high priority, its kernels capped at the
    # SMs the fused kernel leaves free (where this torch exposes ncclConfig_t.maxCTAs).
    from syncopy.runtime.transport.backends.nccl import nccl_options

    opts = nccl_options(8)
    assert opts.is_high_priority_stream
    assert getattr(getattr(opts, "config", None), "max_ctas", 8) == 8
