"""Issue 13 item 3 on a CPU world: attention over gathered K and V (`tensor: [K, V]`) whose key/value
loop waits per iteration and runs in arrival order, this rank's rows first. With every remote chunk
held until a tile is seen waiting for it (the hold oracle, not a link's latency raced against this
machine's speed), the first tile starts while only this rank's own chunks have landed: its first iterations run on local rows
before any remote chunk lands (the arrival order itself: test_listed_tensors_and_loops.py), and the
results equal SDPA on the gathered K and V, NaN-poisoned receive buffers, two launches."""
from __future__ import annotations

import pytest

from tests.world.attention_workers import traced_attention
from tests.oracles import worst
from tests.world.harness import IN_ORDER, spawn


@pytest.mark.world
def test_attention_tiles_start_on_local_rows_before_remote_chunks_land():
    results = spawn(traced_attention, 2, 0.002, True, link=IN_ORDER, timeout_s=300)
    for rank, r in enumerate(results):
        assert worst(r["errors"]) <= 1e-4 and worst([r["op_error"]]) <= 1e-4, (rank, r["errors"], r["op_error"])
        chunks_per_rank = r["total"] // 2
        for launch, starts in enumerate(r["starts"]):
            assert len(starts) == 2, starts  # 16 query rows / BM=16, times 2 heads
            # Tile starts record how many chunks had landed: this rank's own, no remote one yet.
            assert starts[0] == chunks_per_rank < r["total"], (rank, launch, starts)
