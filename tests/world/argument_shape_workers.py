"""Rank functions for tests/world/test_argument_shapes.py: AG-GEMM's kernel gathering A along dim 1 (its
K), launched with the shard's own strides (refused) and with the gathered tensor's (right); and an
output with fewer rows than the grid writes (refused before anything moves), then one that fits.

Both run as jobs of the shared worlds (tests/world/shared.py: the harness's slow reordering link);
`instant=True` gives the operator an instant link of its own (with `poison=False`: the instant case)."""
from __future__ import annotations

import traceback


def run_dim1_strides(rank: int, world: int, launches: int, poison: bool = True, instant: bool = False) -> dict:
    import torch
    import torch.distributed as dist
    import triton

    import syncopy
    from syncopy.errors import LaunchError
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel
    from syncopy.runtime.transport.link import Link

    meta = dict(BLOCK_M=8, BLOCK_N=8, BLOCK_K=8, GROUP_M=1)
    m, n, per_rank = 16, 8, 6
    k = per_rank * world
    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 1, "chunks_per_rank": 2},
                            poison_receive=poison, **({"link": Link()} if instant else {}))(ag_gemm_kernel)
    grid = (triton.cdiv(m, 8) * triton.cdiv(n, 8),)
    out: dict = {"refused": None, "errors": []}
    try:
        for launch in range(launches + 1):
            a = torch.randn(m, per_rank, generator=torch.Generator().manual_seed(100 * launch + rank))
            b = torch.randn(k, n, generator=torch.Generator().manual_seed(100 * launch))  # alike on every rank
            c = torch.full((m, n), float("nan"))
            if launch == 0:  # the shard's own row stride, as a.stride(0) gives it: refused before anything moves
                try:
                    fused[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **meta)
                except LaunchError as exc:
                    out["refused"] = str(exc)
                continue
            fused[grid](a, b, c, m, n, k, k, 1, b.stride(0), b.stride(1), c.stride(0), c.stride(1), **meta)  # A's gathered strides
            parts = [torch.empty_like(a) for _ in range(world)]
            dist.all_gather(parts, a)
            want = torch.cat(parts, dim=1) @ b
            out["errors"].append(float((c - want).abs().max()))  # NaN stays NaN
        return out
    except Exception:
        return {"refused": None, "errors": [], "failure": traceback.format_exc()}


def run_short_output(rank: int, world: int, launches: int, poison: bool = True, instant: bool = False) -> dict:
    """AG-GEMM (gathering A along dim 0) into a C of M - 8 rows: refused on every rank, naming C and the
    rows; then launches of new data into a C of M rows, each against torch; then, warm, a short C again.""" 
    import torch
    import torch.distributed as dist
    import triton

    import syncopy
    from syncopy.errors import LaunchError
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel
    from syncopy.runtime.transport.link import Link

    meta = dict(BLOCK_M=8, BLOCK_N=8, BLOCK_K=8, GROUP_M=1)
    rows, n, k = 8, 8, 16
    m = rows * world
    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 2},
                            poison_receive=poison, **({"link": Link()} if instant else {}))(ag_gemm_kernel)
    grid = (triton.cdiv(m, 8) * triton.cdiv(n, 8),)
    out: dict = {"refused": None, "errors": []}
    try:
        for launch in range(launches + 1):
            a = torch.randn(rows, k, generator=torch.Generator().manual_seed(100 * launch + rank))
            b = torch.randn(k, n, generator=torch.Generator().manual_seed(100 * launch))
            c = torch.full((m - 8 if launch == 0 else m, n), float("nan"))
            args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
            if launch == 0:
                try:
                    fused[grid](*args, **meta)
                except LaunchError as exc:
                    out["refused"] = str(exc)
                continue
            fused[grid](*args, **meta)
            want = torch.empty(m, k)
            dist.all_gather_into_tensor(want, a)
            out["errors"].append(float((c - want @ b).abs().max()))
        # Warm: the same grid and scalars (a cached tile order), a short C again: checked again, refused again.
        c = torch.full((m - 8, n), float("nan"))
        try:
            fused[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **meta)
        except LaunchError as exc:
            out["refused_warm"] = str(exc)
        return out
    except Exception:
        return {"refused": None, "errors": [], "failure": traceback.format_exc()}
