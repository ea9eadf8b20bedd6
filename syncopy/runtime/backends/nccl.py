"""The multi-node GPU backend: chunks move as NCCL point-to-point ops on a dedicated communicator
(high-priority stream, at most `occupancy.reserved_sms('nccl')` CTAs per kernel), ordered by one
syncopy stream; after each chunk lands, its flag is raised by a stream write-value of the epoch on
that stream (runtime/streamops.py: a memory barrier first), so stream order puts the flag after the
NCCL kernel that wrote the data.

NCCL matches sends to receives per peer in posting order, and a send blocks until its receive is
posted, so ranks must agree on what runs together. Every rank lowers every rank's plan and cuts
the launch's transfers into the same *rounds* (`rounds()`): a transfer runs in the round after its
chunk (and its `after` chunks) landed on the sender and after the receiver's previous receive, so
each rank receives at most one chunk per round and relays follow their landing. A round is one
NCCL group (`batch_isend_irecv`) on every rank taking part; groups progress all their ops together,
so no round waits for a later one and nothing deadlocks.

    ring, W = 4, rank r:    round 1              round 2                  round 3
      syncopy stream s      [send own -> r+1     [send (r-1) -> r+1       [send (r-2) -> r+1
                             recv (r-1) <- r-1]   recv (r-2) <- r-1]       recv (r-3) <- r-1]
                             [flag r-1 = e]       [flag r-2 = e]           [flag r-3 = e]
      compute stream        [=== fused kernel (<= SMs - R programs): tiles spin on flags ===]

The fused kernel must leave SMs to NCCL's kernels (see occupancy.py): `check_grid` refuses grids
that could occupy them all.

reduce_scatter and all_reduce along dim 0 are triggered by the kernel's flags (`FlagRounds`): rounds (d, i) for each
peer offset d and chunk index i, the same on every rank: send our partial of chunk i of rank r+d's
rows once its flag is up (`cuStreamWaitValue32` on the syncopy stream, enqueued after the kernel),
receive rank r-d's partial of our chunk i into an inbox slot; then our rows are reduced in rank
order, all on the syncopy stream, while later tiles still compute (all_reduce then sends our reduced
rows to every peer and receives theirs, one round per offset, and the result is the buffer):

    syncopy stream s   [wait flag (r+1, 0)][send/recv][wait flag (r+1, 1)][send/recv] ... [our rows = own + inbox]
    compute stream     [partial = 0][=== fused kernel: tiles in send order, flags rise ===]        [wait s]

Producers along another dim run NCCL's own collective after the kernel (`Collective`: correct, no
in-kernel overlap).
"""
from __future__ import annotations

import contextlib
import os
import time
import warnings
import weakref

import torch
import torch.distributed as dist

from syncopy.errors import LaunchError
from syncopy.runtime import occupancy
from syncopy.runtime import plan as planning
from syncopy.runtime import streamops
from syncopy.runtime.backends.control import control_group, group_lock, member_group, wait_bound
from syncopy.runtime.backends.p2p import Inline, Reduction, put_own_shard, refuse_emulation
from syncopy.runtime.context import Context
from syncopy.runtime.link import Faults, Link
from syncopy.runtime.reduction import reduce_into

_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # user group -> its NCCL group


def nccl_options(reserved_sms: int):
    """ProcessGroupNCCL options: its stream at high priority, its kernels at most `reserved_sms` CTAs
    (ncclConfig_t.maxCTAs, where this torch exposes it)."""
    opts = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
    try:
        opts.config.max_ctas = reserved_sms
    except AttributeError:  # an older torch: only the environment caps NCCL's CTAs
        if not any(os.environ.get(v) for v in ("NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS")):
            warnings.warn(f"this torch cannot cap NCCL's CTAs per communicator, so the {reserved_sms} SMs syncopy keeps free for "
                          f"NCCL may not suffice; set NCCL_MAX_CTAS={reserved_sms} (or NCCL_MAX_NCHANNELS) before starting the job",
                          stacklevel=2)
    return opts


