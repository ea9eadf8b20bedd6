"""`chunks_per_rank: auto` / `order: auto`: the resolution for one launch (syncopy.planner.auto) and
the `overlap(..., chunks_per_rank=, order=, hardware=)` options. The CPU-world launch is in
tests/world/test_auto.py."""
from __future__ import annotations

import pytest

from syncopy.planner import CHUNK_CHOICES, ORDERS, choose_for, load_profile, make_workload
from syncopy.planner.auto import (
    HARDWARE_ENV,
    hardware_name,
    planner_dtype,
    problem_shape,
    profile_for_gpu,
    resolve,
)
from syncopy.runtime.transport.link import Link

# An all-gather GEMM on 4 H100s that the planner splits (comm ~ compute), and its launch:
# A shard 2048 x 4096 bf16, B 4096 x 4096, C 8192 x 4096.
SHARD, WORLD = (2048, 4096), 4
OTHERS = [(4096, 4096), (8192, 4096)]
H100 = load_profile("h100-nvlink").replace(("links", "nvlink", "bandwidth"), 50e9)


def _resolve(chunks="auto", order="auto", **kw):
    args = dict(world=WORLD, shard_shape=SHARD, dim=0, dtype="torch.bfloat16", others=OTHERS, hardware=H100)
    return resolve("all_gather", chunks, order, **{**args, **kw})


# --- the choice is the planner's ----------------------------------------------------------------

def test_auto_is_the_optimizers_choice_for_the_launch_shape():
    plan = choose_for(make_workload("ag_gemm", 8192, 4096, 4096, "bf16"), H100, WORLD)
    r = _resolve()
    assert plan.chunks_per_rank > 1, "the setting must make chunking pay, or the test proves little"
    assert (r.chunks_per_rank, r.order, r.shape, r.dtype, r.template) == (plan.chunks_per_rank, plan.order, (8192, 4096, 4096), "bf16", "ag_gemm")
    assert (r.fused_s, r.sequential_s, r.reason) == (plan.fused_s, plan.sequential_s, plan.reason)
    assert r.hardware == "h100-nvlink"


def test_resolution_is_deterministic():
    assert _resolve() == _resolve()


def test_chunks_never_exceed_the_shard_rows():
    unlimited = _resolve()
    assert unlimited.chunks_per_rank > 2
    for rows in (1, 2):
        r = _resolve(shard_shape=(rows, 4096), others=[(4096, 4096), (WORLD * rows, 4096)])
        assert r.chunks_per_rank <= rows
        expected = choose_for(make_workload("ag_gemm", WORLD * rows, 4096, 4096, "bf16"), H100, WORLD,
                              chunk_choices=[c for c in CHUNK_CHOICES if c <= rows])
        assert r.chunks_per_rank == expected.chunks_per_rank
    # Also when a workload hint describes a bigger problem than the launch's shard.
    assert _resolve(shard_shape=(2, 4096), workload=(8192, 4096, 4096)).chunks_per_rank <= 2


def test_a_fixed_key_stays_fixed_and_the_other_is_chosen():
    r = _resolve(chunks=5)
    assert r.chunks_per_rank == 5
    expected = choose_for(make_workload("ag_gemm", 8192, 4096, 4096, "bf16"), H100, WORLD, chunk_choices=[5])
    assert r.order == expected.order and r.fused_s == expected.fused_s
    for order in ORDERS:
        assert _resolve(order=order).order == order
    # An explicit list of peer offsets is kept (and simulated as direct sends).
    r = _resolve(order=[3, 1, 2])
    assert r.order == [3, 1, 2]
    assert r.chunks_per_rank == choose_for(make_workload("ag_gemm", 8192, 4096, 4096, "bf16"), H100, WORLD,
                                           orders=("local_first",)).chunks_per_rank


def test_a_world_of_one_takes_one_chunk():
    r = resolve("all_gather", "auto", "auto", world=1, shard_shape=(64, 32), dim=0, dtype="torch.float32", others=[(64, 32)])
    assert (r.chunks_per_rank, r.hardware) == (1, "cpu-gloo")


