"""Persistent GEMMs (programs loop over tiles, A read through tensor descriptors or pointers, tile
coordinates from @triton.jit helpers) fused through the decorator on CPU worlds of 2 and 3 ranks,
against the torch reference; the traces show that each tile waits for its own chunks at its start
and that tiles run in chunk-arrival order across programs.
"""
from __future__ import annotations

import pytest

from tests.world import persistent_workers as pw
from tests.world import shared


def _case(id, kernel, chunks, rows, programs, order="ring", dtype="float32", latency_s=0.0):
    return dict(id=id, kernel=kernel, chunks=chunks, rows=rows, programs=programs, order=order, dtype=dtype, latency_s=latency_s)


CASES = {
    2: [
        _case("sweep-c1", "sweep_tiles", 1, 37, 3),
        _case("sweep-c3-fp16", "sweep_tiles", 3, 37, 4, dtype="float16"),
        _case("tutorial-c2", "tutorial_ws", 2, 40, 3),
        _case("rolling-c2", "rolling_tiles", 2, 37, 3),
        _case("flat-ptr-c2", "flat_k_steps", 2, 37, 3),
        _case("step-first-c2", "stepping_first", 2, 37, 3),
        _case("flat-desc-c3", "flat_k_desc", 3, 37, 3),
        _case("sweep-latency", "sweep_tiles", 2, 64, 2, latency_s=0.15),
    ],
    3: [
        _case("sweep-c2-bidir", "sweep_tiles", 2, 29, 4, order="bidirectional_ring"),
        _case("tutorial-c1-fp16", "tutorial_ws", 1, 37, 5, dtype="float16"),
        _case("rolling-c3-direct", "rolling_tiles", 3, 29, 4, order="local_first"),
        _case("flat-desc-c2", "flat_k_desc", 2, 37, 5),
        _case("tutorial-latency", "tutorial_ws", 2, 48, 3, latency_s=0.1),
    ],
}
TILE_START = {"sweep_tiles", "tutorial_ws", "rolling_tiles", "flat_k_desc"}  # flat_k_steps waits every K step
NOT_REMAPPED = {"stepping_first"}  # its while test compares the tile id: per-tile waits, its own order


for _size in CASES:  # jobs of the shared worlds (tests/world/shared.py)
    shared.register(__name__, _size, {"cases": (f"{pw.__name__}:run_cases", (CASES[_size],))})


def _world(world: int) -> list[dict]:
    return shared.results(__name__, world, "cases")


def _cases_with_tile_waits(world):
    return [c for c in CASES[world] if c["kernel"] in TILE_START]


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3], ids=["world2", "world3"])
def test_persistent_kernels_match_torch(world):
    results = _world(world)
    problems = [p for r in results for p in r["problems"]]
    assert not problems, "\n".join(problems)
    bad = [f"rank {rank}: {label}: {err:.3g} > {tol:g}" for rank, r in enumerate(results) for label, err, tol in r["errors"] if not err <= tol]
    assert not bad, "\n".join(bad)
    assert len(results[0]["errors"]) == 2 * len(CASES[world])


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3], ids=["world2", "world3"])
def test_every_tile_waits_for_its_own_chunks_at_its_start(world):
    for rank, r in enumerate(_world(world)):
        for case in _cases_with_tile_waits(world):
            info = r["tables"][case["id"]]
            n = info["table"][0]
            assert info["remap"] and info["tile_start"] and info["probe"], case["id"]
            assert n == len(info["ranges"]) > case["programs"], case["id"]  # per tile, not per program
            for trace in r["traces"][case["id"]]:
                starts = trace.tile_starts
                assert sorted(t for t, _, _ in starts) == list(range(n)), (case["id"], starts)
                landed = sorted(trace.arrivals, key=trace.arrivals.__getitem__)
                for tile, _, arrived in starts:
                    lo, hi = info["ranges"][tile]
                    needs = set(range(lo, hi + 1))
                    assert needs <= set(landed[:arrived]), f"rank {rank} {case['id']}: tile {tile} needs {needs}, started with {landed[:arrived]}"


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3], ids=["world2", "world3"])
def test_tiles_run_in_arrival_order_across_programs(world):
    for rank, r in enumerate(_world(world)):
        for case in _cases_with_tile_waits(world):
            info = r["tables"][case["id"]]
            n, table = info["table"][0], info["table"]
            forward, inverse = table[1 : 1 + n], table[1 + n : 1 + 2 * n]
            assert sorted(forward) == list(range(n)) and all(inverse[forward[s]] == s for s in range(n)), case["id"]
            pos = info["position"]
            keys = [max(pos[g] for g in range(lo, hi + 1)) for lo, hi in (info["ranges"][t] for t in info["exec_order"])]
            assert keys == sorted(keys), (case["id"], keys)
            for trace in r["traces"][case["id"]]:
                # The interpreter runs programs one after another; slots were placed so that the
                # tiles still start in exactly the planned (arrival) order.
                ran = [t for t, _, _ in sorted(trace.tile_starts, key=lambda s: s[1])]
                assert ran == info["exec_order"] == trace.tile_order, case["id"]


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3], ids=["world2", "world3"])
def test_tiles_overlap_with_the_gather(world):
    case = next(c for c in CASES[world] if c["latency_s"])
    for rank, r in enumerate(_world(world)):
        for trace in r["traces"][case["id"]]:
            total = trace.total_chunks
            early = [t for t, _, arrived in trace.tile_starts if arrived < total]
            late = [t for t, _, arrived in trace.tile_starts if arrived == total]
            assert early, f"rank {rank}: no tile started before the last chunk landed\n{trace.summary()}"
            assert late, f"rank {rank}: every tile started early, so nothing waited\n{trace.summary()}"


@pytest.mark.world
def test_loop_that_cannot_be_remapped_still_waits_per_tile_in_its_own_order():
    for r in _world(2):
        info = r["tables"]["step-first-c2"]
        n, table = info["table"][0], info["table"]
        assert info["tile_start"] and info["probe"] and not info["remap"]
        assert table[1 : 1 + n] == list(range(n))  # identity: the kernel's own order
        for trace in r["traces"]["step-first-c2"]:
            assert sorted(t for t, _, _ in trace.tile_starts) == list(range(n))
            landed = sorted(trace.arrivals, key=trace.arrivals.__getitem__)
            for tile, _, arrived in trace.tile_starts:
                lo, hi = info["ranges"][tile]
                assert set(range(lo, hi + 1)) <= set(landed[:arrived])


@pytest.mark.world
def test_flat_loop_with_pointer_reads_waits_every_step_without_a_table():
    # Its rows depend on `ki`, which changes every K step, so the wait stays at the read (correct,
    # not per tile): no probe, no table, no remap, no tile-start records.
    for r in _world(2):
        info = r["tables"]["flat-ptr-c2"]
        assert not info["tile_start"] and not info["remap"] and not info["probe"]
        assert info["table"][0] == 0 and info["ranges"] == []
        assert all(t.tile_starts == [] for t in r["traces"]["flat-ptr-c2"])