def nccl_group(group) -> object:
    """A dedicated NCCL communicator with the ranks of `group`, created by those ranks alone
    (`control.member_group`: the other ranks of the world need not take part) and connected, so that
    later rounds may involve only some ranks, on first use.

    Where the default group is bound to a device (`init_process_group(device_id=...)`), torch makes
    every new NCCL group by ncclCommSplit of the default communicator, which every rank of the world
    must enter: a group of members alone would wait forever. There a sub-group's rounds run on
    `group` itself when it is an NCCL group (same ranks, same order of launches: its own messages
    cannot meet another group's; torch's stream and CTA limit, not ours), and a launch is refused
    otherwise."""
    with group_lock(group):
        if group not in _groups:
            _groups[group] = _new_nccl_group(group)
        return _groups[group]


def _new_nccl_group(group) -> object:
    if _should_share_user_group(group):
        if "nccl" not in str(dist.get_backend(group)):
            raise LaunchError("the default process group is bound to a device (device_id=), so torch creates NCCL groups by "
                              "splitting it with every rank of the world; launch on an NCCL group (dist.new_group(..., "
                              "backend='nccl')), or init_process_group without device_id")
        return group
    pg = member_group(group, "nccl", "nccl", None, pg_options=nccl_options(occupancy.reserved_sms("nccl")))
    dist.all_reduce(torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device())), group=pg)
    return pg


def _should_share_user_group(group) -> bool:
    # torch splits the default communicator for every new NCCL group once the default group is bound
    # to a device; the split is collective over the whole world, which a sub-group's launch never is.
    # A group of every rank may split (all of them launch), and keeps its own high-priority communicator.
    bound = getattr(dist.distributed_c10d._get_default_group(), "bound_device_id", None)
    return bool(bound) and dist.get_world_size(group) < dist.get_world_size()


def rounds(plans: list) -> list[list[tuple[int, int, int]]]:
    """The launch's transfers `(src, dst, chunk)`, grouped into rounds every rank runs in this order.

    `plans[r]` is rank r's RankPlan. A transfer's round is one more than the latest of: the
    receiver's previous receive, and the landing on the sender of the chunk itself (round 0 at its
    home) and of its `after` chunks. Within a round, transfers are sorted, so both ends of a peer
    pair post their ops in the same order.
    """
    world = len(plans)
    c = plans[0].chunks_per_rank
    after = {(src, n.peer, n.chunk): n.after for src, p in enumerate(plans) for n in p.sends()}
    queues = [[(n.peer, n.chunk) for n in p.recvs()] for p in plans]
    landed = {(r, g): 0 for r in range(world) for g in range(r * c, (r + 1) * c)}
    last = [0] * world
    at = [0] * world
    out: dict[int, list] = {}
    while any(at[d] < len(queues[d]) for d in range(world)):
        moved = False
        for dst in range(world):
            while at[dst] < len(queues[dst]):
                src, g = queues[dst][at[dst]]
                needs = {g, *after.get((src, dst, g), ())}
                if any((src, x) not in landed for x in needs):
                    break
                t = 1 + max([last[dst]] + [landed[(src, x)] for x in needs])
                landed[(dst, g)] = last[dst] = t
                out.setdefault(t, []).append((src, dst, g))
                at[dst] += 1
                moved = True
        if not moved:
            src, g = queues[next(d for d in range(world) if at[d] < len(queues[d]))][0]
            raise LaunchError(f"the schedule's transfers cannot be ordered for NCCL: a relay of chunk {g} waits for a chunk that "
                              f"never reaches rank {src}; check the schedule with `syncopy check`")
    return [sorted(out[t]) for t in sorted(out)]


class CudaStreams:
    """How nccl orders its work on the GPU: NCCL's communicator, one high-priority stream, events."""

    has_reduce_scatter = True

    def transport(self, group):
        return nccl_group(group)

    def stream(self):
        return torch.cuda.Stream(priority=-1)

    def after_compute(self, stream, device) -> None:
        stream.wait_stream(torch.cuda.current_stream(device))

    def using(self, stream):
        return torch.cuda.stream(stream)

    def mark(self, stream):
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def make_ops(self):
        return streamops.cuda_ops()

    def sm_count(self, device) -> int:
        return occupancy.sm_count(device)

    def compute_stream(self, device):
        return torch.cuda.current_stream(device)

    def wait_mark(self, stream, mark) -> None:
        stream.wait_event(mark)

    def join_compute(self, stream, device) -> None:
        """The compute stream's next work follows everything enqueued on `stream`."""
        torch.cuda.current_stream(device).wait_stream(stream)