def test_the_emulated_link_is_part_of_the_problem():
    # cpu-gloo sees a 24-row GEMM as compute-bound on its own loopback (one chunk), but not through a
    # slow emulated link.
    args = dict(world=2, shard_shape=(24, 24), dim=0, dtype="torch.float32", others=[(24, 32), (48, 32)], hardware="cpu-gloo")
    plain = resolve("all_gather", "auto", "ring", **args)
    slow = resolve("all_gather", "auto", "ring", link=Link(bandwidth_Bps=2e5), **args)
    assert plain.chunks_per_rank == 1 and plain.hardware == "cpu-gloo"
    assert slow.chunks_per_rank > 1 and slow.hardware == "cpu-gloo + emulated link"


# --- the problem a generic launch stands for ----------------------------------------------------

@pytest.mark.parametrize(
    ("shard", "dim", "world", "others", "expected"),
    [
        pytest.param((2048, 4096), 0, 4, [(4096, 1024), (8192, 1024)], (8192, 1024, 4096), id="gemm-output-gives-N"),
        pytest.param((16, 24), 0, 2, [(24, 32), (32, 32)], (32, 32, 24), id="weight-with-N-equal-to-M-is-not-the-output"),
        pytest.param((16, 24), 0, 2, [(24, 40)], (32, 40, 24), id="weight-alone-gives-N"),
        pytest.param((16, 24), 0, 2, [(40, 24)], (32, 40, 24), id="transposed-weight"),
        pytest.param((16, 24), 0, 2, [(7,)], (32, 24, 24), id="nothing-matches-square"),
        pytest.param((8, 3, 4), 0, 2, [(16, 3, 5)], (16, 15, 12), id="rows-are-dim-0-and-the-rest-is-K"),
        pytest.param((3, 8), 1, 2, [(3, 16)], (16, 3, 3), id="gathered-along-dim-1"),
    ],
)
def test_problem_shape(shard, dim, world, others, expected):
    assert problem_shape(shard, dim, world, others) == expected


def test_dtypes():
    assert [planner_dtype(d) for d in ("torch.float16", "torch.bfloat16", "torch.float32", "torch.float64", "torch.int8")] == [
        "fp16", "bf16", "fp32", "fp32", "fp32"]


def test_workload_hints():
    rms = _resolve(workload="ag_rmsnorm")
    assert (rms.template, rms.shape) == ("ag_rmsnorm", (8192, 4096, 1))
    explicit = _resolve(workload=(8192, 512, 4096))
    assert (explicit.template, explicit.shape) == ("ag_gemm", (8192, 512, 4096))
    with pytest.raises(ValueError) as info:
        _resolve(workload="gemm_rs")
    assert str(info.value) == "workload 'gemm_rs' is a reduce_scatter template but the schedule's pattern is all_gather; name a template for all_gather"
    with pytest.raises(ValueError) as info:
        _resolve(workload=[1, 2])
    assert str(info.value) == "workload=[1, 2] is not a template name, an (M, N, K) tuple or a Workload; give one of those"


def test_a_world_the_profile_does_not_describe_is_an_error():
    with pytest.raises(ValueError, match="hardware 'h100-nvlink' describes at most 8 ranks but world is 16"):
        _resolve(world=16)


# --- which hardware profile ---------------------------------------------------------------------

def test_hardware_explicit_then_environment_then_device():
    env = {HARDWARE_ENV: "h100-pcie"}
    assert hardware_name("a100-nvlink", "cuda", "NVIDIA H100 80GB HBM3", env) == "a100-nvlink"
    assert hardware_name(None, "cpu", None, env) == "h100-pcie"
    assert hardware_name(None, "cpu", None, {}) == "cpu-gloo"
    assert hardware_name(None, "cuda", "NVIDIA H100 80GB HBM3", {}) == "h100-nvlink"


