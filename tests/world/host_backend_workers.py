"""Rank functions of test_host_backends.py: the GPU backends' protocols run between CPU processes
under the interpreter. p2p (IPC-style handle exchange, per-peer pushes in each peer's arrival
order, flags raised behind the data, the per-launch handshake, pull-reduce for producers, dropped
chunks) with shared memory standing in for CUDA IPC (`HostMemory`); nccl (round lowering, relays,
flags after each round, the grid check, collectives for producers) over gloo (`HostStreams`)."""
from __future__ import annotations

from tests.world.workers import _exc_info


def _use_host_backends() -> None:
    """Make backends 'p2p' and 'nccl' resolve to their CPU variants in this rank."""
    from syncopy.runtime.transport import backends
    from syncopy.runtime.transport.backends.nccl import HostStreams, NcclBackend
    from syncopy.runtime.transport.backends.p2p import HostMemory, P2PBackend

    class HostP2P(P2PBackend):
        memory = HostMemory()

    class HostNccl(NcclBackend):
        engine = HostStreams()

    real = backends.select
    host = {"p2p": HostP2P, "nccl": HostNccl}

    def select(name, device_type, single_node=None):
        return host[name] if name in host else real(name, device_type, single_node)

    backends.select = select


def count_host_handshakes() -> list[int]:
    """Count p2p's host-side handshakes from now on in this rank (a sync of the compute stream, a
    barrier): a one-element list the patched methods add to. Ranks alone on their GPU hand-shake
    on the device only, after their first launch."""
    from syncopy.runtime.transport.backends.p2p import HostMemory, P2PBackend

    count = [0]
    for cls, name in ((HostMemory, "sync"), (P2PBackend, "barrier")):
        real = getattr(cls, name)

        def counted(self, *args, _real=real):
            count[0] += 1
            return _real(self, *args)

        setattr(cls, name, counted)
    return count


def _launch_ag_gemm(fused, rank: int, world: int, shape: tuple[int, int, int]) -> dict:
    """One launch of the ag_gemm template through `fused`: {"type": None}, or what it raised."""
    import torch

    from syncopy import templates

    t = templates.get("ag_gemm")
    try:
        t.module.launch(fused, **t.module.inputs(rank, world, shape, torch.float32))
        return {"type": None}
    except Exception as exc:
        return _exc_info(exc)


def run_templates(rank: int, world: int, cases: list[dict]) -> list[dict]:
    """Each case: a template run `launches` times through its backend (buffers NaN-poisoned), vs its
    torch reference; per launch, what its protocol found and left (tests/world/precondition_backends.py)."""
    from tests.world import precondition_backends

    records, stop = precondition_backends.protocol_records()
    try:
        return _run_templates(rank, world, cases, records)
    finally:
        stop()  # the world's next jobs find the backends as they were


def _run_templates(rank: int, world: int, cases: list[dict], records: list[dict]) -> list[dict]:
    import torch

    from syncopy import templates
    from syncopy.runtime.transport.backends.p2p import HostMemory
    from tests.world.precondition_backends import settle

    _use_host_backends()
    # Host-side handshakes per launch, counted from the second launch on.
    host_handshakes = count_host_handshakes()
    out = []
    for case in cases:
        # shared: the ranks behave as if they shared one GPU (p2p then completes pushes before the launch)
        HostMemory.shares_device = (lambda self, group, device: True) if case.get("shared") else (lambda self, group, device: False)
        t = templates.get(case["template"])
        mod = t.module
        fused = t.fused(chunks_per_rank=case["chunks"], order=case["order"], backend=case["backend"], poison_receive=True,
                        timeout_s=60)
        worst = 0.0
        protocol = []
        for it in range(case.get("launches", 2)):
            if it == 1:
                host_handshakes[0] = 0
            inp = mod.inputs(rank, world, tuple(case["shape"]), torch.float32, seed=it)
            before = len(records)
            got = mod.launch(fused, **inp)
            protocol.append([settle(r) for r in records[before:]])
            ref = mod.reference(**inp)
            diff = torch.nan_to_num((got.float() - ref.float()).abs(), nan=float("inf"))
            worst = max(worst, float(diff.max()) / max(1.0, float(ref.float().abs().max())))
        backend = next(type(b).__name__ for _, b in fused.contexts.table.values())
        shared = any(getattr(b, "shared_device", False) for _, b in fused.contexts.table.values())
        handshake = {type(getattr(b, "handshake", None)).__name__ for _, b in fused.contexts.table.values()}
        out.append({**case, "worst": worst, "tolerance": mod.TOLERANCE[torch.float32], "backend": backend, "shared_device": shared,
                    "handshake": handshake, "warm_host_handshakes": host_handshakes[0], "protocol": protocol,
                    "epochs": [ctx.epoch for ctx, _ in fused.contexts.table.values()]})
    return out


