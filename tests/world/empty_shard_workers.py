"""Rank bodies of test_empty_shards: every rank launches with a shard of zero rows."""
from __future__ import annotations


def zero_rows(rank: int, world: int) -> dict:
    import torch
    import torch.distributed as dist
    import triton

    import syncopy
    from tests.world.reinit_workers import _kernel

    mm = _kernel()
    a_shard, b = torch.empty(0, 16), torch.randn(16, 16)
    c = torch.empty(0, 16)
    out = {"errors": [], "launched": 0}
    for _ in range(2):  # the second launch says the same (no context was kept half-made)
        try:
            mm[(1, 1)](a_shard, b, c, 0, 16, 16, BM=16, BN=16, BK=16, group=dist.group.WORLD)
            out["launched"] += 1
        except syncopy.LaunchError as exc:
            out["errors"].append(str(exc))
    t = torch.ones(1)
    dist.all_reduce(t)  # the group still works after the refusals
    out["after"] = t.item()
    return out
