"""The multi-node GPU backend: chunks move as NCCL point-to-point ops on a dedicated communicator
(high-priority stream, at most `occupancy.own_sms()` CTAs per kernel), ordered by one
syncopy stream; after each chunk lands, its flag is raised by a stream write-value of the epoch on
that stream (runtime/streams/streamops.py: a memory barrier first), so stream order puts the flag after the
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

A launch enqueues and returns, like any CUDA op (`Rounds`): behind the kernel, its error words are
copied into a pinned ring (runtime/streams/error_ring.py) and the compute stream waits for the rounds; `check`
reads the ring and the rounds' events at the next launch or `synchronize()`. After a failure the
operator takes no more launches, and a communicator whose rounds are still stuck a bound later is
aborted (NCCL then ends them), so no stream waits forever.

The fused kernel must leave SMs to NCCL's kernels (see occupancy.py): `check_grid` refuses grids
that could occupy them all.

reduce_scatter and all_reduce are triggered by the kernel's flags (`FlagRounds`): rounds (d, i) for each
peer offset d and chunk index i, the same on every rank: send our partial of chunk i of rank r+d's
rows once its flag is up (`cuStreamWaitValue32` on the syncopy stream, enqueued after the kernel),
receive rank r-d's partial of our chunk i into an inbox slot; then our rows are reduced in rank
order, all on the syncopy stream, while later tiles still compute (all_reduce then sends our reduced
rows to every peer and receives theirs, one round per offset, and the result is the buffer):

    syncopy stream s   [wait flag (r+1, 0)][send/recv][wait flag (r+1, 1)][send/recv] ... [wait our flags][our rows = own + inbox]
    compute stream     [partial = 0][=== fused kernel: tiles in send order, flags rise ===]        [wait s]

Chunks along another dim than 0 are strided: each travels through a contiguous copy made on the
stream after its flag, and lands through one.

One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1, streams/hardware_queues.py). Every stream feeds one
queue in enqueue order. A consumer round makes the syncopy stream wait for its NCCL kernel (an event
wait in the queue: `work.wait()`), so rounds enqueued before the fused kernel would all run, and the
kernel start only once the last chunk landed: correct, nothing overlapped. There `Rounds` are
enqueued behind the kernel instead, waiting for a mark taken before it (the kernel's own slot):

    queue   [fused kernel: <= SMs - R programs, all resident][NCCL round 1][wait for it][flags][round 2] ... [error words]
                          tiles spin on flags ----------------------^ raised while the kernel runs

The kernel has started (kernels start in enqueue order, then run side by side) before the first
round's NCCL kernel is dispatched, which finds its R SMs free. The error words' copy waits for the
kernel, so it goes behind the rounds. FlagRounds were already behind the kernel (their flag waits
must not sit ahead of the kernel that raises them, in any number of queues).

Other NCCL communicators (DDP's, FSDP's, the user's group where rounds run on it). NCCL documents
that concurrent work on two communicators of one device can deadlock; NCCL 2.26+ orders their
kernels as the host issued them with NCCL_LAUNCH_ORDER_IMPLICIT=1. syncopy keeps SMs free for the
other communicator's kernels too (occupancy.reserved_sms), warns once where the variable is unset
(`warn_beside`), and a launch that times out beside one names it as a possible cause: the fused
kernel's waits are bounded, so such a deadlock ends as a SyncopyTimeout, never a hang.
"""
from __future__ import annotations

import collections
import contextlib
import os
import time
import warnings
import weakref

import torch
import torch.distributed as dist

