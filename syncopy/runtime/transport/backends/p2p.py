r"""The single-node GPU backend: each rank pushes its chunks straight into its peers' buffers with
the copy engines, through CUDA IPC mappings of every rank's gathered buffer and signal pad, and
raises the peer's flag behind each chunk with a stream write-value. Communication uses no SM, and a
warm launch enqueues and returns: the handshake between ranks is on the device.

    rank r, launch e (all_gather; one push stream per peer, high priority)
    host            local | enqueue: ready words, pushes | launch kernel | error words, bounded wait | return
    compute stream  [own shard -> own slot, own flags = e][ready[r] = e in every peer's pad][== fused kernel ==][error words -> ring][wait pushed[p] >= e, bounded][late words -> ring]
    push stream (p)    [wait ready[p] >= e in our pad][chunk -> p's slot][p's flag = e][chunk][flag] ... [pushed[p] = e]
                        \__ p finished its kernel e-1 and its writes before e   \__ write-value: a memory barrier first

A peer may push launch e's chunks into this rank's buffer only once this rank's kernel e-1 is done
reading it and its pre-launch writes for e (own slot, poisoning) are in place: this rank says so by
writing e into a word of every peer's pad, on its compute stream behind those writes
(`cuStreamWriteValue32` to the peer's mapped pad); each push stream waits for that word
(`cuStreamWaitValue32` on its own pad) before its first copy. The compute stream waits for this
rank's pushes after the kernel, so work the caller enqueues next (and the next launch's own
writes) follows them like any stream-ordered op. The kernel's error words are read after the
fact (runtime/streams/error_ring.py): at the next launch or `fused.synchronize()`.

A dead or absent peer. A push stream's wait for a peer's ready word has no deadline (a device wait
never has one), so the compute stream never waits for the push streams themselves: each push
stream raises a word of ours at its end (`pushed[p]`), and the compute stream waits for those with a
bounded one-program kernel (peer_wait.py), which leaves late words naming the peer where the bound
ran out. The kernel's error words are copied into the ring before that wait, as nccl copies them
before its wait for the rounds, and the late words into a ring of their own after it: the launch's
events always complete, `check` raises a SyncopyTimeout naming the peer, and `check(wait=True)`
waits on the host for an event of the launch's end, never for the whole device (a push stream
stuck on a dead peer would hold that forever). A failure read from a ring marks the context
broken: later launches refuse, saying why, rather than go on with failures unreported.
reduce_scatter and all_reduce wait the same way for the peers' delivered and gathered words and
for their own sends (`SendReduce`). What a dead peer leaves behind: the survivor's push streams
still wait for it on the device; the operator is broken, and a peer that comes back late lets them go.

Peer access. A peer's buffer and pad are opened on this rank's device (`CudaMemory.open`): the
mapping lives in this rank's context, and CUDA enables peer access to the owner's GPU as it maps it
(torch opens IPC handles with cudaIpcMemLazyEnablePeerAccess), before any copy or write-value of
ours reaches the peer; the token check reads through that very mapping. Opened on the owner's
device, as the handle says, the mapping would live in a context this process makes on every peer
GPU, and this device's copy engines and write-values would reach it only once something had
enabled peer access (a torch copy across devices did, on consumers; reduce_scatter's raw copies
never make one). Before opening anything, every pair of GPUs is checked (`unreachable_peers`:
visible here, and cudaDeviceCanAccessPeer); a node where one pair cannot reach the other refuses
p2p on every rank alike, and `auto` picks nccl there.

One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1, runtime/streams/hardware_queues.py): a push
stream's wait enqueued before the kernel would hold the kernel back until the peer is ready, and
overlap would disappear. There the pushes are enqueued behind the kernel, starting from an event
recorded before it (`P2PBackend.pushes_after_kernel`, which says when that is safe). What one queue
costs a dead peer: whichever side of the kernel the pushes' wait for it sits, everything enqueued
after it in the queue (the bounded wait and the ring copies included) waits too, so no device word
can say which peer it was. The host still bounds `check(wait=True)` and names the peer from the
peers' hosts' word of which launch they started (`P2PBackend.started`, in the node barrier's shared
file); this process's GPU work stays stuck behind the wait: the job must be restarted.

Why stream write-values and waits (runtime/streams/streamops.py): the write-value is documented to order the
stream's earlier writes before the flag, which a copy of the epoch behind the chunk is not; the wait
keeps the handshake off the host. Both are driver calls through ctypes (no new dependency).

Why CUDA IPC and not torch symmetric memory: the gathered buffer and signal pad are ordinary torch
allocations that the fused kernel already takes; torch's CUDA IPC (`reduce_tensor`/rebuild, the
machinery of torch.multiprocessing) maps them into the peers with nothing but a handle exchange on
the gloo control group, works for two processes on one GPU (how the one-GPU test runs), and has
kept its form across torch releases. `torch.distributed._symmetric_memory` would need every buffer
allocated by its own allocator, its rendezvous API is private and has changed between releases,
and two ranks on one device are outside what it supports.

Launch after launch nothing is reset (flags and ready words carry the epoch).

Ranks that share one GPU (tests, emulation) are the exception to in-kernel overlap. Without MPS,
kernels of different processes on one GPU take turns: on an H200 (default compute mode) two ranks
whose kernels each spun out a 1 s poll budget took 2.5 s each, one kernel after the other. A rank
whose kernel spins while the pushes it waits for sit in the other process's queue would then wait
on the GPU's time-slicing at best. So when any GPU of the group hosts more than one rank (`any_device_shared`: the
same answer on every rank, so that all of them take the same handshake), every launch starts with a host sync and a barrier, and every rank's pushes complete (push streams
synced, then a barrier) before any kernel starts: correct, not overlapped, and synchronous. One
rank per GPU, the configuration the backend is for, launches at once and asynchronously.

reduce_scatter, on ranks alone on their GPU, sends each chunk to its owner as soon as the kernel
raises the chunk's flag, while later tiles still compute (`SendReduce`):

    rank r, launch e (one send stream per peer d; the compute stream's waits are bounded, peer_wait.py)
    compute    [targets, partial = 0][== fused kernel: tiles in send order, flags rise ==][wait delivered[p] >= e, all p][our rows = own + inbox (rank order)][ready[r] = e in every peer's pad][wait sent[p] >= e][late words -> ring]
    send (d)                          [wait ready[d] >= e-1][wait flag g >= e][g -> d's inbox[r]][...][delivered[r] = e in d's pad][sent[d] = e]
                                       \__ d has reduced launch e-1: its inbox may take e       (enqueued after the kernel: see loopback._launch_producer)

The inbox (one slot per peer) is mapped into every peer by CUDA IPC, like the buffer; the words are
in the signal pads (runtime/state/context.py). The launch returns once all of it is enqueued.

all_reduce, on ranks alone on their GPU, is that reduce-scatter followed by a gather on the device:

    compute    ... [our rows = own + inbox][mark reduced] ...................... [wait gathered[p] >= e, all p][out = buffer]
    send (d)   ... [delivered[r] = e in d's pad] [wait reduced][our rows -> d's buffer][gathered[r] = e in d's pad]

Each rank's rows are reduced once, by their owner, and copied to everyone: every rank gets the same
bits. d's partial of our rows is in our inbox before we reduce, so nothing of d's still reads the
rows our push overwrites; our next launch rewrites our buffer only after every peer's push is in.
Ranks that share a GPU run both patterns correctly but without in-kernel overlap (`PullReduce`):
after the kernel, every rank adds the peers' partials, read through the same IPC mappings, in rank
order (so every rank gets the same bits), between two barriers.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
import warnings
import time

import torch
import torch.distributed as dist

from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.state import plan as planning
from syncopy.runtime.streams import hardware_queues, streamops
from syncopy.runtime.transport.backends import peer_wait
from syncopy.runtime.transport.backends.control import JOIN_FIX, NodeBarrier, control_group, hosts, node_barrier, wait_bound
from syncopy.runtime.state.context import Context
from syncopy.runtime.transport.link import Faults, Link
from syncopy.runtime.streams.error_ring import ErrorRing, LaunchErrors
from syncopy.runtime.where import spin_limit
from syncopy.runtime.transport.reduction import reduce_into


def refuse_emulation(name: str, link: Link | None, faults: Faults | None, drop: bool = False) -> None:
    """GPU backends use real links: no emulated link; dropping chunks only where it cannot wedge a transport."""
    if link is not None and link != Link():
        raise LaunchError(f"link emulation runs on the gloo backend; the {name} backend moves chunks over the real link, drop link=")
    if faults is not None and (faults.delay_s or faults.kill or faults.corrupt or (faults.drop and not drop)):
        what = ("delays" if faults.delay_s else "killed ranks" if faults.kill else "corrupt chunks" if faults.corrupt
                else "dropped chunks")
        raise LaunchError(f"the {name} backend cannot inject {what}; use backend='gloo' (CPU) for fault injection")


def put_own_shard(ctx: Context, shard: torch.Tensor) -> None:
    """This rank's shard (all_to_all: its own block of it) into its slot of the gathered buffer, and
    its flags to the epoch, on the compute stream (before the kernel, in stream order)."""
    rank, rows = ctx.plan.rank, ctx.plan.rows_per_rank
    mine = shard.narrow(ctx.dim, rank * rows, rows) if ctx.source is not None else shard
    ctx.buffer.narrow(ctx.dim, rank * rows, rows).copy_(mine)
    per = ctx.plan.flags_per_rank
    lo = dev.SIG_HEADER + rank * per
    ctx.signals[lo : lo + per] = ctx.word


@functools.lru_cache(maxsize=None)
def _storage_device_arg(rebuild) -> int:
    """Where torch's rebuild function takes the device to open a CUDA IPC handle on."""
    return list(inspect.signature(rebuild).parameters).index("storage_device")


