"""`syncopy run NAME --world N`: a template end to end on a CPU world, verified against torch.

Ranks are started with torch's own launcher (`torch.distributed.launcher.elastic_launch`, the
machinery behind torchrun); inside an existing torchrun world (RANK/WORLD_SIZE set) that world is used.
"""
from __future__ import annotations

import os
import time

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _rank_main(name, shape, dtype_name, chunks, order, iters, backend):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import torch.distributed as dist

    from syncopy import templates

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, DTYPES[dtype_name])
    t = templates.get(name)
    mod = t.module
    fused = t.fused(chunks_per_rank=chunks, order=order, backend=backend, poison_receive=True)
    shape = tuple(shape) if shape else mod.DEFAULT_SHAPE
    worst, times = 0.0, []
    for it in range(iters):
        inp = mod.inputs(rank, world, shape, dtype, seed=it)
        start = time.perf_counter()
        out = mod.launch(fused, **inp)
        times.append(time.perf_counter() - start)
        ref = mod.reference(**inp)
        scale = max(1.0, ref.float().abs().max().item())
        err = (out.float() - ref.float()).abs().max().item() / scale
        worst = max(worst, err if err == err else float("inf"))
    return {"rank": rank, "max_err": worst, "ok": worst <= mod.TOLERANCE[dtype], "median_s": sorted(times)[len(times) // 2]}


def run(name: str, world: int, shape=None, dtype="fp32", chunks=None, order=None, iters=2, backend="auto") -> list[dict]:
    """Run template `name` on `world` CPU ranks (or the current torchrun world); per-rank results."""
    from syncopy import templates

    templates.get(name)  # unknown names fail here, before any process starts
    args = (name, shape, dtype, chunks, order, iters, backend)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return [_rank_main(*args)]
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ["TRITON_INTERPRET"] = "1"
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=world, run_id=f"syncopy-{os.getpid()}",
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.1,
                          start_method="spawn")
    results = elastic_launch(config, _rank_main)(*args)
    return [results[r] for r in sorted(results)]
