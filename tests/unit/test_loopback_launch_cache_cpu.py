"""The loopback world keeps per launch shape what does not change between launches (tile order,
the kernel's extra arguments, chunk moves in arrival order, the batch of start writes). Every
launch here brings new tensors, and the grid, the scalars and the withheld chunks change between
launches: a cache missing any of them in its key would reuse a stale order or stale addresses."""
from __future__ import annotations

import pytest
import torch
import triton

import syncopy
from syncopy.runtime.worlds.loopback import LoopbackWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

WORLD, ROWS, K = 3, 16, 16
META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)


def _launch(lw, n: int, seed: int, transpose_c: bool = False, **kw):
    g = torch.Generator().manual_seed(seed)
    shards = [torch.randn(ROWS, K, generator=g) for _ in range(WORLD)]  # new peer tensors every launch
    a = shards[lw.rank].clone()
    b = torch.randn(K, n, generator=g)
    m = ROWS * WORLD
    c = torch.full((n, m), float("nan")).t() if transpose_c else torch.full((m, n), float("nan"))
    for ctx in lw.contexts.values():
        ctx.buffer.fill_(float("nan"))
    grid = (triton.cdiv(m, 16) * triton.cdiv(n, 16),)
    lw.launch(grid, (a, b, c, m, n, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
              dict(META), shards, **kw)
    ref = torch.cat(shards) @ b
    return float(torch.nan_to_num((c - ref).abs(), nan=float("inf")).max())


@pytest.mark.parametrize("graph", [False, True], ids=["host-epochs", "device-epochs"])
def test_new_tensors_grids_and_scalars_every_launch(graph):
    lw = LoopbackWorld(syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2))(ag_gemm_kernel),
                       WORLD, 1, device="cpu", graph=graph)
    # N (a scalar and the grid) and C's strides change from launch to launch; each pattern twice.
    for seed, (n, transpose_c) in enumerate([(16, False), (48, False), (16, True), (48, True), (16, False), (48, True)]):
        assert _launch(lw, n, seed, transpose_c) < 1e-4, (n, transpose_c)
    (loop,) = lw.loops.values()
    assert len(loop.launch_args) == 4


def test_withheld_chunks_change_between_launches():
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2), timeout_s=0.3)(ag_gemm_kernel)
    lw = LoopbackWorld(fk, WORLD, 0, device="cpu")
    assert _launch(lw, 16, 0) < 1e-4
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        _launch(lw, 16, 1, withhold=frozenset({4}))
    assert info.value.chunk == (2, 0)
    assert _launch(lw, 16, 2) < 1e-4  # the full arrival list again, not the withheld one
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        _launch(lw, 16, 3, withhold=frozenset({3}))
    assert info.value.chunk == (1, 1)

