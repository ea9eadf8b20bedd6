"""The simulator on hand-computed cases and at the limits of the model."""
import math

import pytest

from syncopy.planner.hardware import HardwareProfile, load_profile, profile_from_dict
from syncopy.planner.simulate import ORDERS, Message, SmPool, Simulator, deliver, simulate
from syncopy.planner.workloads import TEMPLATES, make_workload

MS = 1e-3


def toy(bandwidth=1e6, alpha=0.0, sms=1, tile=(1, 1), topology="direct", **overheads) -> HardwareProfile:
    """One SM, 1 MFLOP/s, free memory: a 1-row tile with K=500 takes exactly 1 ms."""
    return profile_from_dict(
        {
            "name": "toy",
            "compute": {"sm_count": sms, "peak_flops": {"fp32": 1e6}, "memory_bandwidth": math.inf, "efficiency": 1.0, "tile": list(tile)},
            "links": {"nvlink": {"alpha_s": alpha, "bandwidth": bandwidth}},
            "network": {"link": "nvlink", "topology": topology},
            "backends": {"p2p": {"comm_sms": 0}},
            "default_backend": "p2p",
            "overheads": {"launch_s": 0.0, "stream_sync_s": 0.0, "signal_s": 0.0, "tile_sync_s": 0.0, **overheads},
        }
    )


def ideal(profile: HardwareProfile) -> HardwareProfile:
    """`profile` with a free link and no per-chunk overheads."""
    free = profile.replace(("links", profile.network.link, "alpha_s"), 0.0).replace(("links", profile.network.link, "bandwidth"), math.inf)
    for term in ("stream_sync_s", "signal_s", "tile_sync_s"):
        free = free.replace(("overheads", term), 0.0)
    return free


# --- building blocks ---------------------------------------------------------------------------


def test_deliver_serialises_a_resource_and_follows_dependencies():
    msgs = [
        Message("port", 2.0),
        Message("port", 2.0),
        Message("port", 1.0, deps=(0,), delay=0.5),  # ready at 2.5, port busy until 4
        Message(None, 0.0, ready=1.0, deps=(2,)),  # a join: no resource
    ]
    assert deliver(msgs) == [2.0, 4.0, 5.0, 5.0]


def test_deliver_takes_the_message_ready_first():
    # Listed second but ready earlier: the port does not sit idle waiting for the first.
    assert deliver([Message("port", 1.0, ready=5.0), Message("port", 1.0, ready=0.0)]) == [6.0, 1.0]


def test_sm_pool_waves_and_partial_waves():
    pool = SmPool(4)
    assert pool.run(4, 1.0) == 1.0
    assert pool.run(2, 1.0) == 2.0  # two SMs take a second tile
    assert pool.run(2, 1.0) == 2.0  # the two idle SMs fill in
    assert pool.run(1, 1.0, ready=10.0) == 11.0  # waits for its data
    assert pool.done == 11.0


# --- hand-computed: 2 ranks, 2 chunks per rank ---------------------------------------------------


def test_all_gather_two_ranks_two_chunks_exact():
    # Rows 0,1 local; rows 2,3 arrive as chunks of 1 row x 500 fp32 = 2000 B at 1 MB/s = 2 ms each.
    w = make_workload("ag_gemm", 4, 1, 500, "fp32")
    p = simulate(w, toy(), world=2, chunks_per_rank=2, order="ring")
    assert p.comm_s == pytest.approx(4 * MS)  # one 4000 B message
    assert p.compute_s == pytest.approx(4 * MS)  # 4 tiles of 1 ms
    assert p.sequential.total_s == pytest.approx(8 * MS)
    # fused: local tiles 0-2 ms, row 2 lands at 2 -> 2-3 ms, row 3 lands at 4 -> 4-5 ms
    assert p.fused.total_s == pytest.approx(5 * MS)
    assert p.fused.fill_s == pytest.approx(2 * MS)
    assert p.stream_overlap.total_s == pytest.approx(5 * MS)


def test_all_gather_two_ranks_two_chunks_with_overheads_exact():
    prof = toy(launch_s=0.5 * MS, stream_sync_s=0.25 * MS, signal_s=0.1 * MS, tile_sync_s=0.05 * MS)
    p = simulate(make_workload("ag_gemm", 4, 1, 500, "fp32"), prof, world=2, chunks_per_rank=2, order="ring")
    assert p.sequential.total_s == pytest.approx(8.5 * MS)  # 4 comm + 0.5 launch + 4 compute
    # fused: launch 0.5, local tiles of 1.05 to 2.6; row 2 usable at 2.1 -> 2.6-3.65; row 3 usable 4.1 -> 5.15
    assert p.fused.total_s == pytest.approx(5.15 * MS)
    # stream: local kernel 0.5-2.5; chunk at 2 -> max(2.5, 2.25) + 0.5 + 1 = 4.0; chunk at 4 -> 4.25 + 1.5 = 5.75
    assert p.stream_overlap.total_s == pytest.approx(5.75 * MS)


