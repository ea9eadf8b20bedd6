"""An all-gather GEMM under an explicit chunk list (the full schedule form) on a CPU world of 3
ranks: a swizzled plan written verbatim in YAML (examples/explicit_all_gather.yaml: uneven slices,
chunks from alternating peers, relays, pulls, `after` waits) and a ring written out by `expand`.
Numerics against the torch reference; chunks land in the listed order; tiles run in that order and
never before the units they read have landed; a plan for another world size is a LaunchError."""
from __future__ import annotations

from pathlib import Path

import pytest

from syncopy.schedule import load_schedule
from tests.world import shared, workers

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "explicit_all_gather.yaml"
WORLD, ROWS, CHUNKS = 3, 21, 2  # 21 rows: ragged against the 16-row tiles and the 5 units

# A job of the shared world of 3 (tests/world/shared.py; the plan for another world size is refused
# before anything moves). The test checks that chunks land in the listed order: its operators get a
# link that keeps it (tests/world/harness.py's IN_ORDER).
shared.register(__name__, WORLD, {"explicit": (f"{workers.__name__}:run_explicit", (str(EXAMPLE), ROWS, True))})


def _results() -> list[dict]:
    return shared.results(__name__, WORLD, "explicit")


def _listed_arrivals(rank: int) -> list[int]:
    """Chunk ids rank `rank` expects, read straight off the YAML: transfers to it by (step, position)."""
    s = load_schedule(EXAMPLE)
    mine = sorted((t.step, i, t.chunk[0] * CHUNKS + t.chunk[1]) for i, t in enumerate(s.transfers) if t.dst == rank)
    return [g for _, _, g in mine]


@pytest.mark.world
@pytest.mark.parametrize("label", ["example", "expanded-ring"])
def test_explicit_schedule_runs_and_matches_torch(label):
    results = _results()
    bad = [f"rank {r}: {name}: error {err:.3g} > {tol:g}" for r, res in enumerate(results)
           for name, err, tol in res[label]["errors"] if not err <= tol]
    bad += [f"rank {r}: {p}" for r, res in enumerate(results) for p in res[label]["problems"]]
    assert not bad, "\n".join(bad)


@pytest.mark.world
def test_chunks_land_in_the_listed_order_and_tiles_follow_it():
    for rank, res in enumerate(_results()):
        r = res["example"]
        listed = _listed_arrivals(rank)
        assert r["arrival"] == listed, f"rank {rank}: planned {r['arrival']}, listed {listed}"
        assert listed not in ([g for d in (1, 2) for g in range((rank - d) % WORLD * 2, (rank - d) % WORLD * 2 + 2)],
                              [g for d in (1, 2) for g in range((rank + d) % WORLD * 2, (rank + d) % WORLD * 2 + 2)])  # not a ring
        local = {rank * CHUNKS + i for i in range(CHUNKS)}
        chunk_of = {f: g for g, flags in r["flags"].items() for f in flags}
        for tr in r["traces"]:
            where = f"rank {rank} epoch {tr.epoch}"
            landed = sorted(tr.arrivals, key=tr.arrivals.__getitem__)
            assert set(landed[:CHUNKS]) == local and landed[CHUNKS:] == listed, f"{where}: landed {landed}, listed {listed}"
            # Tiles run by the arrival position of the last unit they read (the explicit order)...
            run_order = [t for t, _, _ in sorted(tr.tile_starts, key=lambda x: x[1])]
            assert run_order == tr.tile_order, where
            need = [max((r["position"][f] for f in range(lo, hi + 1)), default=0) for lo, hi in (tr.tile_ranges[t] for t in run_order)]
            assert need == sorted(need), f"{where}: tiles not in the listed arrival order: {list(zip(run_order, need))}"
            assert len(set(need)) > 2, f"{where}: the shape does not separate the arrivals: {need}"
            # ... and none starts before every chunk it reads has landed.
            pos = {g: k for k, g in enumerate(landed, start=1)}
            for tile, seq, arrived in tr.tile_starts:
                lo, hi = tr.tile_ranges[tile]
                late = [chunk_of[f] for f in range(lo, hi + 1) if pos[chunk_of[f]] > arrived]
                assert not late, f"{where}: tile {tile} (start #{seq}) started with {arrived} chunks landed; it reads {late}"


@pytest.mark.world
def test_the_expanded_ring_lands_in_ring_order():
    for rank, res in enumerate(_results()):
        r = res["expanded-ring"]
        ring = [g for d in (1, 2) for g in range((rank - d) % WORLD * 2, (rank - d) % WORLD * 2 + 2)]
        assert r["arrival"] == ring
        for tr in r["traces"]:
            assert sorted(tr.arrivals, key=tr.arrivals.__getitem__)[CHUNKS:] == ring


@pytest.mark.world
def test_a_plan_for_another_world_size_is_a_launch_error_on_every_rank():
    for rank, res in enumerate(_results()):
        assert res["wrong_world"]["type"] == "LaunchError", f"rank {rank}: {res['wrong_world']}"
        assert res["wrong_world"]["str"] == (
            "the schedule says `world: 4` (its transfers are written for 4 ranks) but the group has 3 ranks; launch on 4 "
            "ranks or write the schedule for 3 (`syncopy expand` writes a named order for any world)")
