"""The compile step of a first launch, kept apart from its waits: on GPUs Triton compiles the fused
kernel at its first launch with a new specialisation, which may take longer than `timeout_s` (a
minute for a 3-rank fp16 all_reduce); the launch compiles it before its transfers and waits start
(TileOrders.prepared), and every rank meets the others once compiled (control.prepared)."""
from __future__ import annotations

from syncopy.runtime.where import interpreting


def compile_kernel(fused, grid, args: dict, options: dict) -> None:
    """Compile `fused` for a launch with `args` and `options` without running it. The interpreter
    compiles nothing, but parses and rewrites a kernel's source at its first run: done here."""
    if interpreting():
        rewrite = getattr(fused, "rewrite", None)
        if rewrite is not None:
            rewrite()
        return
    warmup = getattr(fused, "warmup", None)
    if warmup is None:
        return
    try:
        warmup(grid=grid, **args, **options)
    except Exception:  # the launch itself compiles again and reports what is wrong, where it is
        pass
