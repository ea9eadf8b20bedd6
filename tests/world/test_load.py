"""What the CLI writes can be run (issue 13, item 9): Triton's tutorial matmul, transformed at "build
time" by `syncopy transform --loadable`, launched on CPU worlds through `syncopy.load` with libcst
made unimportable in every rank; slow link, poisoned receive buffers, two launches, against torch; an
output too small for the grid refused from the extent probe the file carries."""
from __future__ import annotations

from pathlib import Path

import pytest

from syncopy.cli import main
from tests.world import autotune_workers as aw
from tests.world.harness import spawn
from tests.oracles import worst

KERNEL = Path(__file__).parents[1] / "kernels" / "autotuned.py"
SCHEDULE = "version: 1\npattern: all_gather\nkernel: matmul_kernel\ntensor: a_ptr\ndim: 0\nchunks_per_rank: 2\norder: ring\n"


@pytest.mark.world
@pytest.mark.parametrize("world, rows", [(3, 11)], ids=["world3"])  # world 2 is the decorator's own matrix
def test_a_transformed_file_runs_through_load_without_libcst(tmp_path, world, rows):
    schedule = tmp_path / "s.yaml"
    schedule.write_text(SCHEDULE)
    out = tmp_path / "matmul_fused.py"
    assert main(["transform", str(KERNEL), "-s", str(schedule), "--loadable", "-o", str(out)]) == 0
    results = spawn(aw.run_loaded_tutorial, world, str(out), str(schedule), rows, timeout_s=300)
    for rank, r in enumerate(results):
        assert "failure" not in r, f"rank {rank}:\n{r['failure']}"
        assert not r["libcst"], rank
        assert len(r["errors"]) == aw.LAUNCHES and worst(r["errors"]) <= 1e-2, (rank, r["errors"])
        m = world * rows
        assert r["short"] == (f"launch of 'matmul_kernel': the grid writes rows up to {m - 1} of 'c_ptr', which has {m - 1} rows; "
                              f"give 'c_ptr' at least {m} rows, or a grid and bounds that write {m - 1}"), (rank, r["short"])
