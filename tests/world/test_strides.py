"""Strides given for the shard instead of the tensor the kernel sees (issue 30, F): gathering A along
dim 1, `a.stride(0)` of the shard passed to the kernel is refused on every rank in one line naming
the argument and the value to pass; with the gathered strides every launch (new data, poisoned
receive buffers, the harness's slow reordering link) equals torch."""
from __future__ import annotations

import math

import pytest

from tests.world import stride_workers as sw
from tests.world.harness import spawn


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3])
def test_shard_strides_are_refused_and_gathered_strides_are_right(world):
    results = spawn(sw.run_dim1_strides, world, 3, timeout_s=240)
    per_rank = 6
    for rank, r in enumerate(results):
        assert "failure" not in r, f"rank {rank}:\n{r['failure']}"
        assert r["refused"] == (
            f"launch of 'ag_gemm_kernel': 'stride_am' is {per_rank}, the stride of dim 0 of 'A' as passed (this rank's shard, "
            f"shape [16, {per_rank}]), but the kernel reads the gathered 'A' (shape [16, {per_rank * world}], strides "
            f"({per_rank * world}, 1)): pass stride_am={per_rank * world}"), r["refused"]
        assert len(r["errors"]) == 3 and all(math.isfinite(e) and e <= 1e-4 for e in r["errors"]), (rank, r["errors"])