def test_reduce_scatter_two_ranks_two_chunks_exact():
    # Output rows 2,3 belong to rank 1 and are computed first; a 1-row partial (4 B) takes 2 ms.
    w = make_workload("gemm_rs", 4, 1, 500, "fp32")
    p = simulate(w, toy(bandwidth=2000.0), world=2, chunks_per_rank=2, order="ring")
    assert p.compute_s == pytest.approx(4 * MS)
    assert p.sequential.total_s == pytest.approx(8 * MS)  # 4 compute, then one 8 B message
    # fused: row 2 done at 1 -> sent 1-3; row 3 done at 2 -> sent 3-5; own rows done at 4
    assert p.fused.total_s == pytest.approx(5 * MS)
    assert p.fused.fill_s == pytest.approx(1 * MS)
    assert p.stream_overlap.total_s == pytest.approx(5 * MS)


def test_all_reduce_two_ranks_runs_reduce_scatter_then_gather():
    w = make_workload("gemm_ar", 4, 1, 500, "fp32")
    p = simulate(w, toy(bandwidth=2000.0), world=2, chunks_per_rank=1, order="ring")
    # sequential: 4 ms compute, RS of 2 rows (4 ms), then AG of the reduced 2 rows (4 ms)
    assert p.sequential.total_s == pytest.approx(12 * MS)
    # fused: rank 1's rows done at 2 -> RS 2-6; own rows done at 4, reduced at 6 -> AG 6-10
    assert p.fused.total_s == pytest.approx(10 * MS)


# --- limits ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("template", list(TEMPLATES))
@pytest.mark.parametrize("order", ORDERS)
def test_zero_communication_fused_equals_compute(template, order):
    w = make_workload(template, 64, 8, 500, "fp32")
    p = simulate(w, ideal(toy(sms=3, tile=(4, 4))), world=4, chunks_per_rank=2, order=order)
    assert p.comm_s == 0.0
    assert p.fused.total_s == pytest.approx(p.compute_s, rel=1e-12)
    assert p.sequential.total_s == pytest.approx(p.compute_s, rel=1e-12)


@pytest.mark.parametrize("template", ["ag_gemm", "a2a_gemm", "ag_rmsnorm"])
def test_zero_communication_on_a_real_profile(template):
    w = make_workload(template, 8192, 4096, 4096, "bf16")
    p = simulate(w, ideal(load_profile("h100-nvlink")), world=8, chunks_per_rank=4, order="ring")
    assert p.fused.total_s == pytest.approx(p.compute_s, rel=1e-12)


def test_infinite_bandwidth_leaves_only_latency():
    prof = toy(bandwidth=math.inf, alpha=2 * MS)
    p = simulate(make_workload("ag_gemm", 8, 1, 500, "fp32"), prof, world=4, chunks_per_rank=2, order="local_first")
    assert p.comm_s == pytest.approx(6 * MS)  # one message per peer, each paying alpha on the port
    assert p.fused.messages == 6
    # fused: 2 local tiles, then one tile per chunk as it lands at 2, 4, ... 12 ms; the last ends at 13
    assert p.fused.total_s == pytest.approx(13 * MS)


def test_one_tile_waits_for_everything_so_fused_is_sequential_plus_overhead():
    # A single tile spans every chunk: nothing can overlap, fused pays the signal and the wait check.
    prof = toy(signal_s=0.1 * MS, tile_sync_s=0.05 * MS, tile=(4, 1))
    for template in ("ag_gemm", "gemm_rs"):
        p = simulate(make_workload(template, 4, 1, 500, "fp32"), prof, world=2, chunks_per_rank=1, order="ring")
        assert p.fused.total_s == pytest.approx(p.sequential.total_s + 0.15 * MS)


def test_one_tile_fused_hides_the_launch_behind_the_transfer():
    prof = toy(launch_s=0.5 * MS, signal_s=0.1 * MS, tile=(4, 1))
    p = simulate(make_workload("ag_gemm", 4, 1, 500, "fp32"), prof, world=2, chunks_per_rank=1, order="ring")
    # the fused kernel is launched while the chunk is in flight; sequential launches after it
    assert p.fused.total_s == pytest.approx(p.sequential.total_s - 0.5 * MS + 0.1 * MS)


def test_world_one_has_no_communication():
    p = simulate(make_workload("ag_gemm", 64, 8, 500, "fp32"), toy(tile=(4, 4)), world=1, chunks_per_rank=1)
    assert p.comm_s == 0.0 and p.fused.messages == 0
    assert p.fused.total_s == pytest.approx(p.compute_s)