from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.streams import hardware_queues, occupancy
from syncopy.runtime.state import plan as planning
from syncopy.runtime.streams import streamops
from syncopy.runtime.transport.backends.control import (control_group, group_lock, mark_broken, member_group, refuse_broken, transport_text, wait_bound)
from syncopy.runtime.transport.backends.p2p import Inline, Reduction, put_own_shard, refuse_emulation
from syncopy.runtime.state.context import Context
from syncopy.runtime.transport.link import Faults, Link
from syncopy.runtime.streams.error_ring import LaunchErrors
from syncopy.runtime.transport.reduction import reduce_into

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
    cannot meet another group's; torch's stream, and a CTA limit that is not ours: the fused kernel
    then leaves free what one of its kernels may take, occupancy.reserved_sms), and a launch is
    refused otherwise. Either way the process may run other NCCL communicators beside (`warn_beside`)."""
    with group_lock(group):
        if group not in _groups:
            _groups[group] = _new_nccl_group(group)
            warn_beside(_groups[group])
        return _groups[group]


def _new_nccl_group(group) -> object:
    if _should_share_user_group(group):
        if "nccl" not in str(dist.get_backend(group)):
            raise LaunchError("the default process group is bound to a device (device_id=), so torch creates NCCL groups by "
                              "splitting it with every rank of the world; launch on an NCCL group (dist.new_group(..., "
                              "backend='nccl')), or init_process_group without device_id")
        return group
    pg = member_group(group, "nccl", "nccl", None, pg_options=nccl_options(occupancy.own_sms()))
    occupancy.mark_own(pg)  # capped to our share: not one of the "other" communicators the fused kernel leaves room for
    dist.all_reduce(torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device())), group=pg)
    return pg


#: NCCL_LAUNCH_ORDER_IMPLICIT appeared in NCCL 2.26: it orders the kernels of all communicators of a
#: device as the host issued them, instead of leaving their order to the GPU.
IMPLICIT_ORDER_SINCE = (2, 26)
_told_beside: list = []  # warn_beside says it once per process


def nccl_version() -> tuple[int, ...] | None:
    """The NCCL this torch runs (None where it has none: CPU builds)."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return None
    return tuple(v) if isinstance(v, tuple) else None


def implicit_order() -> bool:
    """Is NCCL_LAUNCH_ORDER_IMPLICIT set on (anything but unset, empty or 0)?"""
    return os.environ.get("NCCL_LAUNCH_ORDER_IMPLICIT", "").strip() not in ("", "0")


def beside_text() -> str | None:
    """Why rounds beside another NCCL communicator of this process may deadlock, and what to change;
    None where there is no other communicator or NCCL already orders their kernels."""
    others = occupancy.other_nccl_communicators()
    if not others:
        return None
    version = nccl_version()
    if implicit_order() and (version is None or version >= IMPLICIT_ORDER_SINCE):
        return None
    said = ("syncopy's NCCL rounds run beside another NCCL communicator of this process (DDP's, FSDP's or the process "
            "group's own), and NCCL documents that concurrent work on two communicators of one device can deadlock: one "
            "rank may run the other communicator's kernel where its peer runs ours")
    if version is not None and version < IMPLICIT_ORDER_SINCE:
        fix = (f"this NCCL ({'.'.join(map(str, version))}) predates NCCL_LAUNCH_ORDER_IMPLICIT "
               f"({'.'.join(map(str, IMPLICIT_ORDER_SINCE))}): upgrade NCCL, or order the other communicator's work "
               "after syncopy's launches yourself (synchronize() first)")
    else:
        fix = ("set NCCL_LAUNCH_ORDER_IMPLICIT=1 before starting the job, and issue NCCL work (syncopy's launches and the "
               "other collectives) in the same order on every rank")
    return f"{said}; {fix}"


