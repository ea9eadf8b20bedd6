"""How a rank launches mm (mm.py) under mm.yaml, for `syncopy verify`: make(rank, world, launch) returns
(grid, args, kwargs). A is this rank's shard; M, the grid and C are for the gathered A. New data each
launch; the second launch is a warm one (the first's shape again: its buffers and flags reused, where
stale data would show), the third a new shape (ragged chunks and tiles)."""
import torch
import triton


def make(rank: int, world: int, launch: int):
    rows = (24, 24, 19)[launch % 3]  # rows of A per rank
    n, k = 16, 24
    gen = torch.Generator().manual_seed(1000 * launch + rank)
    a_shard = torch.randn(rows, k, generator=gen)
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(launch))  # the same B on every rank
    m = rows * world
    c = torch.empty(m, n)
    grid = (triton.cdiv(m, 16), triton.cdiv(n, 16))
    return grid, [a_shard, b, c, m, n, k], dict(BM=16, BN=16, BK=8)
