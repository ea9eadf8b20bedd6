"""The optimizer: its choice moves the right way, and the plan says why."""
import pytest

from syncopy.planner import CHUNK_CHOICES, ORDERS, choose, choose_for, load_profile, make_workload

AG = make_workload("ag_gemm", 8192, 4096, 4096, "bf16")


def _with_link(alpha_s=None, bandwidth=None, name="h100-nvlink"):
    p = load_profile(name)
    if alpha_s is not None:
        p = p.replace(("links", "nvlink", "alpha_s"), alpha_s)
    if bandwidth is not None:
        p = p.replace(("links", "nvlink", "bandwidth"), bandwidth)
    return p


def test_more_latency_means_fewer_chunks():
    chosen = [choose_for(AG, _with_link(alpha_s=a, bandwidth=40e9), world=2).chunks_per_rank for a in (1e-6, 1e-5, 3e-5, 1e-4)]
    assert chosen == sorted(chosen, reverse=True)
    assert chosen[0] > chosen[-1] == 1


def test_a_slower_link_relative_to_compute_makes_chunks_pay():
    fast = choose_for(AG, _with_link(bandwidth=450e9), world=2)
    slow = choose_for(AG, _with_link(bandwidth=100e9), world=2)
    assert fast.bound == "compute-bound" and fast.chunks_per_rank == 1
    assert slow.chunks_per_rank > fast.chunks_per_rank

    def gain(plan):  # what chunking buys over one chunk per rank, same order
        one = next(c for c in plan.candidates if c.chunks_per_rank == 1 and c.order == plan.order)
        return one.fused_s / plan.fused_s

    assert gain(slow) > 1.2 > gain(fast)


def test_the_plan_carries_every_prediction_and_candidate():
    plan = choose("all_gather", 8192, 4096, 4096, world=4, hardware="h100-nvlink")
    assert plan.template == "ag_gemm" and plan.pattern == "all_gather" and plan.world == 4
    assert plan.chunks_per_rank in CHUNK_CHOICES and plan.order in ORDERS
    assert plan.fused_s <= min(c.fused_s for c in plan.candidates) * 1.005
    assert plan.stream_overlap_s == pytest.approx(min(c.stream_overlap_s for c in plan.candidates), rel=0.005)
    assert len(plan.candidates) == len(CHUNK_CHOICES) * len(ORDERS)
    assert plan.speedup == pytest.approx(plan.sequential_s / plan.fused_s)
    assert plan.sequential_s == pytest.approx(plan.comm_s + plan.compute_s)


@pytest.mark.parametrize("pattern", ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "gemm_rs", "ag_rmsnorm"])
def test_choose_answers_by_pattern_or_template(pattern):
    plan = choose(pattern, 4096, 2048, 2048, world=4, dtype="fp16", hardware="a100-nvlink")
    assert plan.fused_s > 0 and plan.reason.startswith(plan.bound)


def test_the_reason_names_the_bound_and_the_tradeoffs():
    plan = choose_for(AG, _with_link(bandwidth=100e9), world=2)
    assert plan.bound in ("comm-bound", "balanced")
    assert "fused hides" in plan.reason and f"{plan.chunks_per_rank} chunks per rank" in plan.reason
    assert "order ring" in plan.reason


def test_a_latency_bound_collective_is_called_so():
    plan = choose_for(make_workload("ag_gemm", 64, 4096, 4096), _with_link(alpha_s=1e-3), world=8)
    assert plan.bound == "latency-bound" and plan.chunks_per_rank == 1


def test_nccl_reports_the_sms_it_takes():
    plan = choose("gemm_rs", 8192, 8192, 4096, world=8, hardware="h100-nvlink", backend="nccl")
    assert plan.backend == "nccl" and "takes 16 of 132 SMs" in plan.reason


def test_chunk_counts_larger_than_a_shard_are_skipped():
    plan = choose("ag_gemm", 16, 128, 128, world=4, dtype="fp32", hardware="cpu-gloo")
    assert {c.chunks_per_rank for c in plan.candidates} == {1, 2, 3, 4}


def test_world_one_plans_without_communication():
    plan = choose("ag_gemm", 1024, 1024, 1024, world=1)
    assert plan.bound == "no communication" and plan.chunks_per_rank == 1 and len(plan.candidates) == 1


def test_a_ring_topology_picks_the_bidirectional_ring():
    ring_box = load_profile("h100-pcie").replace(("network", "topology"), "ring")
    assert choose_for(AG, ring_box, world=8).order == "bidirectional_ring"


def test_bad_names_raise_value_errors():
    with pytest.raises(ValueError, match="unknown template 'gemm'"):
        choose("gemm", 8, 8, 8, world=2)
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        choose("ag_gemm", 8, 8, 8, world=2, dtype="fp8")
    with pytest.raises(ValueError, match="unknown hardware profile"):
        choose("ag_gemm", 8, 8, 8, world=2, hardware="tpu")
