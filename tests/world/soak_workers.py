"""Rank functions of the chunk-checksum worlds (tests/world/test_soak.py): one template, three
operators (checksums on a clean link; checksums with a corrupt chunk; a corrupt chunk unchecked), each
launched a few times with fresh inputs, NaN-poisoned receive buffers and the harness's slow link."""
from __future__ import annotations

LAUNCHES = 2


def _wrong_elements(out, ref, tolerance: float) -> int:
    diff = (out.float() - ref.float()).abs()
    return int((~(diff <= tolerance * max(1.0, ref.float().abs().max().item()))).sum().item())


def _launches(fused, mod, rank: int, world: int, shape, seed: int) -> list[dict]:
    """LAUNCHES launches with fresh inputs; per launch the error (type, text, chunk, epoch) or the
    count of elements that differ from torch."""
    import torch

    from syncopy.errors import SyncopyError

    out = []
    for it in range(LAUNCHES):
        inp = mod.inputs(rank, world, shape, torch.float32, seed=seed + it)
        try:
            result = mod.launch(fused, **inp)
        except SyncopyError as exc:
            result = None
            out.append({"type": type(exc).__name__, "str": str(exc), "chunk": getattr(exc, "chunk", None),
                        "epoch": getattr(exc, "epoch", None), "peer": getattr(exc, "peer", None)})
        else:
            out.append({"type": None})
        ref = mod.reference(**inp)  # every rank: the launches above never break the group
        if result is not None:
            out[-1]["wrong"] = _wrong_elements(result, ref, mod.TOLERANCE[torch.float32])
    return out


def run_checksums(rank: int, world: int, name: str, shape: tuple, corrupt: tuple) -> dict:
    import torch

    from syncopy import templates
    from syncopy.runtime.transport.link import Faults

    torch.set_num_threads(1)
    t = templates.get(name)
    mod = t.module
    faults = Faults.of(corrupt=[corrupt])
    return {
        "clean": _launches(t.fused(poison_receive=True, verify_chunks=True, timeout_s=30), mod, rank, world, shape, 10),
        "caught": _launches(t.fused(poison_receive=True, verify_chunks=True, faults=faults, timeout_s=30), mod, rank, world, shape, 20),
        "unchecked": _launches(t.fused(poison_receive=True, faults=faults, timeout_s=30), mod, rank, world, shape, 30),
    }