class _Done:
    def query(self) -> bool:
        return True


class HostStreams(CudaStreams):
    """The same rounds between CPU processes over gloo (whose waits block the host: each round ends
    before the next starts, as NCCL groups do on the stream), with the SM count of an H100. It lets
    CPU tests run the round lowering, relays, flags and the grid check end to end under the
    interpreter; `select` never picks it (nccl takes CUDA tensors)."""

    has_reduce_scatter = False  # gloo has none
    SMS = 132

    def transport(self, group):
        return control_group(group)

    def stream(self):
        return Inline()

    def after_compute(self, stream, device) -> None:
        pass

    def using(self, stream):
        return contextlib.nullcontext()

    def mark(self, stream):
        return _Done()

    def make_ops(self):
        return streamops.HostOps()  # on Inline streams: done when enqueued

    def sm_count(self, device) -> int:
        return self.SMS

    def compute_stream(self, device):
        return Inline()

    def wait_mark(self, stream, mark) -> None:
        pass

    def join_compute(self, stream, device) -> None:
        pass


class NcclBackend:
    name = "nccl"
    z_fastest = False  # GPUs dispatch programs x fastest
    engine = CudaStreams()

    def __init__(self, group, timeout_s: float, link: Link | None, faults: Faults | None):
        refuse_emulation(self.name, link, faults)
        self.group = control_group(group, timeout_s)
        self.nccl = self.engine.transport(group)
        self.global_ranks = dist.get_process_group_ranks(group)
        self.timeout_s = timeout_s
        self.stream = self.engine.stream()
        self.rounds: list[list[tuple[str, int, int]]] | None = None  # this rank's ops per round
        self.inbox: torch.Tensor | None = None  # producers (FlagRounds): each peer's partial of our rows
        self.ops = self.engine.make_ops()

    def check_grid(self, programs: int, persistent: bool, kernel: str, device, ctas_per_program: int = 1) -> None:
        occupancy.check_grid(programs, self.engine.sm_count(device), self.name, persistent, kernel, ctas_per_program)

    def _lower(self, ctx: Context) -> None:
        plan = ctx.plan
        lower = planning.all_to_all if ctx.schedule.pattern == "all_to_all" else planning.all_gather
        plans = [lower(ctx.schedule, r, plan.world, plan.rows_per_rank) for r in range(plan.world)]
        mine = []
        for transfers in rounds(plans):
            ops = [("send", g, dst) if src == plan.rank else ("recv", g, src) for src, dst, g in transfers if plan.rank in (src, dst)]
            mine.append(ops)
        self.rounds = [ops for ops in mine if ops]

    def local(self, ctx: Context, shard: torch.Tensor) -> None:
        put_own_shard(ctx, shard)

    def start(self, ctx: Context, epoch: int) -> "Rounds":
        if self.rounds is None:
            self._lower(ctx)
        return Rounds(self, ctx, epoch).start()

    def start_reduce(self, ctx: Context, out: torch.Tensor, epoch: int) -> "Collective | FlagRounds":
        if FlagRounds.fits(ctx):
            return FlagRounds(self, ctx, out, epoch)
        return Collective(self, ctx, out)