def _live_threads(name: str, at_most: int, settle_s: float = 5.0) -> int:
    """Live threads called `name`, once at most `at_most` are left or `settle_s` passed (a closed
    stream's thread ends after the work it had; one nobody holds, once collected)."""
    import gc
    import threading
    import time

    end = time.monotonic() + settle_s
    while True:
        gc.collect()
        n = sum(t.name == name and t.is_alive() for t in threading.enumerate())
        if n <= at_most or time.monotonic() > end:
            return n
        time.sleep(0.02)


def run_evicted_contexts_let_go(rank: int, world: int) -> dict:
    """Operators kept to one context (max_contexts=1) launched on three shapes in turn, twice, with
    NaN-poisoned buffers, new data each launch and a slow link (each nccl round and each p2p send
    20 ms late): nccl's ag_gemm (its rounds' worker thread, error ring and events per context) and
    p2p's gemm_rs (SendReduce: a send thread per peer). Per launch the error against torch and the
    live worker threads, then those left after release(). The operators of this rank's earlier jobs
    are collected first: their threads end with them."""
    import time

    from syncopy.runtime.streams import streamops
    from syncopy.runtime.transport.backends import nccl

    _use_host_backends()
    real_run, real_copy = nccl._run, streamops.HostOps.copy

    def paced_run(p2p):
        time.sleep(0.02)
        return real_run(p2p)

    def paced_copy(self, dst, src, n, stream):
        if stream is not None:  # a send stream's copy (p2p's pushes on CPU are done at once, stream None)
            self.delay(0.02, stream)
        real_copy(self, dst, src, n, stream)

    nccl._run, streamops.HostOps.copy = paced_run, paced_copy
    try:
        return _evictions(rank, world)
    finally:
        nccl._run, streamops.HostOps.copy = real_run, real_copy


def _evictions(rank: int, world: int) -> dict:
    import torch

    from syncopy import templates

    out = {}
    cases = [("nccl", "ag_gemm", "syncopy-nccl-rounds", 1, [(7, 16, 16), (10, 16, 16), (13, 16, 16)]),
             ("p2p", "gemm_rs", "syncopy-p2p-send", world - 1, [(24, 16, 16), (18, 16, 16), (30, 16, 16)])]
    for backend, template, thread, per_context, shapes in cases:
        t = templates.get(template)
        fused = t.fused(chunks_per_rank=2, order="ring", backend=backend, poison_receive=True, timeout_s=60)
        fused.max_contexts = 1
        before = _live_threads(thread, 0)
        worst, alive = 0.0, []
        for it in range(2):
            for i, shape in enumerate(shapes):
                inp = t.module.inputs(rank, world, shape, torch.float32, seed=10 * it + i)
                got = t.module.launch(fused, **inp)
                ref = t.module.reference(**inp)
                worst = max(worst, float(torch.nan_to_num((got - ref).abs(), nan=float("inf")).max()))
                alive.append(_live_threads(thread, per_context))
        fused.release()
        out[backend] = {"worst": worst, "before": before, "alive": alive, "per_context": per_context,
                        "after_release": _live_threads(thread, 0)}
    return out


def run_drop(rank: int, world: int, drop: tuple[int, int], timeout_s: float) -> dict:
    """Rank drop[0] never pushes its chunk drop[1]: every other rank times out naming it."""
    from syncopy import templates
    from syncopy.runtime.transport.link import Faults

    _use_host_backends()
    fused = templates.get("ag_gemm").fused(chunks_per_rank=2, order="ring", backend="p2p", timeout_s=timeout_s,
                                           faults=Faults.of(drop=[drop]))
    return _launch_ag_gemm(fused, rank, world, (8, 16, 16))


def run_nccl_big_grid(rank: int, world: int) -> dict:
    """A non-persistent grid of more programs than nccl leaves to the kernel (132 - 8 SMs) is refused."""
    from syncopy import templates

    _use_host_backends()
    fused = templates.get("ag_gemm").fused(chunks_per_rank=1, backend="nccl", timeout_s=60)
    return _launch_ag_gemm(fused, rank, world, (64, 32 * 22, 16))  # 6 x 22 tiles of 32 x 32


def run_bad_mapping(rank: int, world: int) -> dict:
    """p2p whose mapping of the peers' signal pads reaches other memory: the connect check refuses it."""
    import torch

    from syncopy import templates
    from syncopy.runtime.transport.backends.p2p import HostMemory

    _use_host_backends()
    real_open = HostMemory.open

    def elsewhere(self, shared, device):
        t = real_open(self, shared, device)
        return torch.zeros_like(t) if t.dtype == torch.int32 else t  # the pad: a copy of it, not it

    HostMemory.open = elsewhere
    fused = templates.get("ag_gemm").fused(chunks_per_rank=1, backend="p2p", timeout_s=5)
    return _launch_ag_gemm(fused, rank, world, (8, 16, 16))


