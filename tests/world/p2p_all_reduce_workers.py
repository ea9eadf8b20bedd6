"""Rank functions of test_p2p_all_reduce.py: gemm_ar on the p2p backend's CPU form (shared memory for
CUDA IPC, worker threads for the send streams), ranks alone on their "GPU"."""
from __future__ import annotations

from tests.world.host_backend_workers import _use_host_backends


def run_all_reduce(rank: int, world: int) -> dict:
    """gemm_ar on p2p, traced, three launches with fresh inputs, NaN-poisoned, a short last part:
    the error against torch, which reducer ran, when each chunk left against the kernel's end, and
    the host syncs and barriers of the launches after the first (none: the handshake is on the device)."""
    import torch

    from syncopy import templates
    from syncopy.runtime.backends.p2p import HostMemory, P2PBackend

    _use_host_backends()
    host_waits = [0]
    for cls, name in ((HostMemory, "sync"), (P2PBackend, "barrier")):
        real = getattr(cls, name)

        def counted(self, *args, _real=real):
            host_waits[0] += 1
            return _real(self, *args)

        setattr(cls, name, counted)
    t = templates.get("gemm_ar")
    fused = t.fused(chunks_per_rank=2, order="local_first", backend="p2p", poison_receive=True, timeout_s=60, trace=True)
    out = {"worst": [], "sent_before_end": [], "sent": [], "same_bits": []}
    for it in range(3):
        if it == 1:
            host_waits[0] = 0
        inp = t.module.inputs(rank, world, (22, 16, 16), torch.float32, seed=it)  # 8, 8 and 6 rows
        got = t.module.launch(fused, **inp)
        ref = t.module.reference(**inp)
        out["worst"].append(float(torch.nan_to_num((got - ref).abs(), nan=float("inf")).max()))
        out["same_bits"].append(got.view(torch.int32).sum().item())  # equal on every rank
        tr = fused.last_trace
        out["sent_before_end"].append(tr.sent_before_end())
        out["sent"].append(sorted(tr.sent))
    fused.synchronize()
    out["host_waits_after_first"] = host_waits[0]
    out["reducer"] = [type(b.reducer).__name__ for _, b in fused._contexts.values()]
    return out
