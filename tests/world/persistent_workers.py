"""Rank functions for the persistent-kernel CPU-world tests (spawned, so module level and picklable).

Each case fuses one kernel of tests/kernels/persistent.py through the decorator, launches it twice
(epochs 1 and 2, fresh data, poisoned receive buffer) with fewer programs than tiles, and compares C
with the torch reference (`all_gather_into_tensor` + matmul). With `trace` the launch records every
tile's start (tile, sequence, chunks landed by then) and when each chunk landed.
"""
from __future__ import annotations

import time
import traceback

TENSOR = {"sweep_tiles": "X", "tutorial_ws": "a_ptr", "rolling_tiles": "P", "stepping_first": "P", "flat_k_steps": "a_ptr", "flat_k_desc": "A"}
N, K, TILE = 32, 24, 16
TOL = {"float32": 1e-4, "float16": 1e-2}


def _kernel(name: str):
    from tests.kernels import persistent

    return getattr(persistent, name)


def launch(name: str, fn, a, b, c, programs: int, **extra) -> None:
    """Launch kernel `name` (fused, its `.reference`, or the local kernel) with `programs` programs."""
    m, k = c.shape[0], a.shape[1]
    n = c.shape[1]
    grid = (programs,)
    if name == "sweep_tiles":
        fn[grid](a, b, c, m, n, k, TR=TILE, TC=TILE, TD=TILE, BAND=2, WORKERS=programs, **extra)
    elif name == "tutorial_ws":
        fn[grid](a, b, c, m, n, k, BLOCK_SIZE_M=TILE, BLOCK_SIZE_N=TILE, BLOCK_SIZE_K=TILE, GROUP_SIZE_M=2, NUM_SMS=programs, **extra)
    elif name == "rolling_tiles":
        fn[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BM=TILE, BN=TILE, BK=TILE, LANES=programs, **extra)
    elif name == "stepping_first":
        fn[grid](a, b, c, m, n, k, BM=TILE, BN=TILE, BK=TILE, LANES=programs, **extra)
    elif name == "flat_k_steps":
        fn[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BLOCK_SIZE_M=TILE, BLOCK_SIZE_N=TILE, BLOCK_SIZE_K=TILE, GROUP_SIZE_M=2, NUM_SMS=programs, **extra)
    elif name == "flat_k_desc":
        fn[grid](a, b, c, m, n, k, BM=TILE, BN=TILE, BK=TILE, SMS=programs, **extra)
    else:
        raise KeyError(name)


def _inputs(name: str, rank: int, rows: int, dtype, seed: int):
    import torch

    a = torch.randn(rows, K, generator=torch.Generator().manual_seed(seed * 1009 + rank * 7 + 1)).to(dtype)
    g = torch.Generator().manual_seed(seed * 1009 + 999_983)
    # tutorial_ws takes B as N x K (its b_desc is [N, K]); the others as K x N.
    b = (torch.randn(N, K, generator=g) if name == "tutorial_ws" else torch.randn(K, N, generator=g)).to(dtype)
    return a, b


def _reference(name: str, a, b, world: int):
    import torch
    import torch.distributed as dist

    full = torch.empty(world * a.shape[0], a.shape[1], dtype=a.dtype)
    dist.all_gather_into_tensor(full, a.contiguous())
    bb = b.float().T if name == "tutorial_ws" else b.float()
    return full.float() @ bb


def run_cases(rank: int, world: int, cases: list[dict]) -> dict:
    """Every case: {id, kernel, chunks, order, rows, programs, dtype[, latency_s]}. Returns per-case errors,
    the traces of traced cases and what the runtime built, and problems (exceptions) by case."""
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.runtime.transport.link import Link

    out = {"errors": [], "problems": [], "traces": {}, "tables": {}, "seconds": 0.0}
    t0 = time.perf_counter()
    for ci, case in enumerate(cases):
        try:
            name = case["kernel"]
            dtype = {"float32": torch.float32, "float16": torch.float16}[case["dtype"]]
            link = Link(latency_s=case["latency_s"]) if case.get("latency_s") else None
            fused = syncopy.overlap({"pattern": "all_gather", "tensor": TENSOR[name], "dim": 0, "chunks_per_rank": case["chunks"],
                                     "order": case["order"]}, poison_receive=True, trace=True, link=link)(_kernel(name))
            fused.build()
            traces = []
            for epoch in (1, 2):
                a, b = _inputs(name, rank, case["rows"], dtype, seed=ci * 10 + epoch)
                ref = _reference(name, a, b, world)
                c = torch.full((world * case["rows"], N), float("nan"), dtype=dtype)
                dist.barrier()  # start together: a late rank would find its chunks already there
                launch(name, fused, a, b, c, case["programs"])
                diff = torch.nan_to_num((c.float() - ref).abs(), nan=float("inf"))
                err = float(diff.max().item() / max(1.0, ref.abs().max().item()))
                out["errors"].append((f"{case['id']} epoch{epoch}", err, TOL[case["dtype"]]))
                traces.append(fused.last_trace)
            (ctx, _), = fused.contexts.table.values()
            (table, ranges, exec_order), = ctx.orders.values()
            t = fused.build()
            out["traces"][case["id"]] = traces
            out["tables"][case["id"]] = {
                "table": table.tolist(), "ranges": ranges, "exec_order": exec_order,
                "remap": t.persistent.remap, "tile_start": t.persistent.tile_start, "probe": fused.kernel.built[2] is not None,
                "position": ctx.plan.position(), "local": [rank * case["chunks"] + i for i in range(case["chunks"])],
                "n_chunks": ctx.n_chunks,
            }
        except Exception as exc:  # keep going: the test names every failing case
            out["errors"].append((f"{case['id']} raised", float("inf"), 0.0))
            out["problems"].append(f"{case['id']}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}")
    out["seconds"] = time.perf_counter() - t0
    return out
