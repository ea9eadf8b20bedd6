"""trace="run.json" (issue 14 item 3): a Chrome / Perfetto trace of every rank, merged by rank 0,
checked against the run itself: every chunk lands once per launch, no tile starts before the chunks
it reads landed, and tiles do start while later chunks are still in flight."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest


pytestmark = pytest.mark.world


def test_trace_file_of_every_rank_matches_the_run(tmp_path, capsys):
    # Through the CLI a user runs: `syncopy run ag_gemm --world 2 --trace run.json --timeline run.png`,
    # a 30 ms link so that chunks land while tiles run; two launches, each checked against torch.
    from syncopy.cli import main

    world, path, png = 2, tmp_path / "run.json", tmp_path / "run.png"
    code = main(["run", "ag_gemm", "--world", str(world), "--shape", "64,32,32", "--chunks", "2", "--slow-link", "30",
                 "--trace", str(path), "--timeline", str(png)])
    assert code == 0 and "ag_gemm on 2 rank(s): correct" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    doc = json.loads(path.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    assert doc["otherData"]["launches"] == 2 and doc["otherData"]["ranks"] == world
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"kernel", "tiles", "chunks in", "chunks out"}
    overlapped = 0
    for rank in range(world):
        kernels = [e for e in events if e["cat"] == "kernel" and e["pid"] == rank]
        assert len(kernels) == 2
        for kernel in kernels:
            epoch = kernel["args"]["epoch"]
            mine = [e for e in events if e["pid"] == rank and e["args"]["epoch"] == epoch]
            landings = [e for e in mine if e["cat"] == "chunk" and e["tid"] == 2]
            landed = defaultdict(list)
            for e in landings:
                landed[e["args"]["chunk"]].append(e["ts"] + e.get("dur", 0))
            # 2 ranks x 2 chunks: every chunk lands once (this rank's own at the launch start)
            assert sorted(landed) == [0, 1, 2, 3] and all(len(v) == 1 for v in landed.values()), landed
            remote = [e for e in landings if "source" in e["args"]]
            assert len(remote) == 2 and all(e["args"]["source"] == 1 - rank and e["dur"] > 0 for e in remote)
            tiles = [e for e in mine if e["cat"] == "tile"]
            assert all(kernel["ts"] <= e["ts"] <= kernel["ts"] + kernel["dur"] for e in tiles)
            assert len(tiles) == kernel["args"]["tiles"] > 0
            for tile in tiles:
                lo, hi = tile["args"]["chunks"]
                assert all(tile["ts"] >= landed[g][0] - 1 for g in range(lo, hi + 1)), (tile, landed)
            last = max(v[0] for v in landed.values())
            overlapped += sum(1 for tile in tiles if tile["ts"] < last)
            waits = [e for e in mine if e["cat"] == "wait"]
            assert waits and all(e["dur"] >= 0 for e in waits)
    assert overlapped > 0  # tiles ran while later chunks were still in flight

    # A trace file from elsewhere (a GPU run, another machine) draws the same way.
    svg = tmp_path / "again.svg"
    assert main(["trace", str(path), "-o", str(svg)]) == 0 and svg.read_text().lstrip().startswith("<?xml")
