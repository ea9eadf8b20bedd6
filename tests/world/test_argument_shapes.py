"""Arguments as the kernel sees them (issue 30, F and G), every launch of new data with poisoned receive
buffers over the harness's slow reordering link, against torch.

F: strides given for the shard instead of the tensor the kernel sees: gathering A along dim 1,
`a.stride(0)` of the shard is refused on every rank in one line naming the argument and the value
to pass; with the gathered strides every launch is right.
G: an output with fewer rows than the grid writes is refused before anything moves (it was an
out-of-bounds write: wrong on one rank, a crash on another), naming the output and the rows."""
from __future__ import annotations

import math

import pytest

from tests.world import argument_shape_workers as sw
from tests.world import shared

# The harness's slow reordering link with poisoned receive buffers on worlds 2 and 3, and an instant
# link without poisoning on world 2 (world 3 on it repeats what world 2 on it and world 3 on the slow
# link cover). Jobs of the shared worlds (tests/world/shared.py): every refusal comes before anything
# moves, and the launches after it leave the group as it was.
LINKS = {"slow-poisoned": (True, False), "instant": (False, True)}  # id -> (poison, instant)
RUNS = [(2, "slow-poisoned"), (2, "instant"), (3, "slow-poisoned")]
for _size in (2, 3):
    shared.register(__name__, _size, {f"{fn} {link}": (f"{sw.__name__}:{fn}", (3, *LINKS[link]))
                                      for fn in ("run_dim1_strides", "run_short_output") for w, link in RUNS if w == _size})
_IDS = [f"{w}-{link}" for w, link in RUNS]


@pytest.mark.world
@pytest.mark.parametrize("world, link", RUNS, ids=_IDS)
def test_shard_strides_are_refused_and_gathered_strides_are_right(world, link):
    results = shared.results(__name__, world, f"run_dim1_strides {link}")
    per_rank = 6
    for rank, r in enumerate(results):
        assert "failure" not in r, f"rank {rank}:\n{r['failure']}"
        assert r["refused"] == (
            f"launch of 'ag_gemm_kernel': 'stride_am' is {per_rank}, the stride of dim 0 of 'A' as passed (this rank's shard, "
            f"shape [16, {per_rank}]), but the kernel reads the gathered 'A' (shape [16, {per_rank * world}], strides "
            f"({per_rank * world}, 1)): pass stride_am={per_rank * world}"), r["refused"]
        assert len(r["errors"]) == 3 and all(math.isfinite(e) and e <= 1e-4 for e in r["errors"]), (rank, r["errors"])


@pytest.mark.world
@pytest.mark.parametrize("world, link", RUNS, ids=_IDS)
def test_an_output_shorter_than_the_rows_the_grid_writes_is_refused(world, link):
    results = shared.results(__name__, world, f"run_short_output {link}")
    m = 8 * world
    for rank, r in enumerate(results):
        assert "failure" not in r, f"rank {rank}:\n{r['failure']}"
        assert r["refused"] == (f"launch of 'ag_gemm_kernel': the grid writes rows up to {m - 1} of 'C', which has {m - 8} rows; "
                                f"give 'C' at least {m} rows, or a grid and bounds that write {m - 8}"), r["refused"]
        assert len(r["errors"]) == 3 and all(math.isfinite(e) and e <= 1e-4 for e in r["errors"]), (rank, r["errors"])
        # A warm launch (its tile order cached for this grid) with a short C is checked again, not trusted to the cache.
        assert r.get("refused_warm") == r["refused"], (rank, r.get("refused_warm"))