class Rounds:
    """One launch's rounds, enqueued on the backend's stream; `join()` waits for them (bounded)."""

    POLL_S = 1e-4

    def __init__(self, backend: NcclBackend, ctx: Context, epoch: int):
        self.backend, self.ctx, self.epoch = backend, ctx, epoch
        self.errors: list[BaseException] = []
        self.lost: list[int] = []
        self.done: list[tuple[object, list[int]]] = []  # per round: an event recorded after its flags, its chunks
        self.keep: list[torch.Tensor] = []

    def start(self) -> "Rounds":
        be, ctx, plan = self.backend, self.ctx, self.ctx.plan
        s = be.stream
        # Our own slot (and any poisoning) was written on the compute stream: the first sends wait for it.
        be.engine.after_compute(s, ctx.buffer.device)
        # NCCL ignores tags; the gloo transport that emulates it on CPU matches by them (context id:
        # ranks that launch different shapes never match each other's messages, see gloo.py).

        def tag(g: int) -> int:
            return (ctx.uid % (1 << 14)) << 16 | g

        hs = be.ops.handle(s)
        with be.engine.using(s):
            for ops in be.rounds:
                p2p, landing = [], []
                for kind, g, peer in ops:
                    if kind == "send":
                        view = ctx.send_view(g, peer)
                        data = view if view.is_contiguous() else view.contiguous()
                        p2p.append(dist.P2POp(dist.isend, data, be.global_ranks[peer], group=be.nccl, tag=tag(g)))
                    else:
                        view = ctx.chunk_view(g)
                        data = view if view.is_contiguous() else torch.empty_like(view, memory_format=torch.contiguous_format)
                        p2p.append(dist.P2POp(dist.irecv, data, be.global_ranks[peer], group=be.nccl, tag=tag(g)))
                        landing.append((g, view, data))
                    self.keep.append(data)
                for work in dist.batch_isend_irecv(p2p):
                    work.wait()  # stream s waits for NCCL's stream; the host does not block
                for g, view, data in landing:
                    if data is not view:
                        view.copy_(data)
                    for f in plan.flags(g):  # a stream write-value: a memory barrier, then the flag
                        be.ops.write32(ctx.flag_address(f), self.epoch, hs)
                self.done.append((be.engine.mark(s), [g for g, _, _ in landing]))
        return self

    def join(self) -> None:
        """Wait for the last round, at most about as long as the kernel's waits. Rounds that never
        complete (a peer that never sent or never received) make their chunks `lost`, or, when only
        our sends are stuck, an error, instead of blocking forever."""
        bound = wait_bound(self.backend.timeout_s)
        deadline = time.monotonic() + bound
        while self.done and not self.done[-1][0].query():
            if time.monotonic() > deadline:
                stuck = [chunks for event, chunks in self.done if not event.query()]
                self.lost = [g for chunks in stuck for g in chunks]
                if not self.lost:
                    self.errors.append(RuntimeError(f"NCCL sends of rank {self.ctx.plan.rank} did not complete in "
                                                    f"{bound:g}s (a peer never received them)"))
                return
            time.sleep(self.POLL_S)


class Collective(Reduction):
    """reduce_scatter / all_reduce on nccl: NCCL's own collective on the kernel's partial, after it."""

    def join(self) -> None:
        ctx, out, pg = self.ctx, self.out, self.backend.nccl
        dim, rank = ctx.dim, ctx.plan.rank
        if ctx.plan.pattern == "reduce_scatter" and dim == 0 and self.backend.engine.has_reduce_scatter:
            dist.reduce_scatter_tensor(out, ctx.buffer, group=pg)
        elif ctx.plan.pattern == "reduce_scatter":
            full = ctx.buffer.clone()
            dist.all_reduce(full, group=pg)
            out.copy_(full.narrow(dim, rank * out.shape[dim], out.shape[dim]))
        else:
            out.copy_(ctx.buffer)
            dist.all_reduce(out, group=pg)
        for g in ctx.plan.owned:
            self.final[g].set()


def _run(p2p: list) -> None:
    """One round: its sends and receives as one NCCL group; the current stream waits for it."""
    if p2p:
        for work in dist.batch_isend_irecv(p2p):
            work.wait()  # the stream waits for NCCL's stream; the host does not block


