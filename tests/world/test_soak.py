"""The soak and chunk checksums on CPU worlds.

`syncopy run --random-shapes` as `make test` runs it (20 launches on 2 ranks, fresh row counts, one
row and shards smaller than the chunk count included); verify_chunks on a world of 3 (a ring relays
chunks) and on a producer (partial sums): with a clean link checksums change nothing, a corrupt chunk
raises SyncopyCorruptChunk naming it on every rank that received it, directly or through a relay,
and without checksums the same fault is a wrong result that only a check against torch finds.
"""
from __future__ import annotations

import json
import re

import pytest

from tests.unit.test_cli_args import _cli
from tests.world.harness import spawn
from tests.world import soak_workers
from tests.world.workers import once

SOAK = ["run", "ag_gemm", "--world", "2", "--iters", "20", "--random-shapes", "--shape", "8,32,32", "--seed", "3", "--slow-link", "4"]


@pytest.mark.world
def test_short_soak_checks_every_launch_and_summarises_it(tmp_path):
    proc = _cli(*SOAK, "--json", "soak.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "soak.json").read_text())
    assert {k: summary[k] for k in ("launches", "wrong", "wrong_elements", "timeouts", "corrupt", "errors", "died")} == {
        "launches": 20, "wrong": 0, "wrong_elements": 0, "timeouts": 0, "corrupt": 0, "errors": 0, "died": []}
    # Seed 3 draws one-row shards (fewer rows than the schedule's 2 chunks): refused in one line, then
    # run on one chunk per rank and checked like the rest.
    assert summary["refused"] >= 1 and summary["ok"] is True
    assert 0 < summary["p50_ms"] <= summary["p99_ms"]
    # Shapes come back (M is drawn from 1..8): each distinct shard shape holds one context, reused, never two.
    assert summary["shapes"] < 20 and 0 < summary["contexts_held"] <= summary["shapes"]
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"20 launches, 0 wrong \(0 elements\), 0 timeouts, \d+ refused, launches after the first p50 [\d.]+ ms, "
                        r"p99 [\d.]+ ms", lines[-2]), lines[-2]
    assert lines[-1] == "ag_gemm on 2 rank(s): correct"
    assert "\x1b[" not in proc.stdout  # no progress bar into a pipe


@once
def _checksums(name: str, world: int, shape: tuple, corrupt: tuple) -> list[dict]:
    return spawn(soak_workers.run_checksums, world, name, shape, corrupt, timeout_s=300)


CASES = [
    # ag_gemm, world 3, ring: rank 1 gets chunk (0, 1) from rank 0, rank 2 through rank 1's relay.
    pytest.param("ag_gemm", 3, (8, 32, 32), (0, 1), {1: ((0, 1), 0), 2: ((0, 1), 1)}, id="all_gather-relay"),
    # gemm_rs, world 2: rank 0's partial of rank 1's rows (global chunk 2 = rank 1's chunk 0) is corrupt.
    pytest.param("gemm_rs", 2, (32, 32, 32), (0, 2), {1: ((1, 0), 0)}, id="reduce_scatter"),
]


@pytest.mark.world
@pytest.mark.parametrize(("name", "world", "shape", "corrupt", "receivers"), CASES)
def test_verified_chunks_give_torchs_result_and_name_a_corrupt_chunk(name, world, shape, corrupt, receivers):
    results = _checksums(name, world, shape, corrupt)
    for rank, r in enumerate(results):
        for epoch, launch in enumerate(r["clean"], start=1):
            assert launch == {"type": None, "wrong": 0}, f"rank {rank} clean launch {epoch}: {launch}"
        for epoch, launch in enumerate(r["caught"], start=1):
            if rank not in receivers:
                assert launch == {"type": None, "wrong": 0}, f"rank {rank} launch {epoch}: {launch}"
                continue
            chunk, peer = receivers[rank]
            assert launch["type"] == "SyncopyCorruptChunk", f"rank {rank} launch {epoch}: {launch}"
            assert (tuple(launch["chunk"]), launch["epoch"], launch["peer"]) == (chunk, epoch, peer), launch
            assert launch["str"].startswith(f"rank {rank}: chunk {chunk[1]} of rank {chunk[0]} (epoch {epoch}) arrived from "
                                            f"rank {peer} with bytes that do not match its checksum; "), launch["str"]


@pytest.mark.world
@pytest.mark.parametrize(("name", "world", "shape", "corrupt", "receivers"), CASES)
def test_a_corrupt_chunk_without_checksums_is_a_wrong_result_the_check_finds(name, world, shape, corrupt, receivers):
    results = _checksums(name, world, shape, corrupt)
    for rank in receivers:
        for epoch, launch in enumerate(results[rank]["unchecked"], start=1):
            assert launch["type"] is None and launch["wrong"] > 0, f"rank {rank} launch {epoch}: {launch}"
