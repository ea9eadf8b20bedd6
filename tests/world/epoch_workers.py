"""Rank functions of test_epoch_wrap.py: operators whose epochs cross 2^31 (the int32 words the
device compares wrap there), consumer and producer, on gloo."""
from __future__ import annotations

from syncopy.runtime.transport.link import Link

NEAR = 2**31 - 3  # the epoch the contexts jump to after their first launch: launches 2^31 - 2 ... 2^31 + 1 follow
COUNT_NEAR = 2**31 - 2  # producers: where every chunk's tile counter (and its target) jumps alike
# Per chunk on the link: long enough that a wait which let the launch at the wrap pass at once (a plain
# `flag < epoch`) reads rows that have not landed. Measured with that comparison: 0.05 s still caught it
# on every rank (SyncopyReadError at the wrap), an instant link did not; 0.2 s cost 4 s more.
LATENCY_S = 0.1


def _counters_near_the_wrap(ctx) -> None:
    """A producer context as it would be after ~2^31 counted tiles: each chunk's counter equals its
    last target (the launch that set it completed), one tile short of the int32 limit."""
    import torch

    from syncopy import device as dev

    n = ctx.n_chunks
    at = dev.SIG_HEADER + n + 2
    ctx.targets = [COUNT_NEAR] * n
    ctx.signals[at : at + 2 * n] = torch.full((2 * n,), COUNT_NEAR, dtype=torch.int32)


def _counters(ctx) -> list[int]:
    from syncopy import device as dev

    at = dev.SIG_HEADER + ctx.n_chunks + 2
    return ctx.signals[at : at + ctx.n_chunks].tolist()


def run_across_the_wrap(rank: int, world: int) -> dict:
    """ag_gemm, gemm_rs and gemm_ar: a first launch, then every context jumps near 2^31 (epochs, and
    the producers' tile counters), then four launches with new data. Errors against torch per launch,
    the last epoch word each context holds and the producers' counter words."""
    import torch

    from syncopy import templates

    out: dict = {}
    for name, shape in (("ag_gemm", (8, 16, 16)), ("gemm_rs", (16, 16, 16)), ("gemm_ar", (16, 16, 16))):
        t = templates.get(name)
        mod = t.module
        fused = t.fused(chunks_per_rank=2, poison_receive=True, link=Link(latency_s=LATENCY_S), timeout_s=20)
        errs = []
        for it in range(5):
            if it == 1:
                for ctx, _ in fused.contexts.table.values():
                    ctx.epoch = NEAR
                    if ctx.producer:
                        _counters_near_the_wrap(ctx)
            inp = mod.inputs(rank, world, shape, torch.float32, seed=it)
            got, ref = mod.launch(fused, **inp), mod.reference(**inp)
            errs.append(float(torch.nan_to_num((got - ref).abs(), nan=float("inf")).max()))
        (ctx, _), = fused.contexts.table.values()
        out[name] = {"errs": errs, "epoch": ctx.epoch, "word": int(ctx.ctx[0]), "counters": _counters(ctx) if ctx.producer else None}
    return out
