"""All-gather fused into local kernels, on CPU worlds (gloo + the Triton interpreter), against the
torch reference (`dist.all_gather_into_tensor` + torch math).

The tests of this file run as jobs of the shared world of their size (tests/world/shared.py: one
spawn per world size for the files that share one, spawning costs seconds): the matrix, then the
tile, ragged, overlap and reordering jobs of that size, once per session; each test reads its own
job; every rank reports (case, error) so a failure names the case, and a job that raised fails
only its own tests.
"""
from __future__ import annotations

import pytest

from tests.world import shared, workers
from tests.world.cases import CHUNKS, DTYPES, KERNELS, ROWS, WORLDS, matrix_cases, order_id, order_names

world_ids = [f"world{w}" for w in WORLDS]
TILE_ORDERS = {2: ["ring", "local_first"], 3: ["bidirectional_ring", [2, 1]]}
# The tile jobs' shards: 7 rows in 3 chunks of 2, 2 and 3 rows under 4-row tiles (8-row ones on the
# 3-D grid), so every tile spans several chunks, some the rank boundary, and the last one is partial.
TILE_ROWS = 7
OVERLAP_WORLD = 3
# Ragged shards: 509 rows per rank (prime) in 3 chunks of 169, 170 and 170 rows, 64-row tiles. The
# remainders of 4091 rows, the size this ran with before (rows % 3 == 2, neither rows nor 2 * rows a
# multiple of 64), at an eighth of the interpreted tiles; test_ragged_shape_straddles checks the layout.
RAGGED_ROWS, RAGGED_CHUNKS = 509, 3
REORDER_LAUNCHES = 4


def _jobs(world: int) -> dict:
    """What world `world` runs, in order (workers.run_jobs): {name: (rank function, args)}."""
    jobs = {"matrix": ("run_matrix", (matrix_cases(world),))}
    if world in TILE_ORDERS:
        jobs["tiles"] = ("run_tile_tags", (TILE_ROWS, 3, TILE_ORDERS[world]))
    if world == 2:
        jobs["ragged"] = ("run_big_ragged", (RAGGED_ROWS, RAGGED_CHUNKS, ["grouped", "gemm2d"]))
    if world == OVERLAP_WORLD:
        for kernel in ("gemm2d", "grouped"):
            jobs[f"overlap {kernel}"] = ("run_overlap", (kernel, 2, 0.05, 37))
        jobs["reorder"] = ("run_reorder_oracle", (REORDER_LAUNCHES,))
    return jobs


for _size in WORLDS:
    shared.register(__name__, _size, _jobs(_size))


def _failures(per_rank_errors: list[list[tuple]]) -> list[str]:
    bad = []
    for rank, errors in enumerate(per_rank_errors):
        for label, err, tol in errors:
            if not err <= tol:
                bad.append(f"rank {rank}: {label}: error {err:.3g} > {tol:g}")
    return bad


# --------------------------------------------------------------------------------------------------
# 1. The matrix: world sizes x kernels x chunk counts x orders x ragged/aligned rows x dtypes x epochs
# --------------------------------------------------------------------------------------------------
def _matrix(world: int) -> list[dict]:
    return shared.results(__name__, world, "matrix")


