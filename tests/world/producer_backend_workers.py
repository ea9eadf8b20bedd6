"""Rank functions of test_producer_backends.py: producer patterns on the GPU backends' CPU forms:
gemm_ar on p2p (shared memory for CUDA IPC, worker threads for the send streams, ranks alone on
their "GPU"), gemm_rs on nccl (gloo standing in for NCCL)."""
from __future__ import annotations

from tests.world.host_backend_workers import _use_host_backends, count_host_handshakes
from tests.world.workers import _exc_info


def run_all_reduce(rank: int, world: int) -> dict:
    """gemm_ar on p2p, traced, three launches with fresh inputs, NaN-poisoned, a short last part:
    the error against torch, which reducer ran, when each chunk left against the kernel's end, and
    the host syncs and barriers of the launches after the first (none: the handshake is on the device)."""
    import torch

    from syncopy import templates

    _use_host_backends()
    host_waits = count_host_handshakes()
    t = templates.get("gemm_ar")
    fused = t.fused(chunks_per_rank=2, order="local_first", backend="p2p", poison_receive=True, timeout_s=60, trace=True)
    out = {"worst": [], "sent_before_end": [], "sent": [], "same_bits": []}
    for it in range(3):
        if it == 1:
            host_waits[0] = 0
        inp = t.module.inputs(rank, world, (94, 32, 32), torch.float32, seed=it)  # 32, 32 and 30 rows
        got = t.module.launch(fused, **inp)
        ref = t.module.reference(**inp)
        out["worst"].append(float(torch.nan_to_num((got - ref).abs(), nan=float("inf")).max()))
        out["same_bits"].append(got.view(torch.int32).sum().item())  # equal on every rank
        tr = fused.last_trace
        out["sent_before_end"].append(tr.sent_before_end())
        out["sent"].append(sorted(tr.sent))
    fused.synchronize()
    out["host_waits_after_first"] = host_waits[0]
    out["reducer"] = [type(b.reducer).__name__ for _, b in fused.contexts.table.values()]
    return out


def run_nccl_producers(rank: int, world: int) -> dict:
    """gemm_rs and gemm_ar (a short last part) on nccl, three launches each with fresh inputs,
    NaN-poisoned, traced, each round 20 ms late: the errors against torch, which reduction ran, each round's sends and
    receives in the order this rank posted them, and which chunks left before the kernel ended."""
    import time

    import torch
    import torch.distributed as dist

    from syncopy import templates
    from syncopy.runtime.transport.backends import nccl

    _use_host_backends()
    posted, used = [], []
    real_batch, real_join = dist.batch_isend_irecv, nccl.FlagRounds.join

    def batch(ops):
        posted.append([(op.op.__name__, dist.get_global_rank(op.group, op.group_peer) if hasattr(op, "group_peer") else op.peer,
                        op.tensor.shape[0], tuple(op.tensor.shape)) for op in ops])
        time.sleep(0.02)  # a slow link: every round goes 20 ms late
        return real_batch(ops)

    def join(self):
        used.append(type(self).__name__)
        return real_join(self)

    dist.batch_isend_irecv, nccl.FlagRounds.join = batch, join
    out = {}
    try:
        # gemm_rs in 16 x 16 tiles (10 at world 3), so that later tiles still compute while the first chunks leave.
        for name, shape, meta in (("gemm_rs", (24 * world, 32, 16), dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)), ("gemm_ar", (22, 16, 16), {})):
            t = templates.get(name)
            fused = t.fused(chunks_per_rank=2, order="local_first", backend="nccl", poison_receive=True, timeout_s=60, trace=True)
            worst, early = [], []
            posted.clear()
            used.clear()
            for it in range(3):
                inp = t.module.inputs(rank, world, shape, torch.float32, seed=it)
                got = t.module.launch(fused, **inp, **meta)
                worst.append(float(torch.nan_to_num((got - t.module.reference(**inp)).abs(), nan=float("inf")).max()))
                early.append(fused.last_trace.sent_before_end())
            out[name] = {"worst": worst, "used": list(used), "posted": list(posted), "same_bits": got.view(torch.int32).sum().item(),
                         "sent_before_end": early}
        out["gemm_rs_columns"] = _columns(rank, world, used, posted)
    finally:
        dist.batch_isend_irecv, nccl.FlagRounds.join = real_batch, real_join
    return out


def _columns(rank: int, world: int, used: list, posted: list) -> dict:
    """gemm_rs's kernel with C reduce-scattered along dim 1 (each rank keeps a block of columns):
    strided chunks, sent and received through contiguous copies; two launches of new data."""
    import torch
    import torch.distributed as dist
    import triton

    import syncopy
    from syncopy.templates.gemm_rs.kernel import gemm_rs_kernel

    fused = syncopy.overlap(dict(pattern="reduce_scatter", tensor="C", dim=1, chunks_per_rank=2, order="ring"),
                            backend="nccl", poison_receive=True, timeout_s=60)(gemm_rs_kernel)
    m, n, k = 32, 24 * world, 16
    worst = []
    posted.clear()
    used.clear()
    for it in range(2):
        g = torch.Generator().manual_seed(it * 10 + rank)
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        c = torch.empty(m, n // world)
        grid = (triton.cdiv(m, 16), triton.cdiv(n, 16))
        fused[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), n, 1, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        full = a @ b
        dist.all_reduce(full)
        want = full[:, rank * (n // world):(rank + 1) * (n // world)]
        worst.append(float(torch.nan_to_num((c - want).abs(), nan=float("inf")).max()))
    return {"worst": worst, "used": list(used), "shapes": sorted({tuple(s) for r in posted for *_, s in r})}


def run_nccl_late_peer(rank: int, world: int) -> dict:
    """gemm_rs on nccl with a 0.5 s timeout: rank world-1 starts launch 2 a second past the bound the
    others wait for their rounds (2 x 0.5 + 5 s); the others try a third launch."""
    import time

    import torch

    from syncopy import templates

    _use_host_backends()
    t = templates.get("gemm_rs")
    fused = t.fused(chunks_per_rank=2, order="ring", backend="nccl", poison_receive=True, timeout_s=0.5)
    out = []
    for it in range(2 if rank == world - 1 else 3):
        inp = t.module.inputs(rank, world, (24 * world, 16, 16), torch.float32, seed=it)
        want = t.module.reference(**inp) if it < 2 else None  # a collective: every rank, before anyone may raise
        if it == 1 and rank == world - 1:
            time.sleep(7)
        t0 = time.perf_counter()
        try:
            got = t.module.launch(fused, **inp)
            out.append({"type": None, "worst": float(torch.nan_to_num((got - want).abs(), nan=float("inf")).max())})
        except Exception as exc:
            out.append(_exc_info(exc))
        out[-1]["seconds"] = time.perf_counter() - t0
    return out


def run_producers(rank: int, world: int) -> dict:
    """Both of this file's runs in one world (a spawn costs seconds a rank)."""
    return {"p2p_all_reduce": run_all_reduce(rank, world), "nccl": run_nccl_producers(rank, world),
            "nccl_late": run_nccl_late_peer(rank, world)}
