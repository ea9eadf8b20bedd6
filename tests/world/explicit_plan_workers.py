"""Rank functions for tests/world/test_explicit_plans.py: full-form plans of every pattern run
through the templates (a2a_gemm, gemm_rs, gemm_ar), against the torch reference and against the
minimal form they were expanded from."""
from __future__ import annotations


def hand_written(template: str, world: int) -> dict:
    """Plans written as a user would (chunks_per_rank 1): every block / partial sent straight to its
    receiver with no steps. a2a_gemm writes them as a plan descriptor does, `chunk` the sender's
    block and `into` where it lands; gemm_rs is the natural direct reduce-scatter; gemm_ar adds every
    partial on every rank (one-shot: `step: 1` everywhere, so every rank sends its own partial)."""
    peers = [(r, d) for r in range(world) for d in range(world) if r != d]
    if template == "a2a_gemm":
        plan = [{"chunk": [d, 0], "from": r, "to": d, "into": [r, 0]} for r, d in peers]
    elif template == "gemm_rs":
        plan = [{"chunk": [d, 0], "from": r, "to": d, "reduce": "sum"} for r, d in peers]
    else:
        plan = [{"chunk": [b, 0], "from": r, "to": d, "reduce": "sum", "step": 1} for b in range(world) for r, d in peers]
    return {"world": world, "chunks_per_rank": 1, "order": "explicit", "transfers": plan}


def run_full_forms(rank: int, world: int, cases: list[dict], latency_s: float) -> list[dict]:
    """Each case: template, shape, and either `expand` (a named order, expanded for this world and
    run next to the minimal form) or `plan` ('hand'). Two launches each with fresh inputs,
    NaN-poisoned receive buffers and a slow link; returns max errors against torch and, for
    expansions, the largest difference from the minimal form's result."""
    import torch
    import syncopy
    from syncopy import templates
    from syncopy.runtime.transport.link import Link
    from syncopy.schedule import from_dict, loads, to_yaml
    from syncopy.schedule.expand import expand

    out = []
    for case in cases:
        t = templates.get(case["template"])
        mod = t.module
        options = dict(poison_receive=True, link=Link(latency_s=latency_s), one_shot_max_bytes=0)
        if "expand" in case:
            minimal = t.schedule(chunks_per_rank=case.get("chunks", 2), order=case["expand"])
            full = loads(to_yaml(expand(minimal, world)))  # what `syncopy expand` writes, loaded back
            fused = {"minimal": syncopy.overlap(minimal, **options)(t.kernel()), "full": syncopy.overlap(full, **options)(t.kernel())}
        else:
            sched = from_dict({**t.schedule().model_dump(exclude_none=True), **hand_written(case["template"], world)})
            fused = {"full": syncopy.overlap(sched, **options)(t.kernel())}
        errs, apart = [], 0.0
        for epoch in range(2):
            inp = mod.inputs(rank, world, case["shape"], torch.float32, seed=epoch + 11)
            got = {label: mod.launch(f, **inp) for label, f in fused.items()}
            ref = mod.reference(**inp)
            scale = max(1.0, ref.float().abs().max().item())
            errs.append((got["full"].float() - ref.float()).abs().max().item() / scale)
            if "minimal" in got:
                apart = max(apart, (got["full"] - got["minimal"]).abs().max().item() / scale)
        ctx, _ = next(iter(fused["full"].contexts.table.values()))
        out.append({"case": case, "errs": errs, "tol": mod.TOLERANCE[torch.float32], "apart": apart,
                    "algorithm": getattr(ctx.plan, "algorithm", None)})
    return out
