"""Rank functions for the producer-semantics world tests (tests/world/test_producer_semantics.py):
the kernels of tests/kernels/producer_cases.py under reduce_scatter and all_reduce, two launches
each with new data (and a new data layout: `_variant`), a slow jittery link and NaN-poisoned outputs. Each launch is checked three ways:
the fused operator, its `reference`, and a torch model of the kernel (what it does to a full output
that starts as the user's C for all_reduce, as zeros for reduce_scatter), summed with dist.all_reduce."""
from __future__ import annotations

import traceback

BM = BN = BK = 16
N, K = 32, 24
CHUNKS = 2
LAUNCHES = 2
VARIANTS = 3  # data layouts of rows_by_index, scatter_add_rows (and skip_by_flag's skipped tile)
TOL = 1e-4


def _rows(world: int) -> int:
    return 12 * world  # 6 rows per chunk at 2 chunks per rank: 16-row tiles straddle chunks


def _model(name: str, c: "torch.Tensor", a, b, extra: dict):
    """What kernel `name` leaves in the full output `c` (float32 torch, no Triton)."""
    import torch

    c = c.clone()
    prod = a @ b
    m = c.shape[0]
    if name in ("splitk_atomic", "accumulate"):
        c += prod
    elif name == "partial_grid":
        mw, nw = extra["MW"], extra["NW"]
        c[:mw, :nw] = prod[:mw, :nw]
    elif name == "lower_triangular":
        for i in range(-(-m // BM)):
            for j in range(-(-N // BN)):
                if j <= i:
                    c[i * BM:(i + 1) * BM, j * BN:(j + 1) * BN] = prod[i * BM:(i + 1) * BM, j * BN:(j + 1) * BN]
    elif name == "rows_by_index":
        c[extra["perm"].long()] = prod
    elif name == "scatter_add_rows":
        c.index_add_(0, extra["dest"].long(), prod)
    elif name == "skip_by_flag":
        skip = extra["skip"].view(-(-m // BM), -(-N // BN))
        for i in range(skip.shape[0]):
            for j in range(skip.shape[1]):
                if not skip[i, j]:
                    c[i * BM:(i + 1) * BM, j * BN:(j + 1) * BN] = prod[i * BM:(i + 1) * BM, j * BN:(j + 1) * BN]
    else:
        raise KeyError(name)
    return c


def _launch(fn, name: str, a, b, c, m: int, extra: dict, group=None) -> None:
    import triton

    tiles = (triton.cdiv(m, BM), triton.cdiv(N, BN))
    meta = dict(BM=BM, BN=BN, BK=BK, group=group)
    if name == "splitk_atomic":
        fn[tiles + (2,)](a, b, c, m, N, K, SPLIT=2, **meta)
    elif name == "partial_grid":
        fn[(triton.cdiv(extra["MW"], BM), triton.cdiv(extra["NW"], BN))](a, b, c, m, N, K, extra["MW"], extra["NW"], **meta)
    elif name == "rows_by_index":
        fn[tiles](a, b, c, extra["perm"], m, N, K, **meta)
    elif name == "scatter_add_rows":
        fn[tiles](a, b, c, extra["dest"], m, N, K, **meta)
    elif name == "skip_by_flag":
        fn[tiles](a, b, c, extra["skip"], m, N, K, **meta)
    else:
        fn[tiles](a, b, c, m, N, K, **meta)


def _variant(world: int, pattern: str, launch: int) -> int:
    """The data layout of a launch: at world 2 reduce_scatter takes layouts 0 and 1, all_reduce 1 and
    2; beyond world 2 (one pattern a kernel) 2 and 0. So every kernel meets every layout and every
    layout both patterns, in two launches a case (three a case, layouts 0, 1, 2 each, took half as long again)."""
    first = 2 if world > 2 else 0 if pattern == "reduce_scatter" else 1
    return (first + launch) % VARIANTS


def _inputs(name: str, rank: int, world: int, m: int, launch: int, variant: int) -> tuple:
    import torch

    g = torch.Generator().manual_seed(1000 * launch + 10 * rank + 7)
    a, b = torch.randn(m, K, generator=g), torch.randn(K, N, generator=g)
    c = torch.randn(m, N, generator=g)  # all_reduce: the user's C, which the kernel must see
    extra: dict = {}
    if name == "partial_grid":
        # Rows past MW are never written: with world 2 the last chunk has no tile at all.
        extra = {"MW": m - 7 - launch, "NW": N - 5}
    elif name == "rows_by_index":
        # Identity, reversed, random: each launch's tiles write other chunks than the last one's.
        perm = [torch.arange(m), torch.arange(m - 1, -1, -1), torch.randperm(m, generator=g)][variant]
        extra = {"perm": perm.to(torch.int32)}
    elif name == "scatter_add_rows":
        # Anywhere (rows repeat, others stay unwritten), then the first half only, then one row.
        dest = [torch.randint(0, m, (m,), generator=g), torch.randint(0, m // 2, (m,), generator=g),
                torch.full((m,), m - 1)][variant]
        extra = {"dest": dest.to(torch.int32)}
    elif name == "skip_by_flag":
        tiles = -(-m // BM) * -(-N // BN)
        skip = (torch.rand(tiles, generator=g) < 0.5).to(torch.int32)
        skip[variant % tiles] = 1  # at least one tile stores nothing, a different one each launch
        extra = {"skip": skip}
    return a, b, c, extra


def _error(got, want) -> float:
    import torch

    diff = torch.nan_to_num((got.float() - want).abs(), nan=float("inf"))
    return float(diff.max().item() / max(1.0, want.abs().max().item()))


def run_producer_cases(rank: int, world: int, cases: list[tuple[str, str]]) -> list[dict]:
    """For each (kernel, pattern) of `cases`, LAUNCHES launches of one operator: errors of fused and
    reference against the torch model, per launch, and how many chunks were announced before the kernel ended."""
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.runtime.transport.link import Link
    from tests.kernels import producer_cases

    m = _rows(world)
    out = []
    for name, pattern in cases:
        res: dict = {"name": name, "pattern": pattern, "fused": [], "reference": [], "early": []}
        try:
            sched = {"pattern": pattern, "tensor": "C", "dim": 0, "chunks_per_rank": CHUNKS, "order": "ring"}
            fused = syncopy.overlap(sched, poison_receive=True, trace=True, timeout_s=30,
                                    link=Link(latency_s=0.01, jitter_s=0.01))(getattr(producer_cases, name))
            res["checked"] = fused.build().checked  # every store verified by the read checker (harness checked=True)
            for launch in range(LAUNCHES):
                a, b, c, extra = _inputs(name, rank, world, m, launch, _variant(world, pattern, launch))
                start = c if pattern == "all_reduce" else torch.zeros_like(c)
                want = _model(name, start, a, b, extra)
                dist.all_reduce(want)
                if pattern == "reduce_scatter":
                    part = m // world
                    want = want[rank * part:(rank + 1) * part]
                    c_fused, c_ref = torch.full_like(want, float("nan")), torch.full_like(want, float("nan"))
                else:
                    c_fused, c_ref = c.clone(), c.clone()
                _launch(fused, name, a, b, c_fused, m, extra)
                res["fused"].append(_error(c_fused, want))
                tr = fused.last_trace
                res["early"].append(sum(1 for t in tr.ready.values() if t < tr.kernel_s[1]))
                _launch(fused.reference, name, a, b, c_ref, m, extra)
                res["reference"].append(_error(c_ref, want))
        except Exception as exc:
            res["error"] = f"{type(exc).__name__}: {exc}"
            res["tb"] = traceback.format_exc()
            return out + [res]  # the peers may be stuck in this case: stop here
        out.append(res)
    return out