def warn_beside(pg) -> None:
    """Once per process: rounds on `pg` run beside another NCCL communicator. Says why that may
    deadlock and what to change (`beside_text`; the fused kernel's waits are bounded, so such a
    deadlock ends as a SyncopyTimeout, never a hang), and what it costs: the SMs the fused kernel
    leaves free for the other communicator's kernels (occupancy.reserved_sms), which a persistent
    kernel's grid loses without another word."""
    if _told_beside:
        return
    said = []
    text = beside_text()
    if text is not None:
        said.append(f"{text} (a deadlock ends as a SyncopyTimeout: syncopy's waits are bounded)")
    if occupancy.other_nccl_communicators() and occupancy.uncapped_sms() > occupancy.own_sms():
        said.append(f"the fused kernel leaves {occupancy.reserved_sms('nccl')} SMs free for the other communicator's kernels "
                    f"(one may take {occupancy.uncapped_sms()} CTAs); NCCL_MAX_CTAS set lower caps them and gives the SMs back")
    if not said:
        return
    _told_beside.append(said)
    warnings.warn("; ".join(said), stacklevel=3)


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
    """How nccl orders its work on the GPU: NCCL's communicator, one high-priority stream, events.

    `submit(stream, body, event)` enqueues `body(handle)` on `stream` (NCCL ops issued under it wait
    for the stream, stream ops go on it by `handle`), then records `event` behind it."""

    def transport(self, group):
        return nccl_group(group)

    def stream(self):
        return torch.cuda.Stream(priority=-1)

    def after_compute(self, stream, device) -> None:
        stream.wait_stream(torch.cuda.current_stream(device))

    def submit(self, stream, body, ops, event=None) -> None:
        handle = ops.handle(stream)
        with torch.cuda.stream(stream):
            body(handle)
        if event is not None:
            ops.record(event, handle)

    def mark(self, stream):
        event = torch.cuda.Event()
        event.record(stream)
        return event

    #: A stream wait for a flag the kernel raises is enqueued after the kernel: streams share the
    #: GPU's hardware queues, and a wait ahead of the kernel in one can block it for good.
    sends_before_kernel = False

    @property
    def rounds_before_kernel(self) -> bool:
        """Are a consumer launch's rounds enqueued before its kernel (the first may start before it)?
        Not with one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1): each round's wait for its NCCL
        kernel would sit in the queue ahead of the fused kernel, which would start only once the last
        chunk landed, correct but with nothing overlapped (module doc, "One hardware queue")."""
        return not hardware_queues.single_queue()

    def make_ops(self, deadline_s: float):
        return streamops.cuda_ops()  # a device wait has no deadline: a producer kernel raises every flag

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory()

    def sm_count(self, device) -> int:
        return occupancy.sm_count(device)

    def compute_stream(self, device):
        return torch.cuda.current_stream(device)

    def wait_mark(self, stream, mark) -> None:
        stream.wait_event(mark)

    def join_compute(self, stream, device, bound_s: float) -> bool:
        """The compute stream's next work follows everything enqueued on `stream` (on the device: the
        host goes on at once). False where the host waited and `stream` did not drain in `bound_s`."""
        torch.cuda.current_stream(device).wait_stream(stream)
        return True

    def failures(self, stream) -> list[BaseException]:
        """What failed on `stream` that the host can know of without waiting (NCCL reports its own
        failures through its watchdog)."""
        return []

    def abort(self, pg) -> None:
        """Abort the communicator `pg`: NCCL ends its operations that never completed, so that the
        streams waiting for them (ours, then the compute stream) go on instead of hanging."""
        abort = getattr(pg, "abort", None)
        if abort is not None:
            with contextlib.suppress(Exception):  # already aborted or torn down: nothing is left waiting
                abort()

    def close(self, stream) -> None:
        """The backend lets `stream` go: a torch stream returns to torch's pool when collected."""

    def idle(self, stream) -> bool:
        """Has `stream` run everything enqueued on it (asks the device, never waits)?"""
        return stream.query()


class _Done:
    def query(self) -> bool:
        return True


class HostStreams(CudaStreams):
    """The same rounds between CPU processes over gloo, with the SM count of an H100. The syncopy
    stream is a worker thread (streamops.HostStream) that runs each round's gloo sends and receives,
    its landings and its flags in order while the interpreted kernel runs on the launching thread,
    as the rounds run beside the kernel on a GPU; the compute "stream" is the launching thread
    itself, so `join_compute` waits there for the rounds (bounded). It lets CPU tests run the round
    lowering, relays, flags, the deferred error check and the grid check end to end under the
    interpreter; `select` never picks it (nccl takes CUDA tensors)."""

    SMS = 132

    def transport(self, group):
        return control_group(group)

    def stream(self):
        return streamops.HostStream(name="syncopy-nccl-rounds")

    def after_compute(self, stream, device) -> None:
        pass  # the compute "stream" is this thread: what it wrote is in place

    def submit(self, stream, body, ops, event=None) -> None:
        if event is not None:
            event.clear()

        def run():
            with torch.inference_mode():  # the buffers are inference tensors (launch.sequence), and modes are per thread
                body(None)  # stream ops done at once, on this worker: in order with the round
            if event is not None:
                event.set()  # only when the round completed: a failed stream skips the rest

        stream.put(run)

    def mark(self, stream):
        return _Done()

    #: An interpreted kernel returns when done: its flags' rounds must be waiting on the worker before.
    sends_before_kernel = True
    rounds_before_kernel = True  # and so must a consumer's rounds: the kernel waits for their chunks

    def make_ops(self, deadline_s: float):
        return streamops.HostOps(deadline_s)

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def sm_count(self, device) -> int:
        return self.SMS

    def compute_stream(self, device):
        return Inline()

    def wait_mark(self, stream, mark) -> None:
        pass

    def join_compute(self, stream, device, bound_s: float) -> bool:
        return stream.synchronize(bound_s)

    def failures(self, stream) -> list[BaseException]:
        return list(stream.errors)

    def abort(self, pg) -> None:
        pass  # gloo's own timeout ends a stuck receive (and closes that pair's connection)

    def close(self, stream) -> None:
        stream.close()  # its worker thread ends after the rounds still enqueued

    def idle(self, stream) -> bool:
        return stream.synchronize(0.01)  # its worker ran what was enqueued before (a short wait for it)


