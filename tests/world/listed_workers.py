"""Rank functions of tests/world/test_listed_tensors.py (spawned: module level).

Each kernel of tests/kernels/listed.py reads several communicated tensors; `run_orders` fuses it with
every order of its list (`tensor: [A, B]` and `[B, A]`, the six orders of three) and launches each
three times with new data against its meaning: every listed tensor gathered with
all_gather_into_tensor, then the formula in torch. Rows per rank (5) are no multiple of the chunk
count (2) nor of a program's rows (4): chunks and tiles are ragged.
"""
from __future__ import annotations

import itertools
import traceback

ROWS = 5  # per rank
LAUNCHES = 3

#: kernel -> (listed tensors in the order the kernel reads them first, columns of a 2-D tensor).
CASES = {
    "swiglu_fwd": (("A", "B"), 8),
    "swiglu_offsets": (("B", "A"), 12),
    "swiglu_desc": (("A", "B"), 8),
    "swiglu_helper": (("B", "A"), 8),
    "swiglu_pair": (("A", "B"), 8),
    "dequant_rows": (("S", "Q"), 8),
    "dequant_row": (("S", "Q"), 12),
    "layernorm_residual": (("X", "RESIDUAL"), 12),
    "layernorm_scaled": (("ROWSCALE", "X", "RESIDUAL"), 12),
}
ONE_D = {"S", "ROWSCALE"}  # a value per row


def orders(kernel: str) -> list[tuple[str, ...]]:
    return list(itertools.permutations(CASES[kernel][0]))


def _shards(kernel: str, rank: int, launch: int) -> dict:
    import torch

    gen = torch.Generator().manual_seed(1000 * launch + 17 * rank + len(kernel))
    names, n = CASES[kernel]
    out = {}
    for name in names:
        if name in ONE_D:
            out[name] = torch.rand(ROWS, generator=gen) + 0.5
        else:
            out[name] = torch.randn(ROWS, n, generator=gen)
    return out


def _gathered(shards: dict, world: int) -> dict:
    import torch
    import torch.distributed as dist

    full = {}
    for name, x in shards.items():
        full[name] = torch.empty((x.shape[0] * world, *x.shape[1:]), dtype=x.dtype)
        dist.all_gather_into_tensor(full[name], x)
    return full


def _layernorm(h, w, eps=1e-5):
    import torch

    return torch.nn.functional.layer_norm(h, (h.shape[-1],), eps=eps) * w