def test_communication_sms_slow_the_fused_kernel():
    w = make_workload("ag_gemm", 8192, 4096, 4096, "bf16")
    prof = ideal(load_profile("h100-nvlink"))
    p2p = simulate(w, prof, world=8, chunks_per_rank=2, backend="p2p")
    nccl = simulate(w, prof, world=8, chunks_per_rank=2, backend="nccl")
    assert nccl.sequential.total_s == p2p.sequential.total_s  # sequential has every SM
    assert nccl.fused.total_s > p2p.fused.total_s * 1.05  # 16 of 132 SMs gone


def test_small_per_chunk_kernels_lose_waves_in_the_stream_baseline():
    w = make_workload("ag_gemm", 8192, 4096, 4096, "bf16")
    prof = ideal(load_profile("h100-nvlink"))
    one, many = (simulate(w, prof, world=8, chunks_per_rank=c) for c in (1, 16))
    assert many.stream_overlap.total_s > one.stream_overlap.total_s * 1.5
    assert many.fused.total_s == pytest.approx(one.fused.total_s)


def test_ring_topology_favours_the_bidirectional_ring():
    w = make_workload("ag_gemm", 8192, 4096, 4096, "bf16")
    prof = load_profile("h100-pcie").replace(("network", "topology"), "ring")
    times = {o: simulate(w, prof, world=8, chunks_per_rank=2, order=o).fused.total_s for o in ORDERS}
    assert times["bidirectional_ring"] < times["ring"] < times["local_first"]


def test_pipeline_fill_shrinks_with_more_chunks():
    w = make_workload("ag_gemm", 8192, 4096, 4096, "bf16")
    prof = load_profile("h100-nvlink")
    fills = [simulate(w, prof, world=8, chunks_per_rank=c).fused.fill_s for c in (1, 2, 4)]
    assert fills[0] > fills[1] > fills[2]


def test_bad_inputs_raise_value_errors_that_say_what_to_change():
    w = make_workload("ag_gemm", 8, 1, 500, "fp32")
    with pytest.raises(ValueError, match="chunks_per_rank <= 4"):
        simulate(w, toy(), world=2, chunks_per_rank=5)
    with pytest.raises(ValueError, match="unknown order 'zigzag'"):
        simulate(w, toy(), world=2, chunks_per_rank=1, order="zigzag")
    with pytest.raises(ValueError, match="--world <= 8"):
        Simulator(make_workload("ag_gemm", 64, 8, 8), load_profile("h100-nvlink"), world=16)
    with pytest.raises(ValueError, match="M >= world"):
        Simulator(make_workload("ag_gemm", 2, 8, 8), toy(), world=4)
    with pytest.raises(ValueError, match="has no backend 'mpi'"):
        Simulator(w, toy(), world=2, backend="mpi")


# --- cost that does not grow with the problem --------------------------------------------------


def _spans_tile_by_tile(blocks, rows, tile_m):
    """What _row_tiles stands for: the blocks every row tile touches, one tile at a time."""
    from bisect import bisect_right

    starts = [b.start for b in blocks]
    return [blocks[bisect_right(starts, t) - 1 : bisect_right(starts, min(t + tile_m, rows) - 1)] for t in range(0, rows, tile_m)]


@pytest.mark.parametrize("rows, world, chunks, tile_m", [
    (1000, 3, 4, 7), (64, 2, 1, 64), (65, 2, 3, 128), (4096, 8, 8, 128), (999, 4, 5, 1), (1000, 4, 2, 250), (37, 3, 2, 5),
])
def test_row_tile_runs_are_the_tiles_one_by_one(rows, world, chunks, tile_m):
    from syncopy.planner.simulate import _layout, _row_tiles

    blocks = _layout(rows, world, chunks)
    runs = _row_tiles(blocks, rows, tile_m)
    assert [span for span, count in runs for _ in range(count)] == _spans_tile_by_tile(blocks, rows, tile_m)
    assert len(runs) <= 2 * len(blocks) + 1


def test_planning_steps_do_not_grow_with_rows():
    # A billion rows at 8 ranks: as many row-tile runs (what the fused simulation steps through) as
    # a thousand, where it used to walk all 7.8 million row tiles.
    from syncopy.planner.simulate import _layout, _row_tiles

    for rows in (1000 * 8, 10**9, 10**15):
        blocks = _layout(rows, 8, 4)
        assert len(_row_tiles(blocks, rows, 128)) <= 2 * len(blocks) + 1
    p = simulate(make_workload("gemm_rs", 10**9, 8, 8), load_profile("h100-nvlink"), 8, 4)
    assert p.fused.total_s > p.compute_s > 0