class NcclBackend:
    name = "nccl"
    z_fastest = False  # GPUs dispatch programs x fastest
    engine = CudaStreams()

    def __init__(self, group, timeout_s: float, link: Link | None, faults: Faults | None):
        refuse_emulation(self.name, link, faults)
        self.user_group = group  # the group launches meet on (runtime/launch/agreement.py)
        self.group = control_group(group, timeout_s)
        self.nccl = self.engine.transport(group)
        self.owns_nccl = self.nccl is not group  # a communicator of our own (nccl_group), which a failure may abort
        self.global_ranks = dist.get_process_group_ranks(group)
        self.timeout_s = timeout_s
        self.stream = self.engine.stream()
        self.rounds: list[list[tuple[str, int, int]]] | None = None  # this rank's ops per round
        self.inbox: torch.Tensor | None = None  # producers (FlagRounds): each peer's partial of our rows
        self.ops = self.engine.make_ops(wait_bound(timeout_s))
        # Consumer contexts (made at the first launch): the kernels' error words, read off the launch
        # path, and the launches whose rounds may still run, oldest first.
        self.errors: LaunchErrors | None = None
        self.pending: collections.deque[Rounds] = collections.deque()
        self.events: list[list] = []  # per ring slot: an event per round, and one for the kernel (made once)
        self.free_events = None  # frees them (at close(), or when the backend is collected)

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

    @property
    def asynchronous(self) -> bool:
        """Consumer launches enqueue and return (module doc); their errors are read by `check`."""
        return self.errors is not None

    def start(self, ctx: Context, epoch: int) -> "Rounds":
        refuse_broken(self.group)  # once another operator aborted the group's communicator
        if self.rounds is None:
            self._lower(ctx)
        if self.errors is None:
            self.errors = LaunchErrors(ctx, self.ops, self.engine.pin, self.timeout_s)
            self.events = [[self.ops.event() for _ in range(len(self.rounds) + 1)] for _ in range(LaunchErrors.RING)]
            self.free_events = streamops.free_with(self, self.ops, [event for slot in self.events for event in slot])
        if len(self.pending) >= LaunchErrors.RING or len(self.errors.pending) >= LaunchErrors.RING:
            self.check(room=True)  # the host ran a ring's worth of launches ahead of the device
        return Rounds(self, ctx, epoch, self.events[epoch % LaunchErrors.RING]).start()

    def finish(self, ctx: Context, epoch: int) -> None:
        """Nothing left: `Rounds.join` enqueued the error words' copy and the compute stream's wait."""

    def check(self, wait: bool = False, room: bool = False) -> None:
        """Raise the first error of the launches that are done (all of them, with `wait`), oldest
        launch first: a kernel whose wait ran out (SyncopyTimeout naming rank, chunk and epoch), or
        rounds that never completed. Either way the operator takes no more launches (`_abandon`).
        With `room`: wait until one more launch fits in the ring (the host ran a ring ahead).

        A launch's kernel (and its error words) sits on the compute stream behind the previous
        launch's wait for its rounds, so a launch's rounds are read before the next kernel's words:
        a wait for that kernel would otherwise outlast rounds that never complete."""
        if self.errors is None:
            return
        ring = self.errors.pending
        try:
            while ring or self.pending:
                if room and len(ring) < LaunchErrors.RING and len(self.pending) < LaunchErrors.RING:
                    return
                if self.pending and (not ring or self.pending[0].epoch < ring[0][0]):
                    before = len(self.pending)
                    self._check_rounds(wait or room, upto=1)
                    if len(self.pending) == before:
                        return  # the oldest launch's rounds are still running
                else:
                    before = len(ring)
                    self.errors.check(wait=wait or room, upto=1)
                    if len(ring) == before:
                        return  # the oldest launch's kernel is still running
        except SyncopyTimeout as exc:
            failures = self.engine.failures(self.stream)
            if failures:  # CPU ranks: a gloo operation failed (the peer's connection): that is why the chunk never came
                exc = SyncopyTimeout(exc.rank, exc.chunk, exc.epoch, exc.timeout_s, f"its round failed: {transport_text(failures[0])}",
                                     "look for the cause in the peers' own output, then restart the job")
            else:
                beside = beside_text()
                if beside is not None:  # a possible cause the message names, with what to change
                    exc.args = (f"{exc}; a possible cause: {beside}",)
            self._abandon(exc)
            raise exc from None
        except LaunchError as exc:
            beside = beside_text() if not self.engine.failures(self.stream) else None
            if beside is not None:
                exc.args = (f"{exc}; a possible cause: {beside}",)
            self._abandon(exc)
            raise

    def _check_rounds(self, wait: bool, upto: int | None = None) -> None:
        """Drop the launches whose rounds completed, oldest first. A launch whose kernel is done but
        whose rounds are not, a `wait_bound` after the host first saw the kernel done, failed (a
        kernel that is done has every chunk it read: what is left are sends a peer never received,
        or receives of chunks it does not read)."""
        bound = wait_bound(self.timeout_s)
        checked = 0
        while self.pending and (upto is None or checked < upto):
            r = self.pending[0]
            while not r.finished():
                if r.since is None and self.ops.done(r.kernel):
                    r.since = time.monotonic()
                if r.since is not None and time.monotonic() > r.since + bound:
                    raise r.failure(bound, self.engine.failures(self.stream))
                if not wait:
                    return
                time.sleep(Rounds.POLL_S)
            self.pending.popleft()
            checked += 1

    def _abandon(self, exc: BaseException) -> None:
        """After a failed launch: the operator takes no more launches. Rounds still running get a
        `wait_bound` to complete (a late peer then finishes its launch); past it the communicator
        is aborted, so that no stream waits for them forever."""
        ctx = self.errors.ctx
        ctx.broken = ctx.broken or f"{type(exc).__name__}: {exc}"
        end = time.monotonic() + wait_bound(self.timeout_s)
        while (self.pending and not all(r.finished() for r in self.pending) and time.monotonic() < end
               and not self.engine.failures(self.stream)):  # a failed CPU stream runs no more rounds
            time.sleep(Rounds.POLL_S)
        if any(not r.finished() for r in self.pending):
            if self.owns_nccl:
                # The communicator is this group's (every operator on it shares it): the group's
                # later launches refuse, saying why, instead of meeting an aborted communicator.
                mark_broken(self.group, f"rank {ctx.plan.rank} aborted the group's NCCL communicator after {exc}")
                self.engine.abort(self.nccl)
            else:
                warnings.warn(f"rank {ctx.plan.rank}: NCCL rounds of the user's process group are still stuck after {exc}; syncopy "
                              "does not abort a communicator it does not own, so streams behind them wait for NCCL's own watchdog",
                              stacklevel=2)
        self.pending.clear()

    def settled(self) -> bool:
        """Is every launch of this backend done: its kernels' error words read, its rounds finished,
        its stream drained (contexts._let_go frees a destroyed group's context only then)?"""
        if self.pending or (self.errors is not None and self.errors.pending):
            return False
        return self.engine.idle(self.stream)

    def close(self) -> None:
        """Let this context's backend go (evicted or released, its launches read first:
        contexts._retire): its events and error ring are freed, and on CPU ranks its stream's
        worker thread ends. An operator launched with more shapes than it keeps contexts for
        would otherwise hold them for every shape it ever saw."""
        if self.free_events is not None:
            self.free_events()
        self.events = []
        if self.errors is not None:
            self.errors.close()
        self.engine.close(self.stream)

    def start_reduce(self, ctx: Context, out: torch.Tensor, epoch: int) -> "FlagRounds":
        refuse_broken(self.group)  # once another operator aborted the group's communicator
        return FlagRounds(self, ctx, out, epoch)