def _launch(fused, kernel: str, s: dict, m: int, w):
    """One launch of the fused kernel on the shards `s` (a listed tensor given at its shard size)."""
    import torch

    n = CASES[kernel][1]
    y = torch.full((m, n), float("nan"))
    if kernel in ("swiglu_fwd", "swiglu_desc", "swiglu_helper", "swiglu_pair"):
        fused[(-(-m // 4),)](s["A"], s["B"], y, m, N=n, BR=4)
    elif kernel == "swiglu_offsets":
        fused[(-(-m // 4),)](s["A"], s["B"], y, m, n, BR=4, BN=8)
    elif kernel == "dequant_rows":
        fused[(-(-m // 4),)](s["Q"], s["S"], y, m, N=n, BR=4)
    elif kernel == "dequant_row":
        fused[(m,)](s["Q"], s["S"], y, n, BN=8)
    elif kernel == "layernorm_residual":
        fused[(m,)](s["X"], s["RESIDUAL"], w, y, n, 1e-5, BLOCK=8)
    else:
        fused[(m,)](s["X"], s["RESIDUAL"], s["ROWSCALE"], w, y, n, 1e-5, BLOCK=16)
    return y


def meaning(kernel: str, g: dict, w):
    """What the kernel computes on the gathered tensors `g`."""
    import torch

    if kernel.startswith("swiglu"):
        return g["A"] * torch.sigmoid(g["A"]) * g["B"]
    if kernel.startswith("dequant"):
        return g["Q"] * g["S"][:, None]
    if kernel == "layernorm_residual":
        return _layernorm(g["X"] + g["RESIDUAL"], w)
    return _layernorm(g["X"] * g["ROWSCALE"][:, None] + g["RESIDUAL"], w)


def run_orders(rank: int, world: int, kernel: str, instant: bool) -> dict:
    """For every order of the kernel's list: "errors", [largest error of each launch (inf for NaN), or
    the error's text]; "tiles", the last launch's (chunk range of each tile, tile of each execution
    slot) from its trace. `instant`: an instant link, no poisoning, unchecked; otherwise the harness's
    slow reordering link, NaN-poisoned receive buffers and checked mode (the harness's default)."""
    import torch

    import syncopy
    from syncopy.runtime.transport.link import Link
    from tests.kernels import listed

    n = CASES[kernel][1]
    m = ROWS * world
    out = {"errors": {}, "tiles": {}}
    for order in orders(kernel):
        schedule = {"pattern": "all_gather", "tensor": list(order), "dim": 0, "chunks_per_rank": 2, "order": "ring"}
        options = {"link": Link(), "checked": False} if instant else {"poison_receive": True, "trace": True}
        results = []
        try:
            fused = syncopy.overlap(schedule, timeout_s=60, **options)(getattr(listed, kernel))
            for launch in range(LAUNCHES):
                shards = _shards(kernel, rank, launch)
                w = torch.randn(n, generator=torch.Generator().manual_seed(launch))
                want = meaning(kernel, _gathered(shards, world), w)
                got = _launch(fused, kernel, shards, m, w)
                results.append(float(torch.nan_to_num((got - want).abs(), nan=float("inf")).max()))
            trace = fused.last_trace
            if trace is not None:
                out["tiles"][", ".join(order)] = (list(map(tuple, trace.tile_ranges)), list(trace.tile_order))
        except syncopy.SyncopyError as exc:
            results.append(f"{type(exc).__name__}: {exc}")
        except Exception:
            results.append(traceback.format_exc()[-1500:])
        out["errors"][", ".join(order)] = results
    return out


def _launched_without_waits(rank: int, world: int, kernel, case: str, tensors: list[str], dropped) -> tuple[list[str], str]:
    """`kernel` listed as `tensors`, fused by a mutant of the passes that drops the waits of the
    bindings `dropped(binding, others)` names, launched LAUNCHES times in checked mode on a slow link
    with chunk 1 of every rank held back (launched as `case` of CASES): each launch's outcome
    ("no error" or the error's type and text), and the fused source."""
    import syncopy
    from syncopy.passes import consumer_wait
    from syncopy.runtime.transport.link import Faults, Link

    original = consumer_wait.insert_waits

    def mutant(body, binding, others=(), **kwargs):
        gone = dropped(binding, others)
        kept = [b.groups for b in gone]
        for b in gone:
            b.groups = []
        try:
            return original(body, binding, others=others, **kwargs)
        finally:
            for b, groups in zip(gone, kept):
                b.groups = groups

    consumer_wait.insert_waits = mutant
    late = {(src, 1): 0.4 for src in range(world)}
    results = []
    try:
        fused = syncopy.overlap({"pattern": "all_gather", "tensor": tensors, "dim": 0, "chunks_per_rank": 2},
                                poison_receive=True, checked=True, timeout_s=30, link=Link(latency_s=0.02, jitter_s=0.01),
                                faults=Faults.of(delay=late))(kernel)
        for launch in range(LAUNCHES):
            try:
                _launch(fused, case, _shards(case, rank, launch), ROWS * world, None)
                results.append("no error")
            except syncopy.SyncopyError as exc:
                results.append(f"{type(exc).__name__}: {exc}")
        return results, fused.source
    finally:
        consumer_wait.insert_waits = original


def run_unwaited(rank: int, world: int) -> dict:
    """A mutant of the passes that drops every wait of the tensor a kernel reads first (dequant_rows
    listed as [Q, S]: S, the second listed tensor), launched three times in checked mode on a slow link
    with chunk 1 of every rank held back: checked mode must see S's reads of a peer's chunk before it
    landed (SyncopyReadError naming S and its line)."""
    from tests.kernels import listed

    results, source = _launched_without_waits(rank, world, listed.dequant_rows, "dequant_rows", ["Q", "S"],
                                              lambda binding, others: [binding])
    return {"results": results, "file": listed.__file__, "unwaited": "wait for the chunks of S" not in source}


def run_pair_unwaited(rank: int, world: int) -> dict:
    """swiglu_pair_b_first (one helper handed both A and B, reading B first) listed as [A, B], with a
    mutant of the passes that drops every wait, launched three times in checked mode with chunk 1 of
    every rank held back: the checked copy of the helper must see its read of B, checked from B's own
    base and block, before B's chunk landed. (Dropping B's waits alone shows nothing: A's wait before
    the call covers B's rows too, which travel with A's.)"""
    from tests.kernels import listed

    results, source = _launched_without_waits(rank, world, listed.swiglu_pair_b_first, "swiglu_pair", ["A", "B"],
                                              lambda binding, others: [binding, *others])
    return {"results": results, "file": listed.__file__,
            "unwaited": "wait for the chunks of B" not in source and "wait for the chunks of A" not in source}


def run_past_the_rows(rank: int, world: int) -> list[str]:
    """swiglu_fwd listed as [B, A] launched with M two rows past the gathered rows: refused before any
    transfer, naming A (read first: its rows order the tiles), not the list."""
    import torch

    import syncopy
    from tests.kernels import listed

    fused = syncopy.overlap({"pattern": "all_gather", "tensor": ["B", "A"], "dim": 0, "chunks_per_rank": 2})(listed.swiglu_fwd)
    s = _shards("swiglu_fwd", rank, 0)
    m = ROWS * world + 2
    try:
        fused[(-(-m // 4),)](s["A"], s["B"], torch.empty(m, 8), m, N=8, BR=4)
        return ["no error"]
    except syncopy.SyncopyError as exc:
        return [f"{type(exc).__name__}: {exc}"]