_reach: dict = {}  # (group token, device) -> the answer of unreachable_peers, the same on every rank


def unreachable_peers(group, device) -> list[str]:
    """Which ranks of `group` cannot write into which other rank's GPU (collective the first time
    for a group and device; the same list on every rank). A peer's GPU must be visible to this
    process (CUDA IPC maps only a device the process can see) and reachable by peer access
    (cudaDeviceCanAccessPeer: over NVLink or PCIe; false, for instance, across PCIe root complexes
    or in VMs without P2P). Ranks that share a GPU need neither. Each rank checks its own pairs and
    the lists are exchanged, so every rank takes the same backend."""
    from syncopy.runtime.transport.backends import control

    key = (control.group_token(group), str(device))
    with control.group_lock(group):
        if key not in _reach:
            ids, _ = control._device_ids(group, device)  # (host, GPU uuid) of every rank
            rank, world = dist.get_rank(group), dist.get_world_size(group)
            here = torch.device(device).index
            local = {}
            for i in range(torch.cuda.device_count()):
                local.setdefault(str(getattr(torch.cuda.get_device_properties(i), "uuid", "")) or f"cuda:{i}", i)
            mine = []
            for r, (_, uuid) in enumerate(ids):
                theirs = local.get(uuid)
                if r == rank or theirs == here:
                    continue
                if theirs is None:
                    mine.append(f"rank {rank} (GPU {here}) cannot see rank {r}'s GPU (CUDA_VISIBLE_DEVICES hides it)")
                elif not torch.cuda.can_device_access_peer(here, theirs):
                    mine.append(f"rank {rank} (GPU {here}) has no peer access to rank {r}'s GPU {theirs}")
            every: list = [mine]
            if world > 1:
                every = [None] * world
                dist.all_gather_object(every, mine, group=control.control_group(group))
            _reach[key] = [line for lines in every for line in lines]
    return _reach[key]


def peers_reachable(group, device) -> bool:
    """Can every rank of `group` write into every other's GPU memory (`unreachable_peers`)?"""
    return not unreachable_peers(group, device)