class Rounds:
    """One launch's rounds, enqueued on the backend's stream after the compute stream's work so far;
    `join()`, once the kernel is enqueued, copies the kernel's error words behind it and makes the
    compute stream wait for the rounds. Nothing waits on the host on a GPU: the backend's `check`
    reads the outcome later (pending.py)."""

    POLL_S = 1e-4
    deferred = True  # the launch returns before its kernel and rounds ran

    def __init__(self, backend: NcclBackend, ctx: Context, epoch: int, events: list):
        self.backend, self.ctx, self.epoch = backend, ctx, epoch
        self.rounds = list(zip(backend.rounds, events))  # per round: its ops, an event recorded after its flags
        self.kernel = events[-1]  # recorded behind the kernel
        self.since: float | None = None  # when the host first saw the kernel done (check)
        self.keep: list[_Round] = []  # what the rounds read and write, alive until they are done
        self.before = None  # with one hardware queue: the compute stream before the kernel (the rounds go behind it)
        self.enqueued = False

    def start(self) -> "Rounds":
        """Before the kernel: the rounds, or (one hardware queue) a mark of where the compute stream is."""
        be = self.backend
        if be.engine.rounds_before_kernel:
            self._enqueue()
        else:
            self.before = be.engine.mark(be.engine.compute_stream(self.ctx.buffer.device))
        return self

    def _enqueue(self) -> None:
        be, ctx = self.backend, self.ctx
        # Our own slot (and any poisoning) was written on the compute stream: the first sends wait for
        # it (for the mark taken before the kernel where they are enqueued after it: not the kernel).
        if self.before is None:
            be.engine.after_compute(be.stream, ctx.buffer.device)
        else:
            be.engine.wait_mark(be.stream, self.before)
        for ops, event in self.rounds:
            be.engine.submit(be.stream, lambda hs, ops=ops: self._round(ops, hs), be.ops, event)
        self.enqueued = True

    def _round(self, ops: list[tuple[str, int, int]], hs) -> None:
        """One round on the stream: its sends and receives as one NCCL group, then each landed chunk
        into place and its flags raised (a stream write-value: a memory barrier, then the flag)."""
        be, ctx, plan = self.backend, self.ctx, self.ctx.plan
        # NCCL ignores tags; the gloo transport that emulates it on CPU matches by them (context id:
        # ranks that launch different shapes never match each other's messages, see gloo.py).
        rnd = _Round(be)
        for kind, g, peer in ops:
            tag = (ctx.uid % (1 << 14)) << 16 | g
            if kind == "send":
                rnd.send(ctx.send_view(g, peer), peer, tag)
            else:
                rnd.recv(ctx.chunk_view(g), peer, tag)
        self.keep.append(rnd)
        rnd.run()
        for kind, g, _ in ops:
            if kind == "recv":
                for f in plan.flags(g):
                    be.ops.write32(ctx.flag_address(f), self.epoch, hs)

    def join(self) -> None:
        """Behind the kernel on the compute stream: its error words to the ring (before the wait for
        the rounds, so that they are read even if a round never completes), an event, then the wait
        for the rounds, so that what the caller enqueues next (and the next launch's own slot)
        follows them. Called whether or not the kernel launched. With one hardware queue the rounds
        are enqueued here first: the error words' copy waits for the kernel, so in one queue it must
        come after the rounds the kernel waits for."""
        be, device = self.backend, self.ctx.buffer.device
        if self.before is not None and not self.enqueued:
            self._enqueue()
        hc = be.ops.handle(be.engine.compute_stream(device))
        be.errors.record(self.epoch, hc)
        be.ops.record(self.kernel, hc)
        be.engine.join_compute(be.stream, device, wait_bound(be.timeout_s))
        be.pending.append(self)

    def finished(self) -> bool:
        return all(self.backend.ops.done(ev) for _, ev in self.rounds)

    def failure(self, bound: float, failures: list[BaseException]) -> BaseException:
        """What a launch whose rounds never completed reports: the first chunk it never received
        (SyncopyTimeout), else its sends."""
        plan, ops = self.ctx.plan, self.backend.ops
        stuck = [o for o, ev in self.rounds if not ops.done(ev)]
        lost = [g for o in stuck for kind, g, _ in o if kind == "recv"]
        why = f" ({transport_text(failures[0])})" if failures else ""
        if lost:
            return SyncopyTimeout(plan.rank, divmod(lost[0], plan.chunks_per_rank), self.epoch, self.backend.timeout_s,
                                  f"its NCCL receive never completed within {bound:g}s{why}")
        peers = sorted({peer for o in stuck for kind, _, peer in o if kind == "send"})
        return LaunchError(f"rank {plan.rank}: NCCL sends of launch {self.epoch} to rank(s) {', '.join(map(str, peers))} did not "
                           f"complete within {bound:g}s{why} (a peer never received them); check that every rank launched the "
                           "kernel with the same shapes, or raise timeout_s")