def run_p2p_reduce_scatter_traced(rank: int, world: int) -> dict:
    """gemm_rs on p2p (SendReduce), traced, two launches: when each chunk left against the kernel's end."""
    import torch

    from syncopy import templates

    _use_host_backends()
    t = templates.get("gemm_rs")
    fused = t.fused(chunks_per_rank=2, order="local_first", backend="p2p", poison_receive=True, timeout_s=60, trace=True)
    out = {"worst": 0.0, "sent_before_end": [], "sent": []}
    for it in range(2):
        inp = t.module.inputs(rank, world, (96, 32, 32), torch.float32, seed=it)
        got = t.module.launch(fused, **inp)
        ref = t.module.reference(**inp)
        out["worst"] = max(out["worst"], float(torch.nan_to_num((got - ref).abs(), nan=float("inf")).max()))
        tr = fused.last_trace
        out["sent_before_end"].append(tr.sent_before_end())
        out["sent"].append(sorted(tr.sent))
    out["reducer"] = [type(b.reducer).__name__ for _, b in fused.contexts.table.values()]
    return out


def run_consumer_traced(rank: int, world: int) -> dict:
    """ag_gemm traced on p2p and nccl, two launches each: per tile, the chunks landed when it
    started (no host counts them there: the kernel counts the flags up) and the chunks it reads."""
    import torch

    from syncopy import templates

    _use_host_backends()
    t = templates.get("ag_gemm")
    out = {}
    for backend in ("p2p", "nccl"):
        fused = t.fused(chunks_per_rank=2, order="ring", backend=backend, poison_receive=True, timeout_s=60, trace=True)
        runs = []
        for it in range(2):
            inp = t.module.inputs(rank, world, (13, 16, 16), torch.float32, seed=it)
            got = t.module.launch(fused, **inp)
            worst = float(torch.nan_to_num((got - t.module.reference(**inp)).abs(), nan=float("inf")).max())
            tr = fused.last_trace
            runs.append({"worst": worst, "total": tr.total_chunks, "epoch": tr.epoch,
                         "tiles": [(arrived, len(set(range(tr.tile_ranges[tile][0], tr.tile_ranges[tile][1] + 1))))
                                   for tile, _, arrived in tr.tile_starts]})
        out[backend] = runs
    return out


def run_nccl_rounds_beside_the_kernel(rank: int, world: int) -> dict:
    """ag_gemm on nccl, traced, each round paced 40 ms late (a slow link), three launches of new data,
    NaN-poisoned: per launch the error against torch, the chunks landed when each tile started, and
    the threads the rounds ran on; then a late peer: rank world-1 starts launch 2 of a second
    operator 3 s late, past the others' 1 s timeout, and the others try a third."""
    import threading
    import time

    import torch

    from syncopy import templates
    from syncopy.runtime.transport.backends import nccl

    _use_host_backends()
    t = templates.get("ag_gemm")
    real_run, threads = nccl._run, set()

    def paced(p2p):
        threads.add(threading.current_thread().name)
        time.sleep(0.04)
        return real_run(p2p)

    nccl._run = paced
    out = {"runs": []}
    try:
        fused = t.fused(chunks_per_rank=2, order="ring", backend="nccl", poison_receive=True, timeout_s=60, trace=True)
        for it in range(3):
            inp = t.module.inputs(rank, world, (32, 16, 16), torch.float32, seed=it)
            got = t.module.launch(fused, **inp)
            worst = float(torch.nan_to_num((got - t.module.reference(**inp)).abs(), nan=float("inf")).max())
            tr = fused.last_trace
            out["runs"].append({"worst": worst, "total": tr.total_chunks, "landed": sorted(a for _, _, a in tr.tile_starts)})
        fused.synchronize()
    finally:
        nccl._run = real_run
    out["threads"] = sorted(threads)
    out["asynchronous"] = [b.asynchronous for _, b in fused.contexts.table.values()]
    late = t.fused(chunks_per_rank=1, order="ring", backend="nccl", poison_receive=True, timeout_s=1)
    out["late"] = []
    for it in range(2 if rank == world - 1 else 3):  # the others' third launch is refused before any transfer
        inp = t.module.inputs(rank, world, (8, 16, 16), torch.float32, seed=it)
        want = t.module.reference(**inp) if it < 2 else None  # a collective: every rank, before anyone may raise
        if it == 1 and rank == world - 1:
            time.sleep(3)
        try:
            got = t.module.launch(late, **inp)
            out["late"].append({"type": None, "worst": float(torch.nan_to_num((got - want).abs(), nan=float("inf")).max())})
        except Exception as exc:
            out["late"].append(_exc_info(exc))
    return out


def run_traced(rank: int, world: int) -> dict:
    """The traced runs of one world: gemm_rs on p2p, then ag_gemm on p2p and nccl."""
    return {"gemm_rs": run_p2p_reduce_scatter_traced(rank, world), "ag_gemm": run_consumer_traced(rank, world)}

