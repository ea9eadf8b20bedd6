"""The "tiles really blocked" oracle (issue 10): under Link(hold_until_waited=True) the receiving rank
keeps every remote chunk out of the receive buffer, its flag down, until a program of the running
kernel was seen polling that flag (runtime/transport/link.py, Hold). So each remote chunk lands while a tile is
waiting for it, and the numbers (poisoned buffers, new data every launch) prove the waits held."""
from __future__ import annotations

import pytest

from tests.world import read_check_workers as rw
from tests.world import shared, workers

LAUNCHES = 3
for _size in (2, 3):  # jobs of the shared worlds (tests/world/shared.py); the operator brings its own holding link
    shared.register(__name__, _size, {"hold oracle": (f"{rw.__name__}:run_hold_oracle", (LAUNCHES,))})


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3])
def test_every_remote_chunk_lands_while_a_tile_waits_for_it_and_results_are_exact(world):
    launches = LAUNCHES
    for rank, log in enumerate(shared.results(__name__, world, "hold oracle")):
        assert len(log) == launches, log
        for epoch, rec in enumerate(log, start=1):
            where = f"rank {rank} epoch {epoch}"
            assert rec["err"] <= workers.TOL["float32"], (where, rec)
            assert rec["unwaited"] == [], f"{where}: no program polled chunks {rec['unwaited']} before the hold's bound"
            assert rec["waited"] == rec["remote"], (where, rec)


@pytest.mark.world
def test_the_hold_oracle_flags_chunks_no_tile_waited_for():
    """Negative control (issue 26, item 3): tiles that read rank 0's rows only. Every other rank's
    chunks are reported unwaited on every rank; rank 0's, read by the other ranks' tiles, waited there."""
    from tests.world.harness import spawn

    world = 3
    for rank, log in enumerate(spawn(rw.run_hold_negative_control, world, 2, timeout_s=240)):
        for epoch, rec in enumerate(log, start=1):
            where = f"rank {rank} epoch {epoch}"
            assert rec["err"] <= workers.TOL["float32"], (where, rec)
            others = [g for g in range(2, 2 * world) if g // 2 != rank]  # chunks 0, 1 are rank 0's rows
            assert rec["unwaited"] == others, (where, rec)
            assert rec["waited"] == ([] if rank == 0 else [0, 1]), (where, rec)
