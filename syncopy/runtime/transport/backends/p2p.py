r"""The single-node GPU backend: each rank pushes its chunks straight into its peers' buffers with
the copy engines, through CUDA IPC mappings of every rank's gathered buffer and signal pad, and
raises the peer's flag behind each chunk with a stream write-value. Communication uses no SM, and a
warm launch enqueues and returns: the handshake between ranks is on the device.

    rank r, launch e (all_gather; one push stream per peer, high priority)
    host            local | enqueue: ready words, pushes | launch kernel | wait words | return
    compute stream  [own shard -> own slot, own flags = e][ready[r] = e in every peer's pad][== fused kernel ==][wait pushes][error words -> ring]
    push stream (p)    [wait ready[p] >= e in our pad][chunk -> p's slot][p's flag = e][chunk][flag] ...
                        \__ p finished its kernel e-1 and its writes before e   \__ write-value: a memory barrier first

A peer may push launch e's chunks into this rank's buffer only once this rank's kernel e-1 is done
reading it and its pre-launch writes for e (own slot, poisoning) are in place: this rank says so by
writing e into a word of every peer's pad, on its compute stream behind those writes
(`cuStreamWriteValue32` to the peer's mapped pad); each push stream waits for that word
(`cuStreamWaitValue32` on its own pad) before its first copy. The compute stream waits for this
rank's pushes after the kernel, so work the caller enqueues next (and the next launch's own
writes) follows them like any stream-ordered op. The kernel's error words are read after the
fact (runtime/streams/error_ring.py): at the next launch or `fused.synchronize()`.

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

    rank r, launch e (one send stream per peer d)
    compute    [targets, partial = 0][== fused kernel: tiles in send order, flags rise ==][wait delivered[p] >= e, all p][our rows = own + inbox (rank order)][ready[r] = e in every peer's pad]
    send (d)                          [wait ready[d] >= e-1][wait flag g >= e][g -> d's inbox[r]][...][delivered[r] = e in d's pad]
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
import os
import threading
import time

import torch
import torch.distributed as dist

from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.state import plan as planning
from syncopy.runtime.streams import streamops
from syncopy.runtime.transport.backends.control import JOIN_FIX, NodeBarrier, control_group, hosts, node_barrier, wait_bound
from syncopy.runtime.state.context import Context
from syncopy.runtime.transport.link import Faults, Link
from syncopy.runtime.streams.error_ring import LaunchErrors
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

    def open(self, shared: tuple) -> torch.Tensor:
        rebuild, args = shared
        return rebuild(*args)

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

    def share(self, t: torch.Tensor) -> tuple:
        import torch.multiprocessing
        from torch.multiprocessing.reductions import reduce_storage

        torch.multiprocessing.set_sharing_strategy("file_system")  # names, not descriptors: plain pickle carries them
        t.share_memory_()  # in place: every view of the storage now lives in shared memory
        return reduce_storage(t.untyped_storage()), t.dtype, tuple(t.shape), t.stride(), t.storage_offset()

    def open(self, shared: tuple) -> torch.Tensor:
        (rebuild, args), dtype, shape, stride, offset = shared
        return torch.empty(0, dtype=dtype).set_(rebuild(*args), offset, shape, stride)

    def shares_device(self, group, device) -> bool:
        return False  # CPU processes run side by side


class P2PBackend:
    name = "p2p"
    z_fastest = False  # GPUs dispatch programs x fastest
    memory = CudaMemory()
    handshake: NodeBarrier | None = None  # the per-launch barrier through shared host memory (gloo's where none)
    reducer: "SendReduce | None" = None  # reduce_scatter contexts of ranks alone on their GPU (set at connect)

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
        """Every grid is safe: the copy engines need no SM."""

    def close(self) -> None:
        """Let this context's backend go (evicted or released, its launches read first:
        contexts._retire): its error ring's and reducer's events are freed and, on CPU ranks, the
        reducer's send threads end. The peers' mappings go with their tensors."""
        if self.errors is not None:
            self.errors.close()
        if self.reducer is not None:
            self.reducer.close()

    # -- setup (once per context, collectively) -------------------------------------------------
    def _connect(self, ctx: Context) -> None:
        """Exchange IPC handles of every rank's buffer and signal pad; map the peers' here."""
        mem = self.memory
        # A token in our pad's spare word (the tile-start counter, which begin() zeroes and only a
        # traced kernel uses) lets every peer check that its mapping reaches this very allocation.
        spare = dev.SIG_HEADER + ctx.n_flags + 1
        token = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF | 1
        ctx.signals[spare] = token
        mem.sync(ctx.buffer.device)
        mine = (mem.share(ctx.buffer), mem.share(ctx.signals), token)
        theirs: list = [None] * self.world
        dist.all_gather_object(theirs, mine, group=self.group)
        self.peers = {r: (mem.open(b), mem.open(s)) for r, (b, s, _) in enumerate(theirs) if r != self.rank}
        for r, (_, sig) in self.peers.items():
            seen = int(sig[spare])
            if seen != theirs[r][2]:
                raise LaunchError(f"rank {self.rank}: the CUDA IPC mapping of rank {r}'s signal pad reads {seen:#x} where rank {r} "
                                  f"wrote {theirs[r][2]:#x}; the mapping does not reach its memory, so pushes would be lost: use backend='nccl'")
        dist.barrier(group=self.group)  # every peer has read our token
        ctx.signals[spare] = 0
        if self.handshake is None:
            # Every rank is on this node: the launches' barriers go through shared memory, bounded
            # like the transfers (a peer's previous launch, kernel included, may still be running).
            self.handshake = node_barrier(self.user_group, wait_bound(self.timeout_s))
        self.shared_device = mem.shares_device(self.user_group, ctx.buffer.device)
        if ctx.producer:
            if not self.shared_device and ctx.plan.pattern in ("reduce_scatter", "all_reduce") and SendReduce.fits(ctx):
                self.reducer = SendReduce(self, ctx)  # collective: the inboxes' handles
            return
        if not self.shared_device:
            self.errors = LaunchErrors(ctx, self.ops, mem.pin, self.timeout_s)
        self.order = self._push_order(ctx)
        for p in self.order:
            self.streams[p] = mem.stream(ctx.buffer.device)
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

    def _say_ready(self, ctx: Context) -> None:
        """On the compute stream, behind our writes to our buffer: epoch e into our ready word of
        every peer's pad (each push stream of a peer waits for it)."""
        hc = self.ops.handle(self.memory.compute_stream(ctx.buffer.device))
        word = ctx.ready_word(self.rank)
        for _, sig in self.peers.values():
            self.ops.write32(ctx.word_address(word, sig), ctx.epoch, hc)

    def finish(self, ctx: Context, epoch: int) -> None:
        """After the kernel, on the compute stream: wait for our pushes (what the caller enqueues
        next follows them), then the kernel's error words to the ring (read by `check`)."""
        device = ctx.buffer.device
        compute = self.memory.compute_stream(device)
        for stream in self.streams.values():
            compute.wait_stream(stream)
        self.errors.record(epoch, self.ops.handle(compute))

    def check(self, wait: bool = False) -> None:
        """Raise the first error of the launches that are done (all of them, with `wait`)."""
        if self.reducer is not None:
            if wait:
                self.memory.sync_all(self.reducer.ctx.buffer.device)
            self.reducer.check(wait)
        if self.errors is not None:
            if wait:
                self.memory.sync_all(self.errors.ctx.buffer.device)
            self.errors.check(wait=wait)

    # -- consumer patterns ------------------------------------------------------------------------
    def local(self, ctx: Context, shard: torch.Tensor) -> None:
        put_own_shard(ctx, shard)

    def start(self, ctx: Context, epoch: int) -> "Push":
        self._ready(ctx)
        return Push(self, ctx, epoch).start()

    # -- producer patterns ------------------------------------------------------------------------
    def start_reduce(self, ctx: Context, out: torch.Tensor, epoch: int):
        # No barrier here: the last launch's join ended with one, after every rank read our partial.
        if self.peers is None:
            self._connect(ctx)
        if self.reducer is not None:
            return self.reducer.start(out, epoch)
        return PullReduce(self, ctx, out)


