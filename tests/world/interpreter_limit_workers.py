"""Rank function of test_interpreter_limits.py (spawned: module level)."""
from __future__ import annotations


def launch_both(rank: int, world: int) -> dict:
    """tests/kernels/interpreter_limits.py's kernels fused (all_gather of X), launched, then through
    `.reference`: what each launch raised, as the user reads it (type, text)."""
    import torch

    import syncopy
    from tests.kernels import interpreter_limits as kernels

    out = {}
    for name in ("scaled_rows", "rsqrt_rows"):
        fn = getattr(kernels, name)
        fused = syncopy.overlap({"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": 2})(fn)
        x = torch.randn(4, 8)
        y = torch.empty(4 * world, 8)
        extra = (1e-6,) if name == "scaled_rows" else ()
        for how, kernel in (("fused", fused), ("reference", fused.reference)):
            try:
                kernel[(4 * world,)](x, y, *extra, N=8)
                out[f"{name} {how}"] = None
            except Exception as exc:
                out[f"{name} {how}"] = (type(exc).__name__, str(exc))
    return out