def test_matrix_covers_the_space():
    """The covering design in cases.py gives, up to world 2, every kernel every chunk count, every
    order (world 2), both row counts and both dtypes in each case, and every (order, chunks) pair;
    worlds 3 and 4 every order with two chunk counts, every chunk count with two orders, every
    kernel on ragged and aligned rows, and together every (order, chunks), (kernel, order) and
    (kernel, chunks) pair on more than two ranks."""
    for world in WORLDS:
        cases = matrix_cases(world)
        full = world < 3  # worlds 3 and 4 run half the (order, chunks) pairs each (cases.chunk_counts)
        for kernel in KERNELS:
            mine = [c for c in cases if c["kernel"] == kernel]
            variants = {v for c in mine for v in c["variants"]}
            assert {r for r, _ in variants} == set(ROWS[kernel]), (world, kernel, variants)
            if full:
                assert {c["chunks"] for c in mine} == set(CHUNKS), (world, kernel)
                assert variants == {(r, d) for r in ROWS[kernel] for d in DTYPES}, (world, kernel, variants)
                for c in mine:
                    assert {r for r, _ in c["variants"]} == set(ROWS[kernel]), c
                    assert {d for _, d in c["variants"]} == set(DTYPES), c
            if world > 1 and full:
                assert {order_id(c["order"]) for c in mine} == {order_id(o) for o in order_names(world)}, (world, kernel)
        pairs = {(order_id(c["order"]), c["chunks"]) for c in cases}
        if world > 1 and full:
            assert pairs == {(order_id(o), c) for o in order_names(world) for c in CHUNKS}
        elif world > 1:
            assert len(pairs) == len(cases) == 2 * len(order_names(world)), pairs
            assert {o for o, _ in pairs} == {order_id(o) for o in order_names(world)}, pairs
            assert all(sum(c == n for _, c in pairs) == 2 for n in CHUNKS), pairs
        for kernel in ("grouped", "gemm2d"):
            ragged = ROWS[kernel][0]
            assert ragged % workers.GEMM_TILE and all(ragged % c for c in CHUNKS if c > 1)
            assert all(w * ragged % workers.GEMM_TILE for w in WORLDS)  # the gathered tensor's last tile is partial
            assert ROWS[kernel][1] % workers.GEMM_TILE == 0
    # Worlds 3 and 4 together: orders by their index in order_names (the explicit order differs by world).
    halves = [(c, [order_id(o) for o in order_names(w)].index(order_id(c["order"]))) for w in (3, 4) for c in matrix_cases(w)]
    assert {(i, c["chunks"]) for c, i in halves} == {(i, n) for i in range(4) for n in CHUNKS}
    assert {(c["kernel"], i) for c, i in halves} == {(k, i) for k in KERNELS for i in range(4)}
    assert {(c["kernel"], c["chunks"]) for c, _ in halves} == {(k, n) for k in KERNELS for n in CHUNKS}


@pytest.mark.world
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("world", WORLDS, ids=world_ids)
def test_fused_matches_all_gather_then_kernel(world, kernel):
    results = _matrix(world)
    cases = [c for c in matrix_cases(world) if c["kernel"] == kernel]
    ids = {c["id"] for c in cases}
    errors = [[e for e in r["errors"] if e[0].split(" ")[0] in ids] for r in results]
    problems = [f"rank {rank}: {p}" for rank, r in enumerate(results) for p in r["problems"] if p.split(":")[0] in ids]
    # Every case ran both epochs for every shard shape, on every rank.
    expected = sum(2 * len(c["variants"]) for c in cases)
    assert [len(e) for e in errors] == [expected] * world, errors
    bad = _failures(errors) + problems
    assert not bad, f"{len(bad)} failing (world {world}, kernel {kernel}):\n" + "\n".join(bad)
    if world > 1:
        _assert_most_remote_tiles_waited([[w for w in r["waits"] if w[0].split(" ")[0] in ids] for r in results])


def _assert_most_remote_tiles_waited(per_rank_waits: list[list[tuple]]) -> None:
    """The precondition of the numbers above: the rows most remote tiles read were not there yet when
    the kernel started (the link of tests/world/harness.py paces arrivals on each rank's own clock),
    in first launches and in later ones alike: those tiles could not have had their rows without
    their waits, and rows read without one were NaN. Otherwise a tile that read rows it did not
    wait for could pass by luck. (Tiles that started while later chunks were still in flight are
    counted too, for the message: under the interpreter tiles are slow against a fast link, so
    few do; test_overlap_trace checks that overlap with a slower link.)"""
    for later in (False, True):
        launches = [w for waits in per_rank_waits for w in waits if w[0].endswith("epoch1") != later]
        remote, late, in_flight = (sum(w[i] for w in launches) for i in (1, 2, 3))
        what = "later launches" if later else "first launches"
        assert remote and late > remote / 2, (
            f"{what}: of {remote} remote tiles, the rows of only {late} landed after the kernel started ({in_flight} started "
            "while later chunks were in flight); the link is too fast to test the waits:\n"
            + "\n".join(f"{label}: {r} remote, {l} landed late, {f} in flight" for label, r, l, f in launches))


