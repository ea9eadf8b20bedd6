"""reduce_scatter and all_reduce on CPU worlds: the producer side. The kernel stores its partial
tiles and announces each finished chunk; the runtime sends, reduces and (all_reduce) gathers chunks
while later tiles still compute. Numerics against mm + reduce_scatter / all_reduce; two launches per
operator (counters and flags never reset); NaN-poisoned buffers; a lost contribution is a
SyncopyTimeout naming rank, chunk and epoch."""
from __future__ import annotations

import pytest

from tests.world.harness import spawn
from tests.world import precondition_reduce, shared, workers
from tests.world.workers import once
from tests.oracles import worst

CASES = {
    2: [
        dict(template="gemm_rs", chunks=1, order="ring", dtype="float32", shape=(64, 32, 40)),
        dict(template="gemm_rs", chunks=3, order="local_first", dtype="float16", shape=(96, 48, 32)),
        dict(template="gemm_ar", chunks=2, order="ring", dtype="float32", shape=(70, 32, 24)),
        dict(template="gemm_ar", chunks=2, order="local_first", dtype="float32", shape=(45, 32, 24), one_shot=True),
    ],
    3: [
        dict(template="gemm_rs", chunks=2, order="bidirectional_ring", dtype="float32", shape=(96, 32, 24)),
        dict(template="gemm_ar", chunks=1, order="local_first", dtype="float32", shape=(50, 32, 24)),
        dict(template="gemm_ar", chunks=3, order="ring", dtype="float16", shape=(96, 32, 32)),
    ],
    4: [
        dict(template="gemm_rs", chunks=2, order=[3, 1, 2], dtype="float32", shape=(128, 32, 24)),
        dict(template="gemm_ar", chunks=2, order="bidirectional_ring", dtype="float32", shape=(74, 32, 24)),
    ],
}


# Jobs of the shared worlds (tests/world/shared.py: spawning costs seconds): the matrix (with the rows
# each launch took), world 2's overlap and descriptor runs. The lost contribution spawns its own world:
# its timeout breaks the group.
for _size in CASES:
    shared.register(__name__, _size, {"matrix": (f"{precondition_reduce.__name__}:run_producer_matrix", (CASES[_size],))})
shared.register(__name__, 2, {"overlap": ("run_producer_overlap", (0.02,)), "descriptors": ("run_producer_descriptors", (64,))})


def _matrix(world: int) -> list:
    return [r["matrix"] for r in shared.results(__name__, world, "matrix")]


def _name(case: dict) -> str:
    return f"{case['template']} {case['order']} chunks={case['chunks']} {case['dtype']} {case['shape']}"


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3, 4])
def test_reduce_patterns_match_torch_on_every_rank(world):
    results = _matrix(world)
    for rank, cases in enumerate(results):
        for r in cases:
            assert r["ok"], f"rank {rank}: {_name(r['case'])}: errors {r['errs']}"
            assert r["epochs"] == 2
            m, n, _ = r["case"]["shape"]
            if r["case"]["template"] == "gemm_rs":
                assert r["shape"] == [m // world, n], "reduce_scatter returns this rank's rows"
            else:
                assert r["shape"] == [m, n], "all_reduce returns the whole sum"


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_chunk_of_the_matrix_was_taken_after_its_last_write(world):
    """The premise of the test above (issue 26): each chunk is taken (its rows read to be sent or
    reduced) when its flag rises, so a chunk announced before its last store would leave incomplete
    and the numbers would show it. On every launch of every case, every chunk was taken, and the
    rows taken equal the kernel's final rows (tests/world/precondition_reduce.py)."""
    for rank, r in enumerate(shared.results(__name__, world, "matrix")):
        launches = r["taken"]
        assert len(launches) == 2 * len(CASES[world]), (rank, launches)
        for k, t in enumerate(launches):
            where = f"rank {rank}: {_name(CASES[world][k // 2])} launch {k % 2 + 1}"
            assert t["taken"] == list(range(t["chunks"])), f"{where}: chunks never taken: {t}"
            assert t["stale"] == [], f"{where}: chunks taken before their last write: {t['stale']}"


@pytest.mark.world
def test_all_reduce_algorithm_follows_size_and_order():
    two = _matrix(2)[0]
    assert two[2]["algorithms"] == ["ring"]
    assert two[3]["algorithms"] == ["one_shot"]
    three = _matrix(3)[0]
    assert three[1]["algorithms"] == ["direct"]


def _overlap() -> list:
    return shared.results(__name__, 2, "overlap")


@pytest.mark.world
def test_chunks_leave_while_later_tiles_still_compute():
    """gemm_rs, 2 ranks, 2 chunks per rank, 8x2 tiles: the chunk for the peer is finished first, and
    its partial leaves while the tiles of this rank's own rows are still running."""
    results = _overlap()
    for rank, r in enumerate(results):
        assert worst(r["errs"]) <= 1e-4, f"rank {rank}: {r['errs']}"
        for tr in r["traces"]:
            where = f"rank {rank} epoch {tr.epoch}\n{tr.summary()}"
            peer = 1 - rank
            peer_chunks = {peer * 2, peer * 2 + 1}
            assert set(tr.sent) == peer_chunks, where
            # Send order: the peer's chunks are finished before this rank's own.
            assert max(tr.ready[g] for g in peer_chunks) <= min(tr.ready[g] for g in (rank * 2, rank * 2 + 1)), where
            # The fused path: the partial left before the kernel was done...
            assert tr.sent_before_end(), where
            # ...and tiles started after it had left (tile_starts record how many chunks were sent).
            assert any(sent > 0 for _, _, sent in tr.tile_starts), where
            assert len(tr.tile_starts) == 16 and sorted(t for t, _, _ in tr.tile_starts) == list(range(16))


@once
def _drop() -> list:
    return spawn(workers.run_producer_drop, 3, (2, 1), 3.0, timeout_s=180)


@pytest.mark.world
def test_lost_contribution_is_a_timeout_naming_rank_chunk_and_epoch():
    results = _drop()
    # Rank 2 never sends its partial of chunk 1 (rank 0's second chunk): rank 0 times out.
    r0 = results[0]
    assert r0["type"] == "SyncopyTimeout", r0
    assert (r0["rank"], tuple(r0["chunk"]), r0["epoch"]) == (0, (0, 1), 1), r0
    assert "rank 0 waited 3s for chunk 1 of rank 0 (epoch 1)" in r0["str"] and "from rank 2 never came" in r0["str"], r0["str"]
    for rank in (1, 2):
        assert results[rank]["type"] is None, results[rank]


@pytest.mark.world
def test_descriptor_stores_announce_their_rows():
    """The producer pass follows `desc.store([row, col], v)` like a pointer store: its row coordinate
    binds the tile to chunks (rows 64 over 2 ranks, 2 chunks each, 16-row tiles)."""
    for rank, runs in enumerate(shared.results(__name__, 2, "descriptors")):
        assert [p for p, _ in runs] == ["reduce_scatter"] * 2 + ["all_reduce"] * 2
        for pattern, err in runs:
            assert err <= 1e-4, f"rank {rank} {pattern}: error {err}"
