"""Rung 4, producer semantics compiled (issue 10, part B): on a world of one, kernels that add into
their output (split-K atomics, `C += A @ B`), tiles that return before their store (a triangular mask,
a loaded flag) and rows from loaded data give what `fused.reference` gives, launch after launch, and
every chunk's flag and counter reach their targets (a tile that returns early still counts).
Skipped cleanly without CUDA."""
import os
from datetime import timedelta

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs a CUDA device (and TRITON_INTERPRET unset)"),
]

B = 32
M, N, K = 96, 64, 64


@pytest.fixture(scope="module")
def world_of_one():
    import torch.distributed as dist

    from syncopy.runtime.worlds.processes import free_port

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=timedelta(seconds=60))
    yield


def _launch(fn, name, a, b, c, extra):
    tiles = (M // B, N // B)
    meta = dict(BM=B, BN=B, BK=B)
    if name == "splitk_atomic":
        fn[tiles + (2,)](a, b, c, M, N, K, SPLIT=2, **meta)
    elif name == "rows_by_index":
        fn[tiles](a, b, c, extra, M, N, K, **meta)
    elif name == "skip_by_flag":
        fn[tiles](a, b, c, extra, M, N, K, **meta)
    else:
        fn[tiles](a, b, c, M, N, K, **meta)


@pytest.mark.parametrize("pattern", ["reduce_scatter", "all_reduce"])
@pytest.mark.parametrize("name", ["splitk_atomic", "accumulate", "lower_triangular", "skip_by_flag", "rows_by_index"])
def test_compiled_producers_equal_their_reference(world_of_one, name, pattern):
    import syncopy
    from syncopy import device as dev
    from tests.kernels import producer_cases

    fused = syncopy.overlap({"pattern": pattern, "tensor": "C", "chunks_per_rank": 3}, poison_receive=True)(
        getattr(producer_cases, name))
    g = torch.Generator(device="cuda").manual_seed(0)
    for launch in range(3):
        a = torch.randn(M, K, device="cuda", generator=g)
        b = torch.randn(K, N, device="cuda", generator=g)
        c = torch.randn(M, N, device="cuda", generator=g)
        extra = None
        if name == "rows_by_index":
            extra = torch.randperm(M, device="cuda", generator=g).to(torch.int32)
        elif name == "skip_by_flag":
            extra = (torch.rand((M // B) * (N // B), device="cuda", generator=g) < 0.5).to(torch.int32)
        got, want = c.clone(), c.clone() if pattern == "all_reduce" else torch.zeros_like(c)
        if pattern == "reduce_scatter":
            got = torch.full_like(c, float("nan"))
        _launch(fused, name, a, b, got, extra)
        _launch(fused.reference, name, a, b, want, extra)
        torch.cuda.synchronize()
        assert torch.allclose(got, want, atol=1e-2, rtol=1e-3), f"launch {launch}: {(got - want).abs().max().item()}"
        (ctx, _), = fused.contexts.table.values()
        n = ctx.n_chunks
        flags = ctx.signals[dev.SIG_HEADER : dev.SIG_HEADER + n].tolist()
        counters = ctx.signals[dev.SIG_HEADER + n + 2 : dev.SIG_HEADER + 2 * n + 2].tolist()
        assert flags == [ctx.epoch] * n and counters == ctx.targets, f"launch {launch}: {flags} {counters} {ctx.targets}"
