"""Rank functions for tests/world/test_loop_order.py (spawned, so module level and picklable).

Each kernel of tests/kernels/loops.py (issue 30, part A) is fused through the decorator with the
default loop order and launched LAUNCHES times with new data, on the shared world's slow reordering
link with NaN-poisoned receive buffers, or on an instant link without poisoning; every launch is
compared (NaN counts as wrong) with the loop's meaning in its written order, computed by torch on
the all-gathered tensors. The loop's decision (arrival or written order) is read off the source
the operator runs.
"""
from __future__ import annotations

import math
import traceback

NC, BR, ROWS = 8, 4, 8            # X: ROWS rows a rank, BR rows an iteration
D, BM, BN, KEYS = 16, 16, 8, 16   # attention: KEYS keys and values a rank, BN an iteration
LAUNCHES = 3
ATTENTION = ("padded_attention", "padded_attention_exp2", "padded_attention_half_guard", "padded_attention_mask_tensor",
             "guarded_padded_attention")


def _gathered(x):
    import torch
    import torch.distributed as dist

    full = torch.empty((dist.get_world_size() * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype)
    dist.all_gather_into_tensor(full, x.contiguous())
    return full


def _column_meaning(name: str, full, t: float):
    """What kernel `name` writes (its `out`, row by row), the loop run in its written order."""
    import torch

    zero = torch.zeros(NC)
    acc, s, n, prefix = zero, zero, zero, zero
    top, low, best = zero - math.inf, zero + math.inf, zero - math.inf
    history = []
    for b in full.view(-1, BR, NC):
        block_sum, block_max = b.sum(0), b.max(0).values
        new_top, new_low = torch.maximum(top, block_max), torch.minimum(low, b.min(0).values)
        if name == "rescaled_plain_sum":
            safe = torch.where(new_top == -math.inf, zero, new_top)
            acc = acc * torch.exp(top - safe) + block_sum
        else:
            acc = acc * 0.5 + block_sum
        n = n + (block_max > top).float()
        if name == "sum_of_running_max":
            s = s + new_top
        elif name == "sum_until_max_passes":
            s = s + torch.where(new_top < t, block_sum, zero)
        elif name == "sum_above_running_min":
            s = s + block_sum - BR * new_low
        else:
            s = s + block_sum
        prefix = prefix + block_sum
        best = torch.maximum(best, prefix)
        top, low = new_top, new_low
        history.append(top)
    rows = {"decayed_sum_with_max": [acc, top], "decayed_sum_two_step_max": [acc, top], "rescaled_plain_sum": [acc],
            "sum_of_running_max": [s], "sum_until_max_passes": [s], "sum_above_running_min": [s], "count_new_records": [n],
            "max_of_running_sum": [best], "max_history_helper": [top, *history], "max_history_nested_helper": [top, *history],
            "max_history_store": [top, *history], "sum_and_atomic_helper": [s, s], "sum_max_count": [s, top, low]}
    return torch.stack(rows[name])


def _attention_meaning(q, k, v, length: int, scale: float):
    import torch

    scores = (q @ k.T) * scale
    scores[:, length:] = float("-inf")
    return torch.softmax(scores, 1) @ v


def _launch(name: str, fused, rank: int, world: int, seed: int):
    """(output, torch's answer) for one launch of kernel `name` with new data."""
    import torch

    g = torch.Generator().manual_seed(seed * 31 + rank)
    if name in ATTENTION:
        q, k, v = (torch.randn(n, D, generator=g) for n in (BM, KEYS, KEYS))
        n = world * KEYS
        # Launch 1: every rank but 0 holds only padding (its own blocks are all -inf); 2: the last
        # rank only; 3: no padding. Unguarded, arrival order would run an all-padding block first.
        length = {0: 5, 1: n - KEYS - 3, 2: n}[seed % 3]
        out = torch.full((BM, D), float("nan"))
        args = (torch.ones(n, dtype=torch.int32).masked_fill(torch.arange(n) >= length, 0),) if name.endswith("mask_tensor") \
            else ()
        if args:
            fused[(1,)](q, k, v, *args, out, BM, n, 0.25, D=D, BM=BM, BN=BN)
        else:
            fused[(1,)](q, k, v, out, BM, n, length, 0.25, D=D, BM=BM, BN=BN)
        return out, _attention_meaning(q, _gathered(k), _gathered(v), length, 0.25)
    x = torch.randn(ROWS, NC, generator=g)
    full = _gathered(x)
    m = full.shape[0]
    ref = _column_meaning(name, full, 1.0)
    out = torch.zeros_like(ref) if name == "sum_and_atomic_helper" else torch.full_like(ref, float("nan"))
    if name == "sum_until_max_passes":
        fused[(1,)](x, out, m, 1.0, NC=NC, BR=BR)
    else:
        fused[(1,)](x, out, m, NC=NC, BR=BR)
    return out, ref


def run_cases(rank: int, world: int, names: list[str], instant: bool) -> dict:
    """Every kernel of `names`: its decision and (label, relative error) per launch, NaN as inf."""
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.runtime.transport.link import Link
    from tests.kernels import loops

    out = {"errors": [], "problems": [], "decisions": {}}
    options = dict(link=Link(), poison_receive=False) if instant else dict(poison_receive=True)
    for ci, name in enumerate(names):
        try:
            tensor = ["K", "V"] if name in ATTENTION else "X"
            fused = syncopy.overlap({"pattern": "all_gather", "tensor": tensor, "dim": 0, "chunks_per_rank": 2,
                                     "order": "ring"}, **options)(getattr(loops, name))
            source = fused.build().stages["fused"]
            out["decisions"][name] = "arrival" if "for syncopy_t in range(0, syncopy_n):" in source else \
                "written" if "# syncopy: this loop keeps its written order" in source else "?"
            for launch in range(LAUNCHES):
                dist.barrier()  # start together: a late rank would find its chunks already there
                got, ref = _launch(name, fused, rank, world, ci * 3 + launch)
                diff = torch.nan_to_num((got.float() - ref.float()).abs(), nan=float("inf"), posinf=float("inf"))
                out["errors"].append((f"{name} launch {launch + 1}", float(diff.max()) / max(1.0, float(ref.abs().max()))))
        except Exception as exc:  # keep going: the test names every failing case
            out["errors"].append((f"{name} raised", float("inf")))
            out["problems"].append(f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}")
    return out
