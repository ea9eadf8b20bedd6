"""Rank functions for tests/world/test_consumer_waits.py (spawned, so module level and picklable).

Each case fuses one kernel of tests/kernels/waits.py (issue 10, part A) through the decorator with a
holding link (Link(hold_until_waited=True), runtime/transport/link.py Hold: each remote chunk stays
out of the receive buffer, its flag down, until a program of the kernel was seen polling that flag,
so it lands while a tile waits for it) and a NaN-poisoned receive buffer, and launches it LAUNCHES
times with new data and new index tensors; every launch is compared with the kernel's meaning
computed by torch on the all-gathered tensor, and reports which remote chunks the kernel reads and
which the link saw a program wait for ("waited") or released at its bound with none polling
("unwaited"): the precondition that the numbers test a wait at all (issue 26).
"""
from __future__ import annotations

import traceback

NC = 8  # columns of X
# A bound far above a tile's time here: a chunk a kernel reads that lands by the bound says no program waited.
HOLD = dict(latency_s=0.002, hold_until_waited=True, hold_s=3.0)
# A first launch and a warm one, each with new data and index tensors (a third found nothing the second
# does not: launches past the first take the same warm path; tests/world/test_epoch_wrap.py checks epochs).
LAUNCHES = 2


def _gathered(x):
    import torch
    import torch.distributed as dist

    full = torch.empty(dist.get_world_size() * x.shape[0], x.shape[1], dtype=x.dtype)
    dist.all_gather_into_tensor(full, x.contiguous())
    return full