def _run(p2p: list) -> None:
    """One round: its sends and receives as one NCCL group; the current stream waits for it."""
    if p2p:
        for work in dist.batch_isend_irecv(p2p):
            work.wait()  # the stream waits for NCCL's stream; the host does not block


class _Round:
    """One round's sends and receives (`_run`), on the current stream. A strided view is sent
    through a contiguous copy, and received into a contiguous tensor copied into place after."""

    def __init__(self, backend: NcclBackend):
        self.group, self.global_ranks = backend.nccl, backend.global_ranks
        self.ops: list[dist.P2POp] = []
        self.landing: list[tuple[torch.Tensor, torch.Tensor]] = []  # (where a receive belongs, the tensor it lands in)

    def send(self, view: torch.Tensor, peer: int, tag: int) -> None:
        data = view if view.is_contiguous() else view.contiguous()
        self.ops.append(dist.P2POp(dist.isend, data, self.global_ranks[peer], group=self.group, tag=tag))

    def recv(self, view: torch.Tensor, peer: int, tag: int) -> None:
        data = view if view.is_contiguous() else torch.empty_like(view, memory_format=torch.contiguous_format)
        if data is not view:
            self.landing.append((view, data))
        self.ops.append(dist.P2POp(dist.irecv, data, self.global_ranks[peer], group=self.group, tag=tag))

    def run(self) -> None:
        _run(self.ops)
        for view, data in self.landing:
            view.copy_(data)