class CudaMemory:
    """How p2p reaches the GPU: high-priority streams, pinned host words, CUDA IPC handles."""

    def stream(self, device):
        return torch.cuda.Stream(device=device, priority=-1)

    def using(self, stream):
        return torch.cuda.stream(stream)

    def after_compute(self, stream, device) -> None:
        """`stream`'s next work follows everything enqueued so far on the compute stream."""
        stream.wait_stream(torch.cuda.current_stream(device))

    def sync(self, device) -> None:
        torch.cuda.current_stream(device).synchronize()

    def compute_stream(self, device):
        return torch.cuda.current_stream(device)

    def sync_all(self, device) -> None:
        torch.cuda.synchronize(device)

    def keep(self, t: torch.Tensor, stream) -> None:
        """The caller's tensor `t` is read on `stream`: the caching allocator must not reuse it before."""
        t.record_stream(stream)

    def make_ops(self, deadline_s: float):
        return streamops.cuda_ops()  # a device wait has no deadline: the bounded kernel waits end every launch

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory()

    #: Send streams run beside the kernel only once enqueued after it (loopback._launch_producer).
    sends_before_kernel = False

    def send_stream(self, device, deadline_s: float):
        return self.stream(device)  # a device wait has no deadline: a producer kernel raises every flag

    def share(self, t: torch.Tensor) -> tuple:
        from torch.multiprocessing.reductions import reduce_tensor

        return reduce_tensor(t)  # (rebuild_cuda_tensor, its arguments): plain data, pickles anywhere

    def reach(self, group, device) -> list[str]:
        """Why some rank of `group` cannot write into another's GPU memory (collective the first
        time; the same answer on every rank); empty where every pair can (see `unreachable_peers`)."""
        return unreachable_peers(group, device)

    def open(self, shared: tuple, device) -> torch.Tensor:
        """A peer's tensor, mapped into *this* rank's device: torch opens the handle under a guard of
        the device it is told, and the owner's device (what the handle says) would map it in a
        context made on the peer's GPU, in every process for every peer, and leave this device
        without peer access to it (module doc, "Peer access"). Opened here, the mapping is in our
        context and CUDA enables peer access to the owner's GPU as it maps it
        (cudaIpcMemLazyEnablePeerAccess, the flag torch opens with)."""
        rebuild, args = shared
        args = list(args)
        args[_storage_device_arg(rebuild)] = torch.device(device).index
        return rebuild(*args)

    def read_word(self, pad: torch.Tensor, index: int) -> int:
        """Word `index` of a mapped pad, read through that very mapping (our device, as the writes)."""
        return int(pad[index])

    def bounded_wait(self, words: torch.Tensor, late: torch.Tensor, rank: int, world: int, epoch: int, limit: int, what: int) -> None:
        """Enqueue peer_wait.wait_peers on the compute stream (the current stream)."""
        from syncopy.runtime.transport.backends.peer_wait import wait_peers

        guard = torch.cuda.device(words.device) if words.is_cuda else contextlib.nullcontext()  # Triton launches on the current device
        with guard:
            wait_peers[(1,)](words, late, rank, world, streamops.wrap32(epoch), limit, WHAT=what)

    def mark(self, device):
        """An event on the compute stream now: push streams enqueued behind the kernel start from
        here, not from the kernel's end (`after_compute`)."""
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
        return event

    def after_mark(self, stream, mark) -> None:
        stream.wait_event(mark)

    def shares_device(self, group, device) -> bool:
        """Do two ranks of `group` share a GPU anywhere in the group (collective the first time)?
        Every rank gets the same answer and so takes the same handshake."""
        from syncopy.runtime.transport.backends.control import any_device_shared

        return any_device_shared(group, device)


class Inline:
    """A "stream" whose work is done when enqueued."""

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass


class HostMemory(CudaMemory):
    """The same protocol between CPU processes on one host: shared memory instead of IPC handles,
    copies done at once. It lets CPU tests run p2p's pushes, handshakes and reductions end to end
    under the interpreter; `select` never picks it (p2p takes CUDA tensors)."""

    def stream(self, device):
        return Inline()

    def using(self, stream):
        return contextlib.nullcontext()

    def after_compute(self, stream, device) -> None:
        pass

    def sync(self, device) -> None:
        pass

    def compute_stream(self, device):
        return Inline()

    def sync_all(self, device) -> None:
        pass

    def keep(self, t: torch.Tensor, stream) -> None:
        pass

    def make_ops(self, deadline_s: float):
        return streamops.HostOps(deadline_s)

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t

    #: An interpreted kernel returns when done: its sends must be waiting on worker threads before.
    sends_before_kernel = True

    def send_stream(self, device, deadline_s: float):
        return streamops.HostStream(deadline_s, name="syncopy-p2p-send")

    def reach(self, group, device) -> list[str]:
        return []  # CPU processes share the host's memory

    def mark(self, device):
        return None

    def after_mark(self, stream, mark) -> None:
        pass

    def share(self, t: torch.Tensor) -> tuple:
        import torch.multiprocessing
        from torch.multiprocessing.reductions import reduce_storage

        torch.multiprocessing.set_sharing_strategy("file_system")  # names, not descriptors: plain pickle carries them
        t.share_memory_()  # in place: every view of the storage now lives in shared memory
        return reduce_storage(t.untyped_storage()), t.dtype, tuple(t.shape), t.stride(), t.storage_offset()

    def open(self, shared: tuple, device) -> torch.Tensor:
        (rebuild, args), dtype, shape, stride, offset = shared
        return torch.empty(0, dtype=dtype).set_(rebuild(*args), offset, shape, stride)

    def shares_device(self, group, device) -> bool:
        return False  # CPU processes run side by side


class LatePeers(ErrorRing):
    """The late words of launches (peer_wait.wait_peers), copied behind the bounded waits into a
    ring as the kernel's error words are, and read the same way (at the next launch, `check`, or by
    the watchdog): a wait that ran out is a SyncopyTimeout naming the peer, and breaks the context."""

    refuses = True  # the operator refuses its later launches once one failed (what the ring's error says of them)

    def __init__(self, ctx: Context, ops, pin, late: torch.Tensor, timeout_s: float, bound_s: float):
        super().__init__(ops, pin, streamops.ptr(late))
        self.ctx, self.timeout_s, self.bound_s = ctx, timeout_s, bound_s

    def broke(self, exc: BaseException) -> None:
        self.ctx.broken = self.ctx.broken or f"{type(exc).__name__}: {exc}"

    def failed(self, words: list[int], epoch: int) -> None:
        what, rank, peer, at = words
        plan, e = self.ctx.plan, self.ctx.unwrap(at)
        c = plan.chunks_per_rank
        mine = (plan.owned[0] if plan.owned else rank * c) if self.ctx.producer else rank * c
        after = f"within {self.bound_s:g}s after this rank's kernel"
        if what == peer_wait.PUSHED:
            chunk, why = mine, (f"rank {peer} never took it: it never got ready for launch {e} {after} (it died, or skipped "
                                "that launch), so this rank's pushes to it never started")
        elif what == peer_wait.DELIVERED:
            chunk, why = mine, f"the partial sums from rank {peer} never came {after} (it died, or skipped that launch)"
        elif what == peer_wait.SENT:
            chunk, why = mine, (f"rank {peer} never took this rank's partial sums {after}: it never finished launch {e - 1} "
                                "(it died, or skipped a launch)")
        else:
            chunk, why = peer * c, f"the reduced rows of rank {peer} never came {after} (it died, or skipped that launch)"
        raise SyncopyTimeout(rank, divmod(chunk, c), e, self.timeout_s, why)


