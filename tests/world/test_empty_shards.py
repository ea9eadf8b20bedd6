"""Zero rows on every rank (issue 27, item 7): the launch is refused on every rank, at every launch,
in one line that names the empty shard, not "use chunks_per_rank <= 0" (impossible advice)."""
from __future__ import annotations

from tests.world import empty_shard_workers
from tests.world.harness import INSTANT, spawn


def test_zero_rows_on_every_rank_is_named():
    results = spawn(empty_shard_workers.zero_rows, 2, link=INSTANT)
    for rank, out in enumerate(results):
        assert out["launched"] == 0, f"rank {rank}: {out}"
        assert len(out["errors"]) == 2, f"rank {rank}: {out}"
        for message in out["errors"]:
            assert message == ("each shard of 'A' has 0 rows along dim 0: there is nothing to send or compute; "
                               "skip the launch where the tensor is empty (its result is empty too)"), message
            assert "chunks_per_rank <=" not in message and "\n" not in message
        assert out["after"] == 2.0
