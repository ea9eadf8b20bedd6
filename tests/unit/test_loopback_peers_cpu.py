"""The loopback world's chunk moves are made once per peer list: the list must be the same tensors at
the same addresses, or the moves are made again (a tensor's storage can be swapped in place)."""
from __future__ import annotations

import torch
import triton

import syncopy
from syncopy.runtime.worlds.loopback import LoopbackWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

WORLD, ROWS, N, K = 3, 16, 16, 16
META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)


def _launch(lw, shards, b):
    m = ROWS * WORLD
    c = torch.full((m, N), float("nan"))
    for ctx in lw.contexts.values():
        ctx.buffer.fill_(float("nan"))  # stale rows cannot pass
    a = shards[0]
    grid = (triton.cdiv(m, 16) * triton.cdiv(N, 16),)
    # Paced: the chunks land while the kernel's tiles wait for them.
    lw.launch(grid, (a, b, c, m, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)), dict(META), shards,
              delay_s=0.01)
    ref = torch.cat(shards) @ b
    return float(torch.nan_to_num((c - ref).abs(), nan=float("inf")).max())


def test_a_peer_whose_storage_was_swapped_in_place_is_read_at_its_new_address():
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2))(ag_gemm_kernel)
    lw = LoopbackWorld(fk, WORLD, 0, device="cpu")
    g = torch.Generator().manual_seed(0)
    shards = [torch.randn(ROWS, K, generator=g) for _ in range(WORLD)]
    b = torch.randn(K, N, generator=g)
    assert _launch(lw, shards, b) < 1e-4
    kept = shards[2].view_as(shards[2])  # the old storage stays alive (and keeps its old rows)
    shards[2].set_(torch.randn(ROWS, K, generator=g))  # the same tensor object, new storage
    assert kept.data_ptr() != shards[2].data_ptr()
    assert _launch(lw, shards, b) < 1e-4