def _blocks(full, br: int):
    """Row blocks of `full` ([nb, br, NC]), the last zero-padded."""
    import torch

    m = full.shape[0]
    nb = -(-m // br)
    padded = torch.zeros(nb * br, full.shape[1], dtype=torch.float32)
    padded[:m] = full.float()
    return padded.view(nb, br, full.shape[1])


def _run(name: str, fused, x, full, gen):
    """Launch `fused` (or the local kernel) for kernel `name`; returns (output, torch's answer, the
    rows of X it reads). Every kernel but gather_rows reads every row at these shapes."""
    out, ref, *rows = _launch(name, fused, x, full, gen)  # gather_rows: also the indices it read
    return out, ref, sorted(set(rows[0].tolist())) if rows else list(range(full.shape[0]))


def _launch(name: str, fused, x, full, gen):
    import torch

    m = full.shape[0]
    f = full.float()
    if name == "masked_quad":
        bm = 2
        out = torch.full((m, NC), float("nan"))
        fused[(-(-m // (4 * bm)),)](x, out, m, NC=NC, BM=bm)
        return out, f * 2.0 + 1.0
    if name == "reverse_scan":
        out = torch.full((2, NC), float("nan"))
        fused[(2,)](x, out, m, NC=NC)
        weights = 0.5 ** torch.arange(m, dtype=torch.float32)
        return out, (weights[:, None] * f).sum(0).expand(2, NC)
    if name == "nested_steps":
        outer, inner = 2, 3
        out = torch.full((m // (outer * inner), NC), float("nan"))
        fused[(m // (outer * inner),)](x, out, NC=NC, OUTER=outer, INNER=inner)
        return out, f.view(-1, outer * inner, NC).sum(1)
    if name == "ring_rows":
        br = 4
        blocks = _blocks(full, br)
        nb = blocks.shape[0]
        out = torch.full((nb * br, NC), float("nan"))
        fused[(nb,)](x, out, m, NC=NC, BR=br, NB=nb)
        ref = torch.stack([sum(blocks[(p + i) % nb] * 0.5 ** (nb - 1 - i) for i in range(nb)) for p in range(nb)])
        return out, ref.view(nb * br, NC)
    if name in ("helper_block", "helper_wrapped"):
        br = 4
        out = torch.full((m, NC), float("nan"))
        nb = -(-m // br)
        fused[(nb,)](x, out, m, NC=NC, BR=br)
        if name == "helper_block":
            return out, f * 3.0
        blocks = _blocks(full, br)
        return out, torch.stack([blocks[p] + blocks[(p + 1) % nb] for p in range(nb)]).view(-1, NC)[:m]
    if name == "helper_pid":
        br = 4
        blocks = _blocks(full, br)
        out = torch.full((blocks.shape[0], NC), float("nan"))
        fused[(blocks.shape[0],)](x, out, m, NC=NC, BR=br)
        return out, blocks.sum(1)
    if name == "gather_rows":
        n = m + 3
        # Every row once and three more, shuffled: new indices every launch, and every chunk read
        # (a chunk no program reads would be held to the link's bound, seconds, and tell nothing).
        idx = torch.cat([torch.arange(m), torch.randint(0, m, (n - m,), generator=gen)])
        idx = idx[torch.randperm(n, generator=gen)].to(torch.int32)
        out = torch.full((n, NC), float("nan"))
        fused[(n,)](x, idx, out, NC=NC)
        return out, f[idx.long()], idx
    if name == "persistent_blocks":
        br, programs = 4, 2
        blocks = _blocks(full, br)
        nb = blocks.shape[0]
        order = torch.randperm(nb, generator=gen).to(torch.int32)
        out = torch.full((nb * br, NC), float("nan"))
        fused[(programs,)](x, order, out, nb, m, NC=NC, BR=br, NP=programs)
        return out, blocks[order.long()].view(-1, NC)
    if name in ("while_own_end", "swizzled_tiles", "prefetch_next"):
        br = 4
        blocks = _blocks(full, br)
        nb = blocks.shape[0]
        out = torch.full((m, NC), float("nan"))
        if name == "while_own_end":
            per = 2
            fused[(-(-nb // per),)](x, out, nb, m, NC=NC, BR=br, PER=per)
            return out, f * 2.0
        if name == "swizzled_tiles":
            fused[(2,)](x, out, nb, m, NC=NC, BR=br, NP=2, G=3)  # tiles 0, 2, 4 read blocks 0, 4, 3
            return out, f * 2.0 + 1.0
        fused[(2,)](x, out, nb, m, NC=NC, BR=br, NP=2)
        return out, f * 2.0
    if name == "persistent_wrapped":
        br = 4
        blocks = _blocks(full, br)
        nb = blocks.shape[0]
        out = torch.full((nb * br, NC), float("nan"))
        fused[(2,)](x, out, nb, m, NC=NC, BR=br, NP=2)
        return out, torch.stack([blocks[t] + blocks[(t + 1) % nb] for t in range(nb)]).view(-1, NC)
    if name == "stream_k":
        br, ks = 2, 3
        blocks = _blocks(full, br)
        tiles = blocks.shape[0] // ks
        out = torch.zeros((tiles * br, NC))
        fused[(4,)](x, out, tiles * ks, m, NC=NC, BR=br, KS=ks, NP=4)
        return out, blocks[: tiles * ks].view(tiles, ks, br, NC).sum(1).reshape(-1, NC)
    raise KeyError(name)


def _remote_chunks_read(fused, rank: int, rows: list[int]) -> list[int]:
    """The chunks of other ranks that hold a row of `rows` (rows of the gathered X)."""
    ctx, _ = next(iter(fused.contexts.table.values()))
    plan = ctx.plan
    read = []
    for g in range(ctx.n_chunks):
        lo, hi = plan.bounds(g)
        if g // plan.chunks_per_rank != rank and any(lo <= r < hi for r in rows):
            read.append(g)
    return read


def run_cases(rank: int, world: int, cases: list[dict]) -> dict:
    """Every case: {id, kernel, chunks, rows, order}. Returns (label, error) per launch, the problems
    (exceptions) by case, and per launch what the holding link saw: {"label", "read" (remote chunks
    the kernel reads), "waited", "unwaited"}."""
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.runtime.transport.link import Hold, Link
    from tests.kernels import waits

    out = {"errors": [], "problems": [], "binding": {}, "checked": [], "held": []}
    for ci, case in enumerate(cases):
        try:
            name = case["kernel"]
            fused = syncopy.overlap({"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": case["chunks"],
                                     "order": case["order"]}, poison_receive=True, link=Link(**HOLD))(getattr(waits, name))
            out["binding"][case["id"]] = fused.build().stages["binding"]
            out["checked"].append(fused.build().checked)  # every read verified by the read checker (harness checked=True)
            for epoch in range(1, LAUNCHES + 1):
                seed = (ci * 10 + epoch) * 1009
                x = torch.randn(case["rows"], NC, generator=torch.Generator().manual_seed(seed + rank * 7 + 1))
                gen = torch.Generator().manual_seed(seed + 999_983 + rank)  # index tensors differ by rank and launch
                full = _gathered(x)
                dist.barrier()  # start together (the holding link keeps a chunk out until a tile polls it anyway)
                before = len(Hold.records)
                got, ref, rows = _run(name, fused, x, full, gen)
                held = Hold.records[before:]
                label = f"{case['id']} launch {epoch}"
                diff = torch.nan_to_num((got.float() - ref.float()).abs(), nan=float("inf"))
                out["errors"].append((label, float(diff.max().item() / max(1.0, ref.abs().max().item()))))
                out["held"].append({"label": label, "read": _remote_chunks_read(fused, rank, rows),
                                    "waited": sorted(g for r in held for g in r["waited"]),
                                    "unwaited": sorted(g for r in held for g in r["unwaited"])})
        except Exception as exc:  # keep going: the test names every failing case
            out["errors"].append((f"{case['id']} raised", float("inf")))
            out["problems"].append(f"{case['id']}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}")
    return out