@pytest.mark.parametrize(
    ("name", "profile"),
    [("NVIDIA H100 80GB HBM3", "h100-nvlink"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200-nvlink"),
     ("NVIDIA A100-SXM4-80GB", "a100-nvlink")],
)
def test_gpu_names(name, profile):
    assert profile_for_gpu(name) == profile
    load_profile(profile)  # every name maps to a shipped profile


def test_an_unknown_gpu_says_how_to_choose_a_profile():
    with pytest.raises(ValueError) as info:
        profile_for_gpu("NVIDIA GeForce RTX 4090")
    assert str(info.value) == (
        "no hardware profile matches GPU 'NVIDIA GeForce RTX 4090'; pass hardware= to syncopy.overlap or set "
        "SYNCOPY_HARDWARE to a profile name (a100-nvlink, cpu-gloo, h100-nvlink, h100-pcie, h200-nvlink) or a YAML file")


# --- syncopy.overlap options ---------------------------------------------------------------------

SCHEDULE = {"pattern": "all_gather", "kernel": "ag_gemm_kernel", "tensor": "A", "dim": 0, "chunks_per_rank": 3, "order": "ring"}


def _kernel():
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    return ag_gemm_kernel


def test_overlap_arguments_override_the_schedule():
    import syncopy

    fused = syncopy.overlap(SCHEDULE, chunks_per_rank="auto")(_kernel())
    assert (fused.schedule.chunks_per_rank, fused.schedule.order, fused.schedule.planned) == ("auto", "ring", True)
    fused = syncopy.overlap({**SCHEDULE, "chunks_per_rank": "auto"}, chunks_per_rank=2, order="auto")(_kernel())
    assert (fused.schedule.chunks_per_rank, fused.schedule.order) == (2, "auto")
    fused = syncopy.overlap(SCHEDULE)(_kernel())
    assert (fused.schedule.chunks_per_rank, fused.schedule.order, fused.schedule.planned) == (3, "ring", False)
    assert fused.resolved_chunks_per_rank is None and fused.last_resolution is None  # nothing launched yet


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"chunks_per_rank": 0}, "syncopy.overlap: chunks_per_rank: must be a positive integer or auto (got 0); "
         "write a chunk count no larger than the rows of one shard, or auto to let the planner choose"),
        ({"chunks_per_rank": "many"}, "syncopy.overlap: chunks_per_rank: must be a positive integer or auto (got 'many'); "
         "write a chunk count no larger than the rows of one shard, or auto to let the planner choose"),
        ({"order": "fastest"}, "syncopy.overlap: order: 'fastest' is not allowed; "
         "use ring, local_first, bidirectional_ring, auto, a list of peer offsets, or explicit (with `transfers:`)"),
    ],
)
def test_bad_overlap_arguments_name_the_argument(kwargs, expected):
    import syncopy

    with pytest.raises(syncopy.ScheduleError) as info:
        syncopy.overlap(SCHEDULE, **kwargs)
    assert str(info.value) == expected


def test_a_launch_that_cannot_be_planned_names_the_key_and_the_fix():
    import torch

    import syncopy

    fused = syncopy.overlap(SCHEDULE, chunks_per_rank="auto", hardware="tpu-v9")(_kernel())
    status, text = fused.contexts.resolve(torch.zeros(8, 16), 2, {"B": torch.zeros(16, 4)})
    assert status == "error"
    assert text == ("chunks_per_rank is auto but the planner cannot plan this launch: unknown hardware profile 'tpu-v9'; "
                    "use one of a100-nvlink, cpu-gloo, h100-nvlink, h100-pcie, h200-nvlink or a path to a YAML file")
    fused = syncopy.overlap(SCHEDULE, chunks_per_rank="auto")(_kernel())
    status, r = fused.contexts.resolve(torch.zeros(8, 16), 2, {"B": torch.zeros(16, 4), "C": torch.zeros(16, 4)})
    assert status == "ok" and (r.shape, r.hardware) == ((16, 4, 16), "cpu-gloo")


def test_the_environment_names_the_profile(monkeypatch):
    import torch

    import syncopy

    monkeypatch.setenv(HARDWARE_ENV, "h200-nvlink")
    fused = syncopy.overlap(SCHEDULE, order="auto")(_kernel())
    status, r = fused.contexts.resolve(torch.zeros(8, 16), 2, {})
    assert status == "ok" and r.hardware == "h200-nvlink" and r.chunks_per_rank == 3
