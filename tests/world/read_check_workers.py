"""Rank functions for tests/world/test_read_check.py (spawned, so module level and picklable).

Each case fuses a kernel of tests/kernels/read_check.py whose schedule gives a `binding.rows` too
narrow on purpose (one row of the BR a program reads or writes): the consumer waits for the first
chunk of each block only, the producer counts no tile against the second chunk (announced at the
launch start). Chunk 1 of every rank is held back by the link, so the unsound wait really misses it.
Launched unchecked (silently wrong: the precondition) and checked (SyncopyReadError), three times each.
"""
from __future__ import annotations

import traceback

NC = 4
BR = 8  # rows a program reads or writes: a rank's whole shard, two chunks of 4 rows
# How long the link holds back chunk 1 of every rank, so that the read that misses it comes first even
# where a rank starts its launch late (a first launch probes and compiles). Every launch waits for it:
# measured, a rank reads up to ~0.05 s after its peer's chunk could land without the hold (reads found
# it landed at 0), and every launch still missed it at 0.1 s with both cores busy elsewhere; 0.4 s
# leaves four times that (1.5 s cost the file 25 s more).
LATE_S = 0.4


def _schedule(pattern: str, tensor: str) -> dict:
    return {"pattern": pattern, "tensor": tensor, "dim": 0, "chunks_per_rank": 2, "order": "ring",
            "binding": {"rows": "pid * BR + tl.arange(0, 1)"}}  # one row of the BR read: too narrow


def _launch(fused, pattern: str, x, rank: int, world: int):
    """One launch; returns (this rank's result, torch's answer)."""
    import torch
    import torch.distributed as dist

    m = BR * world
    if pattern == "all_gather":
        full = torch.empty(m, NC)
        dist.all_gather_into_tensor(full, x)
        out = torch.full((m, NC), float("nan"))
        fused[(world,)](x, out, m, NC=NC, BR=BR)
        return out, full * 2.0
    xs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(xs, x)
    c = torch.full((BR, NC), float("nan"))
    fused[(world,)](x.repeat(world, 1), c, m, NC=NC, BR=BR)
    return c, sum(xs) * 2.0  # every rank writes 2 x (its x, repeated): rank r's rows sum 2 x over ranks


def run_case(rank: int, world: int, pattern: str, checked: bool) -> dict:
    """Three launches of the case; per launch the largest error (inf for NaN) or the error's text."""
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.runtime.transport.link import Faults, Link
    from tests.kernels import read_check

    kernel, tensor = (read_check.double_rows, "X") if pattern == "all_gather" else (read_check.double_into, "C")
    # Every rank's chunk 1 lands LATE_S after its chunk 0: the read that misses it comes first.
    late = {(src, 1): LATE_S for src in range(world)} if pattern == "all_gather" else {}
    fused = syncopy.overlap(_schedule(pattern, tensor), poison_receive=True, checked=checked, timeout_s=30,
                            link=Link(latency_s=0.02, jitter_s=0.01), faults=Faults.of(delay=late))(kernel)
    results = []
    for epoch in (1, 2, 3):
        x = torch.randn(BR, NC, generator=torch.Generator().manual_seed(epoch * 101 + rank))
        dist.barrier()
        try:
            got, ref = _launch(fused, pattern, x, rank, world)
            diff = torch.nan_to_num((got - ref).abs(), nan=float("inf"))
            results.append(float(diff.max()))
        except syncopy.SyncopyError as exc:
            results.append(f"{type(exc).__name__}: {exc}")
        except Exception:
            results.append(traceback.format_exc()[-1500:])
    return {"results": results, "file": read_check.__file__}


#: The reads checked mode used to check at the wrong time or not at all: kernel -> what each program stores.
GAPS = ("first_of_block_elif", "finite_rows_while", "block_sum_imported")


def _gap_reference(name: str, full):
    blocks = full[:, 0].reshape(-1, BR)
    if name == "first_of_block_elif":
        return blocks[:, 0]
    if name == "finite_rows_while":
        return blocks.new_full((blocks.shape[0],), float(BR))
    return blocks.sum(1)