class PeerWaits:
    """What one context needs to wait for peers on its compute stream with a bound (peer_wait):
    words its own push or send streams raise when done (`done[p]`: epoch e once everything of
    launch e for peer p ran), the launch's late words, their ring, and an event behind the whole
    launch (`settle`: a bounded wait for the launches on the host)."""

    def __init__(self, backend: "P2PBackend", ctx: Context):
        mem, device = backend.memory, ctx.buffer.device
        self.backend, self.ctx, self.ops = backend, ctx, backend.ops
        self.done = torch.zeros(ctx.plan.world, dtype=torch.int32, device=device)
        self.late = torch.zeros(peer_wait.LATE_WORDS, dtype=torch.int32, device=device)
        self.bound_s = wait_bound(backend.timeout_s)
        self.limit = spin_limit(self.bound_s, device.type)
        self.ring = LatePeers(ctx, self.ops, mem.pin, self.late, backend.timeout_s, self.bound_s)
        self.settled = self.ops.event()
        self.epoch = 0  # the last launch that recorded `settled`
        self._free = streamops.free_with(self, self.ops, [self.settled])

    def done_address(self, p: int) -> int:
        return streamops.ptr(self.done) + 4 * p

    def begin(self, hc) -> None:
        """On the compute stream: nothing is late yet in this launch."""
        self.ops.zero32(streamops.ptr(self.late), peer_wait.LATE_WORDS, hc)

    def wait(self, words: torch.Tensor, what: int, epoch: int) -> None:
        """On the compute stream: words[p] >= epoch for every peer p, or the late words say which was not."""
        plan = self.ctx.plan
        self.backend.memory.bounded_wait(words, self.late, plan.rank, plan.world, epoch, self.limit, what)

    def end(self, epoch: int, hc) -> None:
        """On the compute stream: the late words to the ring, then the event `settle` polls."""
        self.ring.record(epoch, hc)
        self.ops.record(self.settled, hc)
        self.epoch = epoch

    def settle(self) -> None:
        """Wait on the host, at most the bound, until the last launch's work on the compute stream is
        done: its kernel and bounded waits end by themselves, so past the bound something else holds
        the stream. No device-wide synchronize: it would also wait for push streams stuck on a dead peer."""
        if self.epoch == 0:
            return  # no launch yet
        bound = self.bound_s + self.backend.timeout_s
        end = time.monotonic() + bound
        while not self.ops.done(self.settled):
            if time.monotonic() > end:
                self._never_ended(bound)
            time.sleep(20e-6)

    def _never_ended(self, bound: float) -> None:
        """The last launch had not ended `bound` seconds later. A peer that never started it (the
        host's word of it, `P2PBackend.behind`) is named: with one hardware queue the pushes' device
        wait for that peer holds every stream of the process, the bounded waits included."""
        rank, e, be = self.ctx.plan.rank, self.epoch, self.backend
        late = be.behind(e)
        queue = (" (CUDA_DEVICE_MAX_CONNECTIONS=1: this rank's pushes wait for it on the device, in the one hardware queue every "
                 "stream of this process shares, so this process's GPU work stays stuck behind them)") if hardware_queues.single_queue() else ""
        if late:
            raise SyncopyTimeout(rank, (late[0], 0), e, be.timeout_s,
                                 f"rank {late[0]} never started launch {e} (it died, or skipped it), and this rank's launch had not "
                                 f"ended {bound:g}s later{queue}", "restart the job; " + SyncopyTimeout.ADVICE)
        raise LaunchError(f"rank {rank}: launch {e} had not ended on its stream {bound:g}s later, though its kernel and its waits "
                          "for the peers are bounded; work enqueued on that stream before it is still running: synchronize that first")

    def close(self) -> None:
        self.ring.close()
        self._free()


def make_room(*rings) -> None:
    """Before the kernel is enqueued: each ring has a slot for this launch (ErrorRing.make_room,
    which waits for, or raises, the oldest launch when a ring's worth is pending; rings without it
    make room themselves when they record)."""
    for ring in rings:
        room = getattr(ring, "make_room", None)
        if room is not None:
            room()