class Push:
    """One launch's pushes, enqueued on the per-peer streams; `join()` waits for them."""

    def __init__(self, backend: P2PBackend, ctx: Context, epoch: int):
        self.backend, self.ctx, self.epoch = backend, ctx, epoch
        self.errors: list[BaseException] = []
        self.lost: list[int] = []

    def start(self) -> "Push":
        be, ctx, plan, ops = self.backend, self.ctx, self.ctx.plan, self.backend.ops
        c = plan.chunks_per_rank
        for p, chunks in be.order.items():
            buf, sig = be.peers[p]
            stream = be.streams[p]
            hs = ops.handle(stream)
            # Our own slot (and, for all_to_all, the input) are written on the compute stream.
            be.memory.after_compute(stream, ctx.buffer.device)
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
        if be.shared_device:
            # Processes on one GPU take turns: a kernel launched now could hold the GPU while the
            # pushes it waits for sit in a peer's queue (module doc). Deliver everything first.
            self.join()
            be.barrier(f"the delivery of launch {self.epoch}")
        return self

    def _wait_ready(self, p: int, stream) -> None:
        """`stream` goes on once peer p's buffer may take this launch's chunks (module doc)."""
        ctx = self.ctx
        try:
            self.backend.ops.wait32(ctx.word_address(ctx.ready_word(p)), self.epoch, stream)
        except streamops.StreamTimeout:  # CPU emulation only: a device wait has no deadline
            raise LaunchError(f"rank {self.backend.rank}: rank {p} never got ready for launch {self.epoch} within "
                              f"{wait_bound(self.backend.timeout_s):g}s; {JOIN_FIX}") from None

    @property
    def deferred(self) -> bool:
        """The launch returns without waiting: errors are read later (P2PBackend.finish and check)."""
        return self.backend.asynchronous

    def join(self) -> None:
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
        boxes = self.boxes = {p: mem.open(h) for p, h in enumerate(theirs) if p != rank}  # kept: the sends write through them
        deadline = wait_bound(backend.timeout_s)
        self.streams = {p: mem.send_stream(ctx.buffer.device, deadline) for p in boxes}
        self.sent = {p: self.ops.event() for p in boxes}
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
        self.free_events = streamops.free_with(self, self.ops, [*self.sent.values(), self.before, self.reduced])
        if self.all_reduce:
            lo, hi = self.own
            mine = ctx.buffer.narrow(dim, lo, hi - lo)
            for p in boxes:
                if hi > lo:
                    self.gathers[p] = (streamops.ptr(backend.peers[p][0].narrow(dim, lo, hi - lo)), streamops.ptr(mine), mine.nbytes)
                self.gathered[p] = ctx.word_address(ctx.gathered_word(rank), backend.peers[p][1])  # ours, in p's pad

    def close(self) -> None:
        self.free_events()
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
        self.ops.record(self.before, self.ops.handle(mem.compute_stream(device)))
        launch = SendReduce.Launch(self, out, epoch)
        if mem.sends_before_kernel:
            launch.enqueue_sends()
        return launch

    def check(self, wait: bool = False) -> None:
        """A CPU send stream whose flag wait ran out: the kernel never finished that chunk."""
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
                    ops.record(r.sent[d], hs)
            self.enqueued = True

        def join(self) -> None:
            r, ops, e = self.reducer, self.reducer.ops, self.epoch
            ctx, out = r.ctx, self.out
            if not self.enqueued:
                self.enqueue_sends()
            hc = ops.handle(r.backend.memory.compute_stream(ctx.buffer.device))
            plan, dim = ctx.plan, ctx.dim
            for p in r.streams:
                try:
                    ops.wait32(ctx.word_address(ctx.delivered_word(p)), e, hc)
                except streamops.StreamTimeout:  # CPU only: a device wait has no deadline
                    mine = plan.owned[0] if plan.owned else plan.rank * plan.chunks_per_rank
                    raise SyncopyTimeout(plan.rank, divmod(mine, plan.chunks_per_rank), e, r.backend.timeout_s,
                                         f"the partial sums from rank {p} never came") from None
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
                ops.wait_event(hc, r.sent[p])  # the next launch rewrites the partial our sends read

        def _gather(self, hc, e: int) -> None:
            """all_reduce's gather half: behind our reduction (on the compute stream `hc`), push our
            reduced rows into every peer's buffer and raise our gathered word there; then the
            compute stream waits until every peer's reduced rows are in our buffer."""
            r, ops = self.reducer, self.reducer.ops
            ctx, plan = r.ctx, r.ctx.plan
            ops.record(r.reduced, hc)
            for p, stream in r.streams.items():
                hs = ops.handle(stream)
                ops.wait_event(hs, r.reduced)
                if p in r.gathers:
                    ops.copy(*r.gathers[p], hs)
                ops.write32(r.gathered[p], e, hs)
                ops.record(r.sent[p], hs)
            for p in r.streams:
                try:
                    ops.wait32(ctx.word_address(ctx.gathered_word(p)), e, hc)
                except streamops.StreamTimeout:  # CPU only: a device wait has no deadline
                    theirs = p * plan.chunks_per_rank
                    raise SyncopyTimeout(plan.rank, divmod(theirs, plan.chunks_per_rank), e, r.backend.timeout_s,
                                         f"the reduced rows of rank {p} never came") from None
