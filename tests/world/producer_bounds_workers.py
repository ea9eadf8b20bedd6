"""Rank functions for tests/world/test_producer_bounds.py: the kernels of tests/kernels/producer_bounds.py
under reduce_scatter and all_reduce, LAUNCHES launches each with new data, each launch's result
against torch (every kernel writes C[r, :] = 2 A[r, :] + 1 for every row r, so the reduced output is
the sum over ranks of that). An announcement made before a chunk's last store sends the chunk's
rows as they were at the flag (the gloo backend takes them then, as a copy engine does): rows the
kernel had not stored yet are the partial's start (zeros for reduce_scatter, the user's C for
all_reduce), and the result is wrong."""
from __future__ import annotations

import traceback

N = BN = 8
CHUNKS = 4
LAUNCHES = 3
TOL = 1e-5
#: kernel -> (extra scalars/constexprs, rows per program)
SHAPES = {
    "mod_rows": (dict(BM=8), 8),
    "mod_rows_loop": (dict(T=3, BM=4), 12),
    "floordiv_rows_loop": (dict(T=3, BM=4), 12),
    "loaded_rows_loop": (dict(T=3, BM=4), 12),
    "mixed_corner": (dict(I=3, J=2, Q=2), 12),
    "mixed_corner_masked": (dict(I=4, J=2, Q=2), 16),
    "masked_tail_loop": (dict(T=4, BM=4), 16),
    "while_rows": (dict(T=3, BM=4), 12),
    "early_return_loop": (dict(T=3, BM=4), 12),
    "helper_rows": (dict(BM=8), 8),
    "helper_wrapped_loop": (dict(T=3, BM=4), 12),
    "kept_return": (dict(BM=4), 8),  # programs cover the first half of the rows, and the second
}
ALL = list(SHAPES)


def rows(world: int) -> int:
    return 12 * world  # 3 rows a chunk at 4 chunks a rank: a program's stores straddle chunks


def _launch(fn, name: str, a, c, m: int, launch: int, perm) -> None:
    import triton

    meta, band = SHAPES[name]
    grid = (triton.cdiv(m, band) + (1 if name == "early_return_loop" else 0),)
    args = [a, c] + ([perm] if name == "loaded_rows_loop" else []) + [m, N]
    if name in ("mod_rows", "mod_rows_loop", "early_return_loop", "helper_wrapped_loop"):
        args.append(9 + 8 * launch)  # SHIFT: each launch wraps its rows elsewhere
    fn[grid](*args, BN=BN, **meta)


def written(name: str, m: int):
    """The rows kernel `name` writes (the others keep the partial's start: zeros for reduce_scatter,
    the user's C for all_reduce)."""
    import torch

    rows = torch.ones(m, dtype=torch.bool)
    if name == "kept_return":
        rows[m // 2:m // 2 + SHAPES[name][0]["BM"]] = False  # program 0's second block
    return rows


def run_bounds_cases(rank: int, world: int, cases: list[tuple[str, str, bool]], poison: bool) -> list[dict]:
    """For each (kernel, pattern, checked): one operator, LAUNCHES launches with new data; per launch
    the error against torch (NaN-aware: inf where any element is NaN), and chunks announced early."""
    import torch
    import torch.distributed as dist

    import syncopy
    from tests.kernels import producer_bounds

    m = rows(world)
    out = []
    for name, pattern, checked in cases:
        res: dict = {"name": name, "pattern": pattern, "checked": checked, "errors": [], "early": []}
        try:
            sched = {"pattern": pattern, "tensor": "C", "dim": 0, "chunks_per_rank": CHUNKS, "order": "ring"}
            fused = syncopy.overlap(sched, poison_receive=poison, trace=True, timeout_s=30,
                                    checked=checked)(getattr(producer_bounds, name))
            res["fresh"] = fused.build().fresh_probe
            for launch in range(LAUNCHES):
                g = torch.Generator().manual_seed(1000 * launch + 10 * rank + 3)
                a = torch.randn(m, N, generator=g)
                c = torch.randn(m, N, generator=g)
                perm = torch.randperm(m, generator=g).to(torch.int32)
                start = c if pattern == "all_reduce" else torch.zeros_like(c)
                want = torch.where(written(name, m)[:, None], 2 * a + 1, start)
                dist.all_reduce(want)
                if pattern == "reduce_scatter":
                    part = m // world
                    want = want[rank * part:(rank + 1) * part]
                    got = torch.full_like(want, float("nan"))
                else:
                    got = c.clone()
                _launch(fused, name, a, got, m, launch, perm)
                diff = torch.nan_to_num((got - want).abs(), nan=float("inf"))
                res["errors"].append(float(diff.max().item() / max(1.0, want.abs().max().item())))
                tr = fused.last_trace
                res["early"].append(sum(1 for t in tr.ready.values() if t < tr.kernel_s[1]))
        except Exception as exc:
            res["error"] = f"{type(exc).__name__}: {exc}"
            res["tb"] = traceback.format_exc()
            return out + [res]  # the peers may be stuck in this case: stop here
        out.append(res)
    return out