class P2PBackend:
    name = "p2p"
    z_fastest = False  # GPUs dispatch programs x fastest
    memory = CudaMemory()
    handshake: NodeBarrier | None = None  # the per-launch barrier through shared host memory (gloo's where none)
    reducer: "SendReduce | None" = None  # reduce_scatter contexts of ranks alone on their GPU (set at connect)
    waits: "PeerWaits | None" = None  # consumer contexts of ranks alone on their GPU: bounded waits for the pushes
    ctx: Context | None = None  # the context (set at connect): a failure read later marks it broken
    grid_resident = True  # the last grid's programs all fit on the GPU at once (check_grid)

    def __init__(self, group, timeout_s: float, link: Link | None, faults: Faults | None):
        refuse_emulation(self.name, link, faults, drop=True)
        self.user_group = group
        self.group = control_group(group, timeout_s)
        self.timeout_s = timeout_s
        self.faults = faults or Faults()
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        names = hosts(group)
        if len(set(names)) > 1:
            raise LaunchError(f"the p2p backend maps peers' memory with CUDA IPC, which needs every rank on one node, but the ranks "
                              f"run on {', '.join(sorted(set(names)))}; use backend='nccl' (or 'auto')")
        self.peers: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None  # rank -> (buffer, signals) mapped here
        self.streams: dict[int, torch.cuda.Stream] = {}
        self.order: dict[int, list[int]] = {}
        self.shared_device = False  # another rank on this GPU: pushes complete before the launch
        self.ops = self.memory.make_ops(wait_bound(timeout_s))
        self.errors: LaunchErrors | None = None  # consumer contexts: launches whose error words are not read yet

    def check_grid(self, programs: int, persistent: bool, kernel: str, device, ctas_per_program: int = 1) -> None:
        """Every grid is safe: the copy engines need no SM. Where every stream shares one hardware
        queue, whether the grid is resident at once decides where the pushes go (`pushes_after_kernel`)."""
        if hardware_queues.single_queue() and getattr(device, "type", None) == "cuda":
            from syncopy.runtime.streams import occupancy

            self.grid_resident = programs * ctas_per_program <= occupancy.sm_count(device)

    @property
    def pushes_after_kernel(self) -> bool:
        """Are this launch's pushes enqueued behind its kernel?

        With CUDA_DEVICE_MAX_CONNECTIONS=1 (runtime/streams/hardware_queues.py) every stream feeds
        one hardware queue: a push stream's wait for a peer's ready word enqueued before the kernel
        holds the kernel until that peer is ready, and its copies too, so the kernel starts only once
        every push is done: correct, and no overlap at all. Behind the kernel, the pushes go on once
        the kernel has started, beside it. That needs every program of the grid on the GPU at once:
        a program that could only start once another one finished would hold the queue, and the
        pushes behind it, while the tiles running wait for peers' chunks that sit in the peers'
        queues alike. Such grids keep the pushes before the kernel (and are told once why they do
        not overlap). With several queues (the default) the pushes go first: they are waiting for the
        peers by the time the kernel starts. CPU ranks: always first (an interpreted kernel returns
        when done)."""
        if not hardware_queues.single_queue() or self.memory.sends_before_kernel:
            return False
        if not self.grid_resident:
            _warn_once("with CUDA_DEVICE_MAX_CONNECTIONS=1 every stream shares one hardware queue and this grid has more "
                       "programs than the GPU runs at once, so p2p pushes each launch's chunks before its kernel starts "
                       "(no overlap); launch a persistent kernel of at most one program per SM to overlap them")
            return False
        return True

    def close(self) -> None:
        """Let this context's backend go (evicted or released, its launches read first:
        contexts._retire): its error rings' and reducer's events are freed and, on CPU ranks, the
        reducer's send threads end. The peers' mappings go with their tensors."""
        if self.errors is not None:
            self.errors.close()
        if self.waits is not None:
            self.waits.close()
        if self.reducer is not None:
            self.reducer.close()

    # -- setup (once per context, collectively) -------------------------------------------------
    def _connect(self, ctx: Context) -> None:
        """Exchange IPC handles of every rank's buffer and signal pad; map the peers' here, on this
        rank's device (CudaMemory.open), once every pair of GPUs is known to reach each other."""
        mem, device = self.memory, ctx.buffer.device
        self.ctx = ctx
        problems = mem.reach(self.user_group, device)  # collective: every rank refuses alike
        if problems:
            raise LaunchError(f"the p2p backend writes into the peers' GPU memory, but {'; '.join(problems)}; "
                              "use backend='nccl' (backend='auto' picks it on such a node)")
        # A token in our pad's spare word (the tile-start counter, which begin() zeroes and only a
        # traced kernel uses) lets every peer check that its mapping reaches this very allocation.
        spare = dev.SIG_HEADER + ctx.n_flags + 1
        token = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF | 1
        ctx.signals[spare] = token
        mem.sync(device)
        mine = (mem.share(ctx.buffer), mem.share(ctx.signals), token)
        theirs: list = [None] * self.world
        dist.all_gather_object(theirs, mine, group=self.group)
        self.peers = {r: (mem.open(b, device), mem.open(s, device)) for r, (b, s, _) in enumerate(theirs) if r != self.rank}
        for r, (_, sig) in self.peers.items():
            seen = mem.read_word(sig, spare)  # through the mapping the writes use
            if seen != theirs[r][2]:
                raise LaunchError(f"rank {self.rank}: the CUDA IPC mapping of rank {r}'s signal pad reads {seen:#x} where rank {r} "
                                  f"wrote {theirs[r][2]:#x}; the mapping does not reach its memory, so pushes would be lost: use backend='nccl'")
        dist.barrier(group=self.group)  # every peer has read our token
        ctx.signals[spare] = 0
        if self.handshake is None:
            # Every rank is on this node: the launches' barriers go through shared memory, bounded
            # like the transfers (a peer's previous launch, kernel included, may still be running).
            self.handshake = node_barrier(self.user_group, wait_bound(self.timeout_s))
        self.shared_device = mem.shares_device(self.user_group, device)
        if ctx.producer:
            if not self.shared_device and ctx.plan.pattern in ("reduce_scatter", "all_reduce") and SendReduce.fits(ctx):
                self.reducer = SendReduce(self, ctx)  # collective: the inboxes' handles
            return
        if not self.shared_device:
            self.errors = LaunchErrors(ctx, self.ops, mem.pin, self.timeout_s)
            self.waits = PeerWaits(self, ctx)
        self.order = self._push_order(ctx)
        for p in self.order:
            self.streams[p] = mem.stream(device)
        for g in range(ctx.n_chunks):
            if not ctx.chunk_view(g).is_contiguous():
                raise LaunchError(
                    f"the p2p backend moves each chunk with one copy-engine copy, which needs it contiguous, but chunks along dim "
                    f"{ctx.dim} of a {list(ctx.buffer.shape)} tensor are strided; shard along dim 0 or use backend='nccl'"
                )

    def _push_order(self, ctx: Context) -> dict[int, list[int]]:
        """Per peer, this rank's chunks in the order that peer expects them (its plan's arrival order);
        peers by ring distance. Every chunk goes straight to every peer: no relays."""
        plan, c = ctx.plan, ctx.plan.chunks_per_rank
        lower = planning.all_to_all if ctx.schedule.pattern == "all_to_all" else planning.all_gather
        order = {}
        for d in range(1, self.world):
            p = (self.rank + d) % self.world
            arrival = lower(ctx.schedule, p, self.world, plan.rows_per_rank).arrival
            order[p] = [g for g in arrival if g // c == self.rank]
        return order

    def barrier(self, what: str) -> None:
        """Every rank of the group reaches this point (the node barrier, else gloo's)."""
        if self.handshake is not None:
            self.handshake.wait(what)
        else:
            dist.barrier(group=self.group)

    @property
    def asynchronous(self) -> bool:
        """Warm launches enqueue and return, their handshake on the device (module doc): every
        consumer launch, and every reduce_scatter launch, of a rank alone on its GPU, once connected."""
        return self.errors is not None or self.reducer is not None

    def _ready(self, ctx: Context) -> None:
        """The per-launch handshake: our pending writes to our buffer (own slot, poisoning) and our
        previous kernel are done, and so are every peer's. The first launch connects (collective,
        synchronous); after that, ranks alone on their GPU say so on the device (`_say_ready`),
        ranks sharing one sync and meet at a barrier."""
        if self.peers is None:
            self.memory.sync(ctx.buffer.device)
            self._connect(ctx)  # collective: a barrier too
        elif not self.asynchronous:
            self.memory.sync(ctx.buffer.device)
            self.barrier(f"the handshake of launch {ctx.epoch}")
        if self.asynchronous:
            self._say_ready(ctx)

    def started(self, epoch: int) -> None:
        """Tell the peers' hosts that this rank started launch `epoch`: one store into our slot of
        the node barrier's shared file (word 1; word 0 counts barriers). Read only to name a peer
        that never came (`behind`), where its device words cannot be read."""
        if self.handshake is not None:
            self.handshake.words[self.rank * self.handshake.step + 1] = epoch

    def behind(self, epoch: int) -> list[int]:
        """The peers that have not started launch `epoch` (as far as their hosts said: `started`)."""
        if self.handshake is None:
            return []
        words, step = self.handshake.words, self.handshake.step
        return [r for r in range(self.world) if r != self.rank and words[r * step + 1] < epoch]

    def _say_ready(self, ctx: Context) -> None:
        """On the compute stream, behind our writes to our buffer: epoch e into our ready word of
        every peer's pad (each push stream of a peer waits for it)."""
        self.started(ctx.epoch)
        hc = self.ops.handle(self.memory.compute_stream(ctx.buffer.device))
        word = ctx.ready_word(self.rank)
        for _, sig in self.peers.values():
            self.ops.write32(ctx.word_address(word, sig), ctx.epoch, hc)

    def finish(self, ctx: Context, epoch: int) -> None:
        """After the kernel, on the compute stream: the kernel's error words to the ring first
        (whatever becomes of the pushes, they are read), then a bounded wait for our pushes (what
        the caller enqueues next follows them; a peer that never got ready leaves late words
        instead of holding the stream), their late words to their ring, an event.

            compute  [== kernel ==][error words -> ring][wait pushed[p] >= e, bounded][late words -> ring][settled]
            push p      [wait ready[p]][chunks, flags][pushed[p] = e]
        """
        hc = self.ops.handle(self.memory.compute_stream(ctx.buffer.device))
        self.errors.record(epoch, hc)
        self.waits.begin(hc)
        self.waits.wait(self.waits.done, peer_wait.PUSHED, epoch)
        self.waits.end(epoch, hc)

    def check(self, wait: bool = False) -> None:
        """Raise the first error of the launches that are done (with `wait`: of all of them, waiting
        at most a bound: every launch's work on the compute stream ends by itself). A failure marks
        the context broken: its later launches refuse, saying why."""
        try:
            if self.reducer is not None:
                if wait:
                    self.reducer.waits.settle()
                self.reducer.check(wait)
            if self.errors is not None:
                if wait:
                    self.waits.settle()
                self.errors.check(wait=wait)
                self.waits.ring.check(wait=wait)
        except (SyncopyTimeout, LaunchError) as exc:
            if self.ctx is not None:
                self.ctx.broken = self.ctx.broken or f"{type(exc).__name__}: {exc}"
            raise

    # -- consumer patterns ------------------------------------------------------------------------
    def local(self, ctx: Context, shard: torch.Tensor) -> None:
        put_own_shard(ctx, shard)

    def start(self, ctx: Context, epoch: int) -> "Push":
        self._ready(ctx)
        if self.asynchronous:
            make_room(self.errors, self.waits.ring)  # before the kernel: a ring's slot for this launch
        return Push(self, ctx, epoch).start()

    # -- producer patterns ------------------------------------------------------------------------
    def start_reduce(self, ctx: Context, out: torch.Tensor, epoch: int):
        # No barrier here: the last launch's join ended with one, after every rank read our partial.
        if self.peers is None:
            self._connect(ctx)
        if self.reducer is not None:
            self.started(epoch)
            return self.reducer.start(out, epoch)
        return PullReduce(self, ctx, out)


_warned: set[str] = set()


def _warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        warnings.warn(text, stacklevel=3)


class Push:
    """One launch's pushes, enqueued on the per-peer streams (before the kernel, or behind it where
    every stream shares one hardware queue: P2PBackend.pushes_after_kernel); `join()` enqueues them
    then, or waits for them (ranks sharing a GPU)."""

    def __init__(self, backend: P2PBackend, ctx: Context, epoch: int):
        self.backend, self.ctx, self.epoch = backend, ctx, epoch
        self.errors: list[BaseException] = []
        self.lost: list[int] = []
        self.enqueued = False
        self.mark = None  # where the compute stream was before the kernel, for pushes enqueued behind it

    def start(self) -> "Push":
        be = self.backend
        if be.asynchronous and be.pushes_after_kernel:
            self.mark = be.memory.mark(self.ctx.buffer.device)
            return self  # join() enqueues them, behind the kernel
        self._enqueue()
        if be.shared_device:
            # Processes on one GPU take turns: a kernel launched now could hold the GPU while the
            # pushes it waits for sit in a peer's queue (module doc). Deliver everything first.
            self.join()
            be.barrier(f"the delivery of launch {self.epoch}")
        return self

    def _enqueue(self) -> None:
        be, ctx, plan, ops = self.backend, self.ctx, self.ctx.plan, self.backend.ops
        c = plan.chunks_per_rank
        for p, chunks in be.order.items():
            buf, sig = be.peers[p]
            stream = be.streams[p]
            hs = ops.handle(stream)
            # Our own slot (and, for all_to_all, the input) are written on the compute stream.
            if self.mark is None:
                be.memory.after_compute(stream, ctx.buffer.device)
            else:
                be.memory.after_mark(stream, self.mark)  # not the kernel's end: its tiles wait for the peers' pushes
            if ctx.source is not None:
                be.memory.keep(ctx.source, stream)
            if be.asynchronous:
                self._wait_ready(p, hs)
            with be.memory.using(stream):
                for g in chunks:
                    if divmod(g, c) in be.faults.drop:
                        continue
                    lo, hi = plan.bounds(g)
                    buf.narrow(ctx.dim, lo, hi - lo).copy_(ctx.send_view(g, p), non_blocking=True)
                    for f in plan.flags(g):
                        ops.write32(ctx.flag_address(f, sig), self.epoch, hs)
            if be.waits is not None:
                ops.write32(be.waits.done_address(p), self.epoch, hs)  # what finish's bounded wait looks for
        self.enqueued = True

    def _wait_ready(self, p: int, stream) -> None:
        """`stream` goes on once peer p's buffer may take this launch's chunks (module doc)."""
        ctx = self.ctx
        try:
            self.backend.ops.wait32(ctx.word_address(ctx.ready_word(p)), self.epoch, stream)
        except streamops.StreamTimeout:  # CPU emulation only: a device wait has no deadline (finish's bounded wait ends it)
            raise LaunchError(f"rank {self.backend.rank}: rank {p} never got ready for launch {self.epoch} within "
                              f"{wait_bound(self.backend.timeout_s):g}s; {JOIN_FIX}") from None

    @property
    def deferred(self) -> bool:
        """The launch returns without waiting: errors are read later (P2PBackend.finish and check)."""
        return self.backend.asynchronous

    def join(self) -> None:
        if not self.enqueued:
            self._enqueue()  # behind the kernel (pushes_after_kernel)
        if self.deferred:
            return
        for stream in self.backend.streams.values():
            stream.synchronize()


class Reduction:
    """A producer launch's reduction, done by `join()` after the kernel; what the launcher reads back
    from it: errors, lost chunks, and which of this rank's chunks are final."""

    def __init__(self, backend, ctx: Context, out: torch.Tensor):
        self.backend, self.ctx, self.out = backend, ctx, out
        self.errors: list[BaseException] = []
        self.lost: list[tuple[int, int]] = []
        self.final = {g: threading.Event() for g in range(ctx.n_chunks)}


class PullReduce(Reduction):
    """reduce_scatter / all_reduce on p2p, after the kernel: add every rank's partial of our rows.

    host    kernel | sync | barrier (every partial complete) | add partials (rank order) | sync | barrier

    The last barrier keeps every rank in this launch until all have read the partials: the next
    launch may re-initialise (zeros, or the user's C for all_reduce) and rewrite its buffer before its kernel.
    """

    def join(self) -> None:
        be, ctx, out = self.backend, self.ctx, self.out
        be.memory.sync(out.device)  # our partial is complete
        be.barrier(f"the partials of launch {ctx.epoch}")  # so is every peer's
        rank, dim = ctx.plan.rank, ctx.dim

        def part(r: int) -> torch.Tensor:
            t = ctx.buffer if r == rank else be.peers[r][0]
            if ctx.plan.pattern == "reduce_scatter":
                t = t.narrow(dim, rank * out.shape[dim], out.shape[dim])
            return t if t.device == out.device else t.to(out.device)  # a peer on another GPU: one copy-engine copy

        reduce_into(out, (part(r) for r in range(be.world)))
        be.memory.sync(out.device)  # our reads of the peers' partials are done...
        be.barrier(f"the end of launch {ctx.epoch}")  # ...and everyone's, before anyone rewrites a partial
        for g in ctx.plan.owned:
            self.final[g].set()


class SendReduce:
    """reduce_scatter and all_reduce on ranks alone on their GPU (module doc): per peer, a send stream
    that copies each chunk the peer owns into the peer's inbox as soon as the kernel raises its flag;
    this rank's rows are reduced on the compute stream once every peer's partials are in. all_reduce
    then pushes the reduced rows into every peer's buffer on the same streams, and the result is the
    buffer once every peer's rows are in. Nothing waits on the host."""

    def __init__(self, backend: P2PBackend, ctx: Context):
        mem, plan, dim = backend.memory, ctx.plan, ctx.dim
        self.backend, self.ctx, self.ops = backend, ctx, backend.ops
        rank, rows, c = plan.rank, plan.rows_per_rank, plan.chunks_per_rank
        self.own = plan.part(rank)  # this rank's rows (all_reduce: the last part may be short, even empty)
        part = list(ctx.buffer.shape)
        part[dim] = rows
        self.inbox = torch.zeros((plan.world, *part), dtype=ctx.buffer.dtype, device=ctx.buffer.device)  # [p]: p's partial of our rows
        mem.sync(ctx.buffer.device)
        theirs: list = [None] * plan.world
        dist.all_gather_object(theirs, mem.share(self.inbox), group=backend.group)
        boxes = self.boxes = {p: mem.open(h, ctx.buffer.device) for p, h in enumerate(theirs) if p != rank}  # kept: the sends write through them
        deadline = wait_bound(backend.timeout_s)
        self.streams = {p: mem.send_stream(ctx.buffer.device, deadline) for p in boxes}
        self.waits = PeerWaits(backend, ctx)  # done[p]: our sends to p of a launch all ran
        self.before = self.ops.event()
        self.sends: dict[int, list[tuple]] = {p: [] for p in boxes}  # owner -> [(chunk, flag, dst, src, bytes)] in finish order
        for g in plan.finish:
            d = g // c
            if d == rank or plan.empty(g):
                continue
            lo, hi = plan.bounds(g)
            dst = boxes[d][rank].narrow(dim, lo - d * rows, hi - lo)
            src = ctx.buffer.narrow(dim, lo, hi - lo)
            self.sends[d].append((g, ctx.flag_address(g), streamops.ptr(dst), streamops.ptr(src), src.nbytes))
        self.delivered = {p: ctx.word_address(ctx.delivered_word(rank), backend.peers[p][1]) for p in boxes}  # ours, in p's pad
        self.ready = {p: ctx.word_address(ctx.ready_word(rank), backend.peers[p][1]) for p in boxes}  # ours, in p's pad
        # all_reduce's gather half: our reduced rows into the same rows of every peer's buffer, then
        # our gathered word in its pad. p's partial of those rows is already in our inbox by then (we
        # reduced behind its delivered word), so nothing of p's still reads them.
        self.all_reduce = plan.pattern == "all_reduce"
        self.gathers: dict[int, tuple[int, int, int]] = {}
        self.gathered: dict[int, int] = {}
        self.reduced = self.ops.event()
        self.free_events = streamops.free_with(self, self.ops, [self.before, self.reduced])
        if self.all_reduce:
            lo, hi = self.own
            mine = ctx.buffer.narrow(dim, lo, hi - lo)
            for p in boxes:
                if hi > lo:
                    self.gathers[p] = (streamops.ptr(backend.peers[p][0].narrow(dim, lo, hi - lo)), streamops.ptr(mine), mine.nbytes)
                self.gathered[p] = ctx.word_address(ctx.gathered_word(rank), backend.peers[p][1])  # ours, in p's pad

    def close(self) -> None:
        self.free_events()
        self.waits.close()
        for stream in self.streams.values():
            if isinstance(stream, streamops.HostStream):
                stream.close()

    @staticmethod
    def fits(ctx: Context) -> bool:
        """Each chunk moves with one copy: chunks along dim 0 (others take PullReduce)."""
        return all(ctx.chunk_view(g).is_contiguous() for g in range(ctx.n_chunks))

    def start(self, out: torch.Tensor, epoch: int) -> "SendReduce.Launch":
        """Before the kernel: mark where the compute stream is (the partial is initialised)."""
        mem, device = self.backend.memory, self.ctx.buffer.device
        make_room(self.waits.ring)  # before the kernel: a ring's slot for this launch
        self.ops.record(self.before, self.ops.handle(mem.compute_stream(device)))
        launch = SendReduce.Launch(self, out, epoch)
        if mem.sends_before_kernel:
            launch.enqueue_sends()
        return launch

    def check(self, wait: bool = False) -> None:
        """A CPU send stream whose flag wait ran out: the kernel never finished that chunk; then the
        launches' late words (a peer that died or skipped a launch). With `wait`, the caller settled
        the launches first (PeerWaits.settle)."""
        for stream in self.streams.values():
            if not isinstance(stream, streamops.HostStream):
                continue
            if wait:
                stream.synchronize()
            if stream.errors:
                exc = stream.errors[0]
                stream.errors.clear()
                if not isinstance(exc, streamops.StreamTimeout):
                    raise exc
                ctx = self.ctx
                flag = (exc.addr - ctx.flag_address(0)) // 4
                raise SyncopyTimeout(ctx.plan.rank, divmod(flag, ctx.plan.chunks_per_rank), ctx.unwrap(exc.value), self.backend.timeout_s,
                                     "the kernel never finished it")
        self.waits.ring.check(wait=wait)

    class Launch:
        """One launch's sends and reduction; `join()` (after the kernel) enqueues what is left."""

        deferred = True
        errors: list = []
        lost: list = []

        def __init__(self, reducer: "SendReduce", out: torch.Tensor, epoch: int):
            self.reducer, self.out, self.epoch = reducer, out, epoch
            self.enqueued = False

        def enqueue_sends(self) -> None:
            r, ops, e = self.reducer, self.reducer.ops, self.epoch
            ctx = r.ctx
            for d, stream in r.streams.items():
                hs = ops.handle(stream)
                ops.wait_event(hs, r.before)
                ops.wait32(ctx.word_address(ctx.ready_word(d)), e - 1, hs)  # d has reduced launch e-1
                for g, flag, dst, src, n in r.sends[d]:
                    ops.wait32(flag, e, hs)
                    ops.copy(dst, src, n, hs)
                    if ctx.trace is not None and isinstance(stream, streamops.HostStream):  # CPU: when it left, for the trace
                        stream.put(lambda g=g, trace=ctx.trace: trace.sent.__setitem__(g, time.perf_counter() - ctx.t0))
                ops.write32(r.delivered[d], e, hs)
                if not r.all_reduce:  # all_reduce: behind the gather half's push (join)
                    ops.write32(r.waits.done_address(d), e, hs)
            self.enqueued = True

        def join(self) -> None:
            """Behind the kernel, on the compute stream: a bounded wait for every peer's partials of
            our rows, our rows reduced (all_reduce: and gathered), our ready words up, then a bounded
            wait for our sends (the next launch rewrites the partial they read); late words to the
            ring. Nothing on the compute stream waits for a peer without a bound.

                compute  [== kernel ==][wait delivered[p] >= e, bounded][reduce][ready[r] = e in every pad][wait sent[p] >= e, bounded][late -> ring]
            """
            r, ops, e = self.reducer, self.reducer.ops, self.epoch
            ctx, out = r.ctx, self.out
            if not self.enqueued:
                self.enqueue_sends()
            hc = ops.handle(r.backend.memory.compute_stream(ctx.buffer.device))
            plan, dim = ctx.plan, ctx.dim
            r.waits.begin(hc)
            r.waits.wait(ctx.signals.narrow(0, ctx.delivered_word(0), plan.world), peer_wait.DELIVERED, e)
            lo, hi = r.own
            parts = [ctx.buffer.narrow(dim, lo, hi - lo) if p == plan.rank else r.inbox[p].narrow(dim, 0, hi - lo)
                     for p in range(plan.world)]
            if r.all_reduce:
                reduce_into(ctx.buffer.narrow(dim, lo, hi - lo), parts)  # our rows, reduced: what every peer gets
                self._gather(hc, e)
                out.copy_(ctx.buffer)
            else:
                reduce_into(out, parts)
            for p in r.streams:
                ops.write32(r.ready[p], e, hc)  # our inbox may take launch e+1's partials
            r.waits.wait(r.waits.done, peer_wait.SENT, e)  # the next launch rewrites the partial our sends read
            r.waits.end(e, hc)

        def _gather(self, hc, e: int) -> None:
            """all_reduce's gather half: behind our reduction (on the compute stream `hc`), push our
            reduced rows into every peer's buffer and raise our gathered word there; then the
            compute stream waits, bounded, until every peer's reduced rows are in our buffer."""
            r, ops = self.reducer, self.reducer.ops
            ctx, plan = r.ctx, r.ctx.plan
            ops.record(r.reduced, hc)
            for p, stream in r.streams.items():
                hs = ops.handle(stream)
                ops.wait_event(hs, r.reduced)
                if p in r.gathers:
                    ops.copy(*r.gathers[p], hs)
                ops.write32(r.gathered[p], e, hs)
                ops.write32(r.waits.done_address(p), e, hs)
            r.waits.wait(ctx.signals.narrow(0, ctx.gathered_word(0), plan.world), peer_wait.GATHERED, e)
