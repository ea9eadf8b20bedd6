"""The premise of tests/world/test_host_backends.py's reference results, asserted (issue 26): a result
equal to torch's tests the GPU backends' protocols only if what the kernel read came through them in
that launch. So each launch records, from the buffers and the signal pad themselves (no clock):

- consumer patterns (the backend's `start`, which begins the protocol: handshake, pushes or rounds):
  every remote chunk with rows was poison (NaN, poison_receive) with its flags below the launch's
  epoch when the protocol began ("pending"), and its flags at the epoch once the launch returned
  ("landed"): its rows and its flag were put there by the protocol, in this launch;
- producer patterns (the backend's `start_reduce`): the output was poison when the reduction began
  ("out_poisoned"), so every row of the result was written by the protocol's reduction.
"""
from __future__ import annotations


def _poison(t) -> bool:
    import torch

    return bool(torch.isnan(t).all()) if t.is_floating_point() else False


def _up(ctx, chunk: int) -> bool:
    from syncopy import device as dev

    return all(int(ctx.signals[dev.SIG_HEADER + f]) == ctx.word for f in ctx.plan.flags(chunk))


def protocol_records():
    """Record every p2p / nccl launch's protocol start from now on: (records, stop). Each record is
    finished by `settle(record)` once its launch returned."""
    from syncopy.runtime.transport.backends.nccl import NcclBackend
    from syncopy.runtime.transport.backends.p2p import P2PBackend

    records: list[dict] = []
    real = {(cls, name): getattr(cls, name) for cls in (P2PBackend, NcclBackend) for name in ("start", "start_reduce")}

    def consumer(cls):
        def start(self, ctx, epoch):
            plan = ctx.plan
            remote = [g for g in range(ctx.n_chunks) if g // plan.chunks_per_rank != plan.rank and not plan.empty(g)]
            records.append({"kind": "consumer", "ctx": ctx, "remote": remote,
                            "pending": [g for g in remote if _poison(ctx.chunk_view(g)) and not _up(ctx, g)]})
            return real[(cls, "start")](self, ctx, epoch)
        return start

    def producer(cls):
        def start_reduce(self, ctx, out, epoch):
            records.append({"kind": "producer", "out_poisoned": bool(out.numel()) and _poison(out)})
            return real[(cls, "start_reduce")](self, ctx, out, epoch)
        return start_reduce

    for cls in (P2PBackend, NcclBackend):
        cls.start, cls.start_reduce = consumer(cls), producer(cls)

    def stop():
        for (cls, name), fn in real.items():
            setattr(cls, name, fn)

    return records, stop


def settle(record: dict) -> dict:
    """`record` once its launch returned, as the test reads it (no context in it)."""
    out = {k: v for k, v in record.items() if k != "ctx"}
    if record["kind"] == "consumer":
        out["landed"] = [g for g in record["remote"] if _up(record["ctx"], g)]
    return out
