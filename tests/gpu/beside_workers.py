"""Rank functions of the GPU tests of issue 28's defects 6 and 7 (module level, so that spawned ranks
can import them): nccl beside another NCCL communicator (DDP's), and worlds started with
CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue; CUDA reads it when it makes the device's context,
so the parent sets it before spawning). Each check's record is made by workers._check: a check
that raises is recorded, not propagated. Imports happen inside the functions: the spawned rank
sets TRITON_INTERPRET=0 first.
"""
from __future__ import annotations

from tests.gpu.workers import META, _check, _gathered, _rel_err


def _ag_gemm_beside_ddp(rank: int, world: int, launches: int = 6) -> dict:
    """ag_gemm on nccl, launch after launch, each followed by a DDP step (its gradient all-reduce on
    DDP's own NCCL communicator and stream) and an all_reduce on that communicator from another
    stream, nothing synchronised in between: every result against torch, and what the fused kernel
    left free for the other communicator."""
    import warnings

    import torch
    import torch.distributed as dist

    from syncopy import templates
    from syncopy.runtime.streams import occupancy

    dev = torch.device("cuda", torch.cuda.current_device())
    other = dist.new_group(backend="nccl")  # DDP's communicator, not syncopy's
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256).to(dev), device_ids=[dev.index],
                                                      process_group=other)
    t = templates.get("ag_gemm")
    fused = t.fused(chunks_per_rank=2, order="ring", backend="nccl", poison_receive=True, timeout_s=20.0)
    side = torch.cuda.Stream()
    rows, n, k = 256, 128, 64
    outs, sums, told = [], [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for it in range(launches):
            full, b = _gathered(world, rows, k, n, seed=40 + it)
            a = full[rank * rows:(rank + 1) * rows].contiguous().to(dev)
            outs.append((t.module.launch(fused, a, b.to(dev), **META, GROUP_M=4), full, b))
            model(torch.randn(32, 256, device=dev, generator=torch.Generator(device=dev).manual_seed(it))).square().sum().backward()
            x = torch.full((1 << 16,), float(rank + 1 + it), device=dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                dist.all_reduce(x, group=other)
            sums.append(x)
        told = [str(w.message) for w in caught if "another NCCL communicator" in str(w.message)]
    fused.synchronize()
    torch.cuda.synchronize()
    worst = max(_rel_err(c, full.to(dev).float() @ b.to(dev).float()) for c, full, b in outs)
    expected = [sum(r + 1 + it for r in range(world)) for it in range(launches)]
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    gathered = [torch.empty_like(grads) for _ in range(world)]
    dist.all_gather(gathered, grads, group=other)
    return {"worst": worst, "sums_right": all(bool((s == e).all()) for s, e in zip(sums, expected)),
            "grads_equal": all(torch.equal(g, gathered[0]) for g in gathered), "reserved": occupancy.reserved_sms("nccl"),
            "uncapped": occupancy.uncapped_sms(), "told": told}


def nccl_beside_ddp(rank: int, world: int) -> dict:
    import torch

    torch.cuda.set_device(rank)
    return {"beside ddp": _check("beside ddp", lambda: _ag_gemm_beside_ddp(rank, world))}


def single_queue_world1(rank: int, world: int) -> dict:
    """A world of one started with CUDA_DEVICE_MAX_CONNECTIONS=1: tp_mlp's pipeline, launch after launch."""
    import torch

    from syncopy.runtime.streams import hardware_queues
    from tests.gpu.test_pipeline_gpu import numerics

    torch.cuda.set_device(0)
    return {"connections": hardware_queues.connections(),
            "numerics": _check("pipeline, one queue", lambda: numerics(rank, world, "auto", launches=3))}


def single_queue_nccl(rank: int, world: int) -> dict:
    """Two GPUs started with CUDA_DEVICE_MAX_CONNECTIONS=1: ag_gemm on nccl (its rounds go behind the
    kernel there) and gemm_rs (its flag rounds always were)."""
    import torch

    from syncopy.runtime.streams import hardware_queues
    from tests.gpu.workers import ag_gemm, reduce

    torch.cuda.set_device(rank)
    return {"connections": hardware_queues.connections(),
            "ag_gemm nccl": _check("ag_gemm nccl, one queue", lambda: ag_gemm(rank, world, "nccl", timeout_s=20.0)),
            "gemm_rs nccl": _check("gemm_rs nccl, one queue", lambda: reduce(rank, world, "nccl", "gemm_rs"))}