def _plan_params():
    for world in (1, 2, 3, 4, 5):
        for order in order_names(world) + ([list(range(1, world))] if world > 2 else []):
            yield pytest.param(world, order, id=f"world{world}-{order_id(order)}")


@pytest.mark.parametrize("world, order", list(_plan_params()))
def test_plan_sends_match_receives(world, order):
    """Across the ranks of a world, every send node has exactly one matching receive node (same chunk,
    same source and destination) and every rank receives each remote chunk exactly once: an unmatched
    send never completes, an unmatched receive times out."""
    from collections import Counter

    from syncopy.runtime.state import plan as planning
    from syncopy.schedule import load_schedule

    for chunks in (1, 3):
        sched = load_schedule(workers.schedule("grouped", chunks, order))
        plans = [planning.all_gather(sched, r, world, 7) for r in range(world)]
        sends = Counter((n.chunk, p.rank, n.peer) for p in plans for n in p.sends())
        recvs = Counter((n.chunk, n.peer, p.rank) for p in plans for n in p.recvs())
        assert sends == recvs, f"chunks={chunks}: sends without a receive {sends - recvs}, receives without a send {recvs - sends}"
        for p in plans:
            remote = sorted(g for g in range(world * chunks) if g // chunks != p.rank)
            assert sorted(n.chunk for n in p.recvs()) == remote, f"rank {p.rank}"
            assert sorted(p.arrival) == remote, f"rank {p.rank}"


# --------------------------------------------------------------------------------------------------
# 2. Ragged shards the size users meet them
# --------------------------------------------------------------------------------------------------
def test_ragged_shape_straddles_chunks_and_ranks():
    """The ragged shape is ragged the ways users meet: chunks of unequal size, whole tiles inside one
    chunk, tiles that straddle a chunk boundary within a rank and the rank boundary, a partial last tile."""
    from syncopy.schedule.chunks import chunk_bounds

    rows, tile = RAGGED_ROWS, workers.RAGGED_TILE_M
    assert all(rows % n for n in (2, 3, 4, 16, 32, tile)) and rows % RAGGED_CHUNKS == 4091 % RAGGED_CHUNKS
    assert len({hi - lo for lo, hi in chunk_bounds(rows, RAGGED_CHUNKS)}) == 2
    starts = {src * rows + lo for src in range(2) for lo, _ in chunk_bounds(rows, RAGGED_CHUNKS)}
    crossed = [sorted(b for b in starts if t < b < t + tile) for t in range(0, 2 * rows, tile)]
    assert [] in crossed  # a tile inside one chunk
    assert any(b % rows for c in crossed for b in c)  # a chunk boundary inside a rank's rows
    assert any(rows in c for c in crossed)  # the rank boundary
    assert (2 * rows) % tile


@pytest.mark.world
def test_ragged_rows_per_rank():
    """509 rows per rank (prime: no tile size or chunk count divides it), 3 chunks per rank, 64-row
    tiles: tiles straddle chunk boundaries and the rank boundary. GEMMs with N = K = 16 keep the
    interpreter fast (the row kernel would need one program per row)."""
    results = shared.results(__name__, 2, "ragged")
    bad = _failures([r["errors"] for r in results])
    assert not bad, "\n".join(bad)
    assert all(len(r["errors"]) == 4 for r in results)


# --------------------------------------------------------------------------------------------------
# 3. Overlap evidence
# --------------------------------------------------------------------------------------------------
def _arrival_rank(trace) -> dict[int, int]:
    """1-based position of each chunk in the order chunks landed on this rank."""
    return {g: k for k, g in enumerate(sorted(trace.arrivals, key=trace.arrivals.__getitem__), start=1)}


def _chunks(rng: tuple[int, int]) -> range:
    return range(rng[0], rng[1] + 1)


def _overlap(world: int, kernel: str) -> list[dict]:
    return shared.results(__name__, world, f"overlap {kernel}")


@pytest.mark.world
@pytest.mark.parametrize("kernel", ["gemm2d", "grouped"])
def test_overlap_trace(kernel):
    """World 3, ring, 50 ms per chunk on the emulated link: tiles start while later chunks are still
    in flight, no tile starts before every chunk it reads has landed, and local tiles run first."""
    world = OVERLAP_WORLD
    results = _overlap(world, kernel)
    bad = _failures([r["errors"] for r in results])
    assert not bad, "\n".join(bad)
    remote_compute_overlapped = 0
    # Overlap: in every launch some rank started tiles before its last chunk landed. (Not required of
    # every rank: senders do not wait for receivers, so a rank the OS scheduled late can find all its
    # chunks already there.)
    for e in range(2):
        summaries = "\n".join(r["traces"][e].summary() for r in results)
        assert any(r["traces"][e].overlapped_tiles() > 0 for r in results), f"epoch {e + 1}: no overlap\n{summaries}"
    for rank, r in enumerate(results):
        local = set(r["local_chunks"])
        for tr in r["traces"]:
            where = f"rank {rank} epoch {tr.epoch}"
            assert tr.total_chunks == world * 2
            assert sorted(tr.arrivals) == list(range(tr.total_chunks)), where
            n_tiles = len(tr.tile_ranges)
            assert sorted(t for t, _, _ in tr.tile_starts) == list(range(n_tiles)), f"{where}: not every tile started once"
            assert [s for _, s, _ in tr.tile_starts] == list(range(n_tiles)), where
            # Chunks landed in the planned order: local ones first, then the ring's.
            landed = sorted(tr.arrivals, key=tr.arrivals.__getitem__)
            assert set(landed[: len(local)]) == local, f"{where}: {landed}"
            assert landed[len(local):] == r["arrival_plan"], f"{where}: landed {landed}, planned {r['arrival_plan']}"
            # Safety: every chunk a started tile reads had landed when it started. The trace's
            # The "arrived" count is bumped before a flag is raised
            # (test_trace_counts_a_chunk_before_raising_its_flag), so every chunk a tile reads ranks
            # within the count it recorded.
            pos = _arrival_rank(tr)
            for tile, seq, arrived in tr.tile_starts:
                need = _chunks(tr.tile_ranges[tile])
                late = [g for g in need if pos[g] > arrived]
                assert not late, (
                    f"{where}: tile {tile} (start #{seq}) reads chunks {list(need)} but only {arrived} "
                    f"chunks had landed; {late} came later\n{tr.summary()}")
                if arrived < tr.total_chunks and not set(need) <= local:
                    remote_compute_overlapped += 1
            # Local tiles (all their chunks local) run first, and tiles run in planned arrival order.
            run_order = [t for t, _, _ in sorted(tr.tile_starts, key=lambda x: x[1])]
            assert run_order == tr.tile_order, where
            is_local = [set(_chunks(tr.tile_ranges[t])) <= local for t in run_order]
            n_local = sum(is_local)
            assert n_local > 0, f"{where}: no tile reads only local rows; the test shape is wrong"
            assert all(is_local[:n_local]), f"{where}: a remote tile ran before a local one: {run_order}"
            plan_pos = {g: 0 for g in local} | {g: k for k, g in enumerate(r["arrival_plan"], start=1)}
            need_pos = [max((plan_pos[g] for g in _chunks(tr.tile_ranges[t])), default=0) for t in run_order]
            assert need_pos == sorted(need_pos), f"{where}: tiles not in arrival order: {list(zip(run_order, need_pos))}"
    # Compute on remote data overlapped with later transfers somewhere (not only the local tiles).
    assert remote_compute_overlapped > 0


def test_trace_counts_a_chunk_before_raising_its_flag():
    """A tile that sees chunk g's flag and then reads the trace's "chunks arrived" counter must find g
    counted: Context.land must bump the counter before it raises the flag. Checked deterministically
    by recording the order of writes to the signal pad."""
    import torch

    from syncopy.device import SIG_HEADER
    from syncopy.runtime.state import plan as planning
    from syncopy.runtime.state.context import Context
    from syncopy.schedule import load_schedule

    sched = load_schedule(workers.schedule("grouped", 2, "ring"))
    ctx = Context(planning.all_gather(sched, 0, 2, 8), (8, 4), torch.float32, torch.device("cpu"), 0)
    ctx.begin(100)

    class Recorder:
        def __init__(self, t):
            self.t, self.writes = t, []

        def __getitem__(self, key):
            return self.t[key].clone()  # so `pad[k] += 1` writes only through __setitem__

        def __setitem__(self, key, value):  # a word, or a one-word slice (a fill: no host sync on GPUs)
            self.writes.append(key.start if isinstance(key, slice) else int(key))
            self.t[key] = value

    pad = Recorder(ctx.signals)
    ctx.signals = pad
    chunk = 2
    ctx.land(chunk)
    flag, counter = SIG_HEADER + chunk, SIG_HEADER + ctx.n_chunks
    assert flag in pad.writes and counter in pad.writes, pad.writes
    assert pad.writes.index(counter) < pad.writes.index(flag), (
        f"land() raised the flag (slot {flag}) before counting the chunk (slot {counter}): writes {pad.writes}")


# --------------------------------------------------------------------------------------------------
# 4. The tile remap is a bijection (1-D, 2-D and 3-D grids)
# --------------------------------------------------------------------------------------------------
@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3], ids=["world2", "world3"])
def test_every_tile_runs_exactly_once(world):
    orders = TILE_ORDERS[world]
    per_rank = shared.results(__name__, world, "tiles")
    seen = 0
    for rank, results in enumerate(per_rank):
        for res in results:
            where = f"rank {rank}: {res['id']}"
            n = res["n"]
            twice = [i for i, c in enumerate(res["count"]) if c > 1]
            never = [i for i, c in enumerate(res["count"]) if c == 0]
            assert not twice and not never, f"{where}: tiles run twice {twice}, never {never}"
            assert res["err"] == 0.0, f"{where}: a tile read other data than the local kernel on the gathered tensor ({res['err']})"
            assert res["tables"], where
            for table, exec_order in res["tables"]:
                assert sorted(table) == list(range(n)), f"{where}: order table {table}"
                assert sorted(exec_order) == list(range(n)), f"{where}: execution order {exec_order}"
            tr = res["trace"]
            assert [t for t, _, _ in sorted(tr.tile_starts, key=lambda x: x[1])] == tr.tile_order, where
            seen += 1
    assert seen == world * len(orders) * 3 * 2


@pytest.mark.world
def test_reordering_link_keeps_rows_nan_until_their_flag_and_shuffles_flags():
    """The tests' oracle for reads that were not waited for (Link(reorder=True), the default link of
    tests/world/harness.py): a chunk's rows stay NaN in the poisoned buffer until its own flag
    rises, flags rise one at a time, and not in the planned order every time."""
    results = shared.results(__name__, 3, "reorder")
    shuffled = 0
    for rank, log in enumerate(results):
        assert len(log) == REORDER_LAUNCHES, log
        for rec in log:
            assert not rec["bad"], f"rank {rank} epoch {rec['epoch']}: " + "; ".join(rec["bad"])
            assert sorted(rec["landed"]) == sorted(rec["planned"]), rec
            assert rec["err"] <= workers.TOL["float32"], rec
            shuffled += rec["landed"] != rec["planned"]
    assert shuffled, "every chunk landed in the planned order: the link does not reorder"