class FlagRounds(Reduction):
    """reduce_scatter / all_reduce on nccl, triggered by the kernel's flags (module doc). Built at the
    launch's start (a mark on the compute stream: the partial is initialised); `join()`, called once
    the kernel is enqueued, enqueues the rounds and the reduction on the syncopy stream and makes the
    compute stream wait for them: nothing waits on the host on a GPU. Chunks along any dim: one
    that is not contiguous (dim > 0) travels through a contiguous copy made on the stream, after its
    flag, and lands through one."""

    def __init__(self, backend: NcclBackend, ctx: Context, out: torch.Tensor, epoch: int):
        super().__init__(backend, ctx, out)
        self.epoch = epoch
        plan = ctx.plan
        if backend.inbox is None:  # [p]: peer p's partial of our part; made at the first launch, then reused (a backend per context)
            shape = list(ctx.buffer.shape)
            shape[ctx.dim] = plan.rows_per_rank
            backend.inbox = torch.empty((plan.world, *shape), dtype=out.dtype, device=out.device)
        self.inbox = backend.inbox
        self.start_mark = backend.engine.mark(backend.engine.compute_stream(ctx.buffer.device))
        self.enqueued = False
        self.done_rounds = 0  # how many of `rounds()` completed (CPU ranks: read if the rounds time out)
        self.abandoned = False
        if backend.engine.sends_before_kernel:
            self._enqueue()

    def _enqueue(self) -> None:
        be = self.backend
        be.engine.wait_mark(be.stream, self.start_mark)  # the partial is initialised; not the kernel (its flags say which chunk is done)
        be.engine.submit(be.stream, self._rounds, be.ops)
        self.enqueued = True

    def rounds(self) -> list[tuple[int, int, int, int]]:
        """(send chunk, to, receive chunk, from) per round: every rank runs the same (offset, index)
        sequence, so each round's send meets its receive."""
        plan = self.ctx.plan
        r, w, c = plan.rank, plan.world, plan.chunks_per_rank
        return [(((r + d) % w) * c + i, (r + d) % w, r * c + i, (r - d) % w) for d in range(1, w) for i in range(c)]

    def join(self) -> None:
        be, ctx, engine = self.backend, self.ctx, self.backend.engine
        if not self.enqueued:
            self._enqueue()
        bound = wait_bound(be.timeout_s)
        drained = engine.join_compute(be.stream, ctx.buffer.device, bound)  # what the caller enqueues next (and the next launch) follows
        failures = engine.failures(be.stream)
        if not drained or failures:  # CPU ranks only: the host waited for the rounds
            self.abandoned = True  # a round that completes late must not write `out` any more
            rounds = self.rounds()
            if self.done_rounds < len(rounds):
                _, _, g_recv, source = rounds[self.done_rounds]
                self.lost.append((g_recv, source))  # SyncopyTimeout: its partial sum from `source` never came
            elif failures:
                self.errors.append(failures[0])
            else:
                self.errors.append(RuntimeError(f"the rounds of launch {self.epoch} did not complete within {bound:g}s"))
            return
        for g in ctx.plan.owned:
            self.final[g].set()

    def _rounds(self, hs) -> None:
        """On the syncopy stream: per round, wait for the chunk's flag, send it and receive a peer's
        partial of ours; then reduce our part (all_reduce: and gather everyone's)."""
        be, ctx, out, e = self.backend, self.ctx, self.out, self.epoch
        plan, ops, dim = ctx.plan, be.ops, ctx.dim
        rows = plan.rows_per_rank

        def tag(g: int) -> int:
            return (ctx.uid % (1 << 14)) << 16 | (1 << 15) | g

        on_host = hs is None  # the CPU engine: the rounds run here, and the trace takes the host's times
        for g_send, to, g_recv, source in self.rounds():
            rnd = _Round(be)
            if not plan.empty(g_send):  # chunks past a short last part move nothing (on both ends)
                ops.wait32(ctx.flag_address(g_send), e, hs)  # every tile of the chunk stored
                lo, hi = plan.bounds(g_send)
                rnd.send(ctx.buffer.narrow(dim, lo, hi - lo), to, tag(g_send))
                if on_host and ctx.trace is not None:  # when it left: handed to the transport
                    ctx.trace.sent[g_send] = time.perf_counter() - ctx.t0
            if not plan.empty(g_recv):
                lo, hi = plan.bounds(g_recv)
                rnd.recv(self.inbox[source].narrow(dim, lo - plan.rank * rows, hi - lo), source, tag(g_recv))
            rnd.run()
            self.done_rounds += 1
        for g in range(plan.rank * plan.chunks_per_rank, (plan.rank + 1) * plan.chunks_per_rank):
            if not plan.empty(g):  # our own part of our partial: every tile of it stored, as the peers' are
                ops.wait32(ctx.flag_address(g), e, hs)
        if self.abandoned:
            return
        lo, hi = plan.part(plan.rank)
        parts = [ctx.buffer.narrow(dim, lo, hi - lo) if p == plan.rank else self.inbox[p].narrow(dim, 0, hi - lo)
                 for p in range(plan.world)]
        if plan.pattern == "all_reduce":
            # The gather half: our reduced part to every peer, theirs into our buffer, one round
            # per peer offset (every rank the same), then the buffer is the result.
            reduce_into(ctx.buffer.narrow(dim, lo, hi - lo), parts)
            for d in range(1, plan.world):
                to, source = (plan.rank + d) % plan.world, (plan.rank - d) % plan.world
                t_lo, t_hi = plan.part(source)
                rnd = _Round(be)
                if hi > lo:  # a short last part may be empty
                    rnd.send(ctx.buffer.narrow(dim, lo, hi - lo), to, tag((1 << 14) | plan.rank))
                if t_hi > t_lo:
                    rnd.recv(ctx.buffer.narrow(dim, t_lo, t_hi - t_lo), source, tag((1 << 14) | source))
                rnd.run()
            if not self.abandoned:
                out.copy_(ctx.buffer)
        else:
            reduce_into(out, parts)