class FlagRounds(Reduction):
    """reduce_scatter / all_reduce along dim 0 on nccl, triggered by the kernel's flags (module doc). Built at
    the launch's start (a mark on the compute stream: the partial is initialised); `join()`, called
    once the kernel is enqueued, enqueues the rounds and the reduction on the syncopy stream and
    makes the compute stream wait for them: nothing waits on the host on a GPU."""

    def __init__(self, backend: NcclBackend, ctx: Context, out: torch.Tensor, epoch: int):
        super().__init__(backend, ctx, out)
        self.epoch = epoch
        plan = ctx.plan
        if backend.inbox is None:  # [p]: peer p's partial of our rows; made at the first launch, then reused (a backend per context)
            backend.inbox = torch.empty((plan.world, plan.rows_per_rank, *out.shape[1:]), dtype=out.dtype, device=out.device)
        self.inbox = backend.inbox
        self.start_mark = backend.engine.mark(backend.engine.compute_stream(ctx.buffer.device))

    @staticmethod
    def fits(ctx: Context) -> bool:
        return ctx.plan.pattern in ("reduce_scatter", "all_reduce") and ctx.dim == 0 and ctx.plan.world > 1

    def rounds(self) -> list[tuple[int, int, int, int]]:
        """(send chunk, to, receive chunk, from) per round: every rank runs the same (offset, index)
        sequence, so each round's send meets its receive."""
        plan = self.ctx.plan
        r, w, c = plan.rank, plan.world, plan.chunks_per_rank
        return [(((r + d) % w) * c + i, (r + d) % w, r * c + i, (r - d) % w) for d in range(1, w) for i in range(c)]

    def join(self) -> None:
        be, ctx, out, e = self.backend, self.ctx, self.out, self.epoch
        plan, ops = ctx.plan, be.ops
        s = be.stream
        hs = ops.handle(s)
        rows = plan.rows_per_rank
        engine = be.engine
        engine.wait_mark(s, self.start_mark)  # the partial is initialised; not the kernel (its flags say which chunk is done)

        def tag(g: int) -> int:
            return (ctx.uid % (1 << 14)) << 16 | (1 << 15) | g

        with engine.using(s):
            for send, to, recv, source in self.rounds():
                round_ops = []
                if not plan.empty(send):  # chunks past a short last part move nothing (on both ends)
                    ops.wait32(ctx.flag_address(send), e, hs)  # every tile of the chunk stored
                    lo, hi = plan.bounds(send)
                    round_ops.append(dist.P2POp(dist.isend, ctx.buffer.narrow(0, lo, hi - lo), be.global_ranks[to], group=be.nccl, tag=tag(send)))
                if not plan.empty(recv):
                    lo, hi = plan.bounds(recv)
                    slot = self.inbox[source].narrow(0, lo - plan.rank * rows, hi - lo)
                    round_ops.append(dist.P2POp(dist.irecv, slot, be.global_ranks[source], group=be.nccl, tag=tag(recv)))
                _run(round_ops)
            lo, hi = plan.part(plan.rank)
            parts = [ctx.buffer.narrow(0, lo, hi - lo) if p == plan.rank else self.inbox[p].narrow(0, 0, hi - lo)
                     for p in range(plan.world)]
            if plan.pattern == "all_reduce":
                # The gather half: our reduced rows to every peer, theirs into our buffer, one round
                # per peer offset (every rank the same), then the buffer is the result.
                reduce_into(ctx.buffer.narrow(0, lo, hi - lo), parts)
                for d in range(1, plan.world):
                    to, source = (plan.rank + d) % plan.world, (plan.rank - d) % plan.world
                    t_lo, t_hi = plan.part(source)
                    round_ops = []
                    if hi > lo:  # a short last part may be empty
                        round_ops.append(dist.P2POp(dist.isend, ctx.buffer.narrow(0, lo, hi - lo), be.global_ranks[to], group=be.nccl,
                                                    tag=tag((1 << 14) | plan.rank)))
                    if t_hi > t_lo:
                        round_ops.append(dist.P2POp(dist.irecv, ctx.buffer.narrow(0, t_lo, t_hi - t_lo), be.global_ranks[source],
                                                    group=be.nccl, tag=tag((1 << 14) | source)))
                    _run(round_ops)
                out.copy_(ctx.buffer)
            else:
                reduce_into(out, parts)
        engine.join_compute(s, ctx.buffer.device)  # what the caller enqueues next (and the next launch) follows
        for g in plan.owned:
            self.final[g].set()