def run_gaps(rank: int, world: int) -> dict:
    """Each kernel of GAPS, unchecked (two launches) and checked (three), new data every launch:
    {(kernel, checked): [largest error, or the error's text, per launch]}."""
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.runtime.transport.link import Faults, Link
    from tests.kernels import read_check

    # The chunk the narrow wait misses lands LATE_S late, also where a rank starts a first launch late.
    late = {(src, 1): LATE_S for src in range(world)}
    out: dict = {}
    for name in GAPS:
        for checked in (False, True):
            fused = syncopy.overlap(_schedule("all_gather", "X"), poison_receive=True, checked=checked, timeout_s=30,
                                    link=Link(latency_s=0.02, jitter_s=0.01), faults=Faults.of(delay=late))(getattr(read_check, name))
            results = []
            for epoch in (1, 2, 3)[: 3 if checked else 2]:
                x = torch.randn(BR, NC, generator=torch.Generator().manual_seed(epoch * 131 + rank))
                full = torch.empty(BR * world, NC)
                dist.all_gather_into_tensor(full, x)
                got = torch.full((world,), float("nan"))
                dist.barrier()
                try:
                    fused[(world,)](x, got, BR * world, NC=NC, BR=BR)
                    results.append(float(torch.nan_to_num((got - _gap_reference(name, full)).abs(), nan=float("inf")).max()))
                except syncopy.SyncopyError as exc:
                    results.append(f"{type(exc).__name__}: {exc}")
                except Exception:
                    results.append(traceback.format_exc()[-1500:])
            out[(name, checked)] = results
    return {"results": out, "file": read_check.__file__}


def run_hold_oracle(rank: int, world: int, launches: int) -> list[dict]:
    """An all-gather GEMM under Link(hold_until_waited=True) with poisoned receive buffers, new data
    each launch: per launch its error, the remote chunks, and which chunks landed while a program was
    polling their flag ("waited") or after the hold's bound with none polling ("unwaited")."""
    import syncopy
    from syncopy.runtime.transport.link import Hold, Link
    from tests.world import workers

    # A bound far above a tile's time here: a chunk that lands by the bound says no program waited.
    link = Link(latency_s=0.004, jitter_s=0.004, hold_until_waited=True, hold_s=3.0)
    fused = syncopy.overlap(workers.schedule("gemm2d", 2, "ring"), poison_receive=True, link=link)(workers._kernel("gemm2d"))
    out = []
    for epoch in range(launches):
        p = workers.Problem("gemm2d", rank, world, 24, "float32", seed=70 + epoch)
        before = len(Hold.records)
        p.launch(fused)
        held = Hold.records[before:]
        remote = [g for g in range(world * 2) if g // 2 != rank]
        out.append({"err": p.error(), "remote": remote, "waited": sorted(g for r in held for g in r["waited"]),
                    "unwaited": sorted(g for r in held for g in r["unwaited"])})
    return out


def run_hold_negative_control(rank: int, world: int, launches: int) -> list[dict]:
    """The hold oracle's negative control: AG-GEMM launched over the first rank's rows only (M = its
    8 rows), so no tile of any rank reads the other ranks' chunks. The holding link must report those
    as "unwaited" (released at the hold's bound, no program polling them) and rank 0's chunks, read
    by every other rank's tiles, as "waited"."""
    import torch
    import triton

    import syncopy
    from syncopy.runtime.transport.link import Hold, Link
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    link = Link(latency_s=0.002, hold_until_waited=True, hold_s=3.0)  # far above a tile's time: not a race
    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 2},
                            poison_receive=True, link=link)(ag_gemm_kernel)
    rows, n, k = 8, 8, 8
    out = []
    for epoch in range(launches):
        a = torch.randn(rows, k, generator=torch.Generator().manual_seed(10 * epoch + rank))
        b = torch.randn(k, n, generator=torch.Generator().manual_seed(10 * epoch))
        c = torch.full((rows, n), float("nan"))
        before = len(Hold.records)
        fused[(1,)](a, b, c, rows, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BLOCK_M=8, BLOCK_N=8, BLOCK_K=8, GROUP_M=1)
        held = Hold.records[before:]
        first = torch.empty(world * rows, k)
        import torch.distributed as dist

        dist.all_gather_into_tensor(first, a)
        out.append({"err": float(torch.nan_to_num((c - first[:rows] @ b).abs(), nan=float("inf")).max()),
                    "waited": sorted(g for r in held for g in r["waited"]),
                    "unwaited": sorted(g for r in held for g in r["unwaited"])})
    return out
