"""The single-node GPU backend: each rank pushes its chunks straight into its peers' buffers with
the copy engines, through CUDA IPC mappings of every rank's gathered buffer and signal pad, and
raises the peer's flag with a 4-byte copy of the epoch behind the chunk on the same stream.
Communication uses no SM.

    rank r, launch e (all_gather; one push stream per peer, high priority)
    host            local | sync | barrier | enqueue pushes | launch | join: sync push streams
    compute stream  [own shard -> own slot, own flags = e]  [=== fused kernel: tiles spin on flags ===]
    push stream (p)                        [chunk -> p's slot][p's flag = e][chunk -> p's slot][p's flag = e]
                                                               \\__ stream order: the flag lands after its chunk

Why copies and not a driver "stream write-value": the flag write is a cudaMemcpyAsync of the epoch
from a device word that this stream itself filled (from pinned memory) -- a copy-engine op,
ordered after the chunk by the stream, through public torch API only. torch's own
`stream_write_value32` sits in the private `torch._C._distributed_c10d._SymmetricMemory`, and
cuda-python would be a new dependency (absent on the target machines); the copy is what the
loopback world already runs on H100/H200.

Why CUDA IPC and not torch symmetric memory: the gathered buffer and signal pad are ordinary torch
allocations that the fused kernel already takes; torch's CUDA IPC (`reduce_tensor`/rebuild, the
machinery of torch.multiprocessing) maps them into the peers with nothing but a handle exchange on
the gloo control group, works for two processes on one GPU (how the one-GPU test runs), and has
kept its form across torch releases. `torch.distributed._symmetric_memory` would need every buffer
allocated by its own allocator, its rendezvous API is private and has changed between releases,
and two ranks on one device are outside what it supports.

Launch after launch nothing is reset (flags carry the epoch), but a peer must not push launch e's
chunks while this rank's kernel e-1 still reads them, nor before this rank's pre-launch writes to
its buffer (own slot, poisoning) are done: each launch starts with a host sync of the compute
stream and a barrier. The ranks share a host, so the barrier goes through a small file all of them
map (control.NodeBarrier: a store and a few loads, where gloo's barrier is a TCP round trip through
every rank) and has a deadline that names the rank that never came.

Ranks that share one GPU (tests, emulation) are the exception to in-kernel overlap. Without MPS,
kernels of different processes on one GPU take turns: on an H200 (default compute mode) two ranks
whose kernels each spun out a 1 s poll budget took 2.5 s each, one kernel after the other. A rank
whose kernel spins while the pushes it waits for sit in the other process's queue would then wait
on the GPU's time-slicing at best. So when `ranks_on_device` finds more than one rank on this GPU,
every rank's pushes complete (push streams synced, then a barrier) before any kernel starts:
correct, not overlapped. One rank per GPU, the configuration the backend is for, launches at once.

Producer patterns (reduce_scatter, all_reduce) have no device-side way here to make a copy wait for
a flag the kernel raises (that takes cuStreamWaitValue32), so they run correctly but without
in-kernel overlap: after the kernel, every rank adds the peers' partials, read through the same
IPC mappings, in rank order (so every rank gets the same bits), between two barriers.
"""
from __future__ import annotations

import contextlib
import os
import threading

import torch
import torch.distributed as dist

from syncopy import device as dev
from syncopy.errors import LaunchError
from syncopy.runtime import plan as planning
from syncopy.runtime.backends.control import NodeBarrier, control_group, hosts, node_barrier, wait_bound
from syncopy.runtime.context import Context
from syncopy.runtime.link import Faults, Link


def refuse_emulation(name: str, link: Link | None, faults: Faults | None, drop: bool = False) -> None:
    """GPU backends use real links: no emulated link; dropping chunks only where it cannot wedge a transport."""
    if link is not None and link != Link():
        raise LaunchError(f"link emulation runs on the gloo backend; the {name} backend moves chunks over the real link, drop link=")
    if faults is not None and (faults.delay_s or faults.kill or (faults.drop and not drop)):
        what = "delays" if faults.delay_s else "killed ranks" if faults.kill else "dropped chunks"
        raise LaunchError(f"the {name} backend cannot inject {what}; use backend='gloo' (CPU) for fault injection")


def put_own_shard(ctx: Context, shard: torch.Tensor) -> None:
    """This rank's shard (all_to_all: its own block of it) into its slot of the gathered buffer, and
    its flags to the epoch, on the compute stream (before the kernel, in stream order)."""
    rank, rows = ctx.plan.rank, ctx.plan.rows_per_rank
    mine = shard.narrow(ctx.dim, rank * rows, rows) if ctx.source is not None else shard
    ctx.buffer.narrow(ctx.dim, rank * rows, rows).copy_(mine)
    per = ctx.plan.flags_per_rank
    lo = dev.SIG_HEADER + rank * per
    ctx.signals[lo : lo + per] = ctx.epoch


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

    def host_words(self, n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.int32).pin_memory()

    def share(self, t: torch.Tensor) -> tuple:
        from torch.multiprocessing.reductions import reduce_tensor

        return reduce_tensor(t)  # (rebuild_cuda_tensor, its arguments): plain data, pickles anywhere

    def open(self, shared: tuple) -> torch.Tensor:
        rebuild, args = shared
        return rebuild(*args)

    def shares_device(self, group, device) -> bool:
        """Does another rank of `group` run on this very GPU (collective the first time)?"""
        from syncopy.runtime.backends.control import ranks_on_device

        return ranks_on_device(group, device) > 1


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

    def host_words(self, n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.int32)

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
        self.epoch_host: torch.Tensor | None = None
        self.epoch_dev: torch.Tensor | None = None
        self.shared_device = False  # another rank on this GPU: pushes complete before the launch

    def check_grid(self, programs: int, persistent: bool, kernel: str, device) -> None:
        """Every grid is safe: the copy engines need no SM."""

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
        if ctx.producer:
            return
        self.shared_device = mem.shares_device(self.user_group, ctx.buffer.device)
        self.epoch_host = mem.host_words(ctx.plan.widest_chunk)
        self.epoch_dev = torch.zeros(self.world, ctx.plan.widest_chunk, dtype=torch.int32, device=ctx.buffer.device)
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

    def _ready(self, ctx: Context) -> None:
        """Host side of the per-launch handshake: our pending writes to our buffer (own slot,
        poisoning) and our previous kernel are done, and so are every peer's."""
        self.memory.sync(ctx.buffer.device)
        if self.peers is None:
            self._connect(ctx)  # collective: a barrier too
        else:
            self.barrier(f"the handshake of launch {ctx.epoch}")

    # -- consumer patterns ------------------------------------------------------------------------
    def local(self, ctx: Context, shard: torch.Tensor) -> None:
        put_own_shard(ctx, shard)

    def start(self, ctx: Context, epoch: int) -> "Push":
        self._ready(ctx)
        return Push(self, ctx, epoch).start()

    # -- producer patterns ------------------------------------------------------------------------
    def start_reduce(self, ctx: Context, out: torch.Tensor, epoch: int) -> "PullReduce":
        # No barrier here: the last launch's join ended with one, after every rank read our partial.
        if self.peers is None:
            self._connect(ctx)
        return PullReduce(self, ctx, out)


class Push:
    """One launch's pushes, enqueued on the per-peer streams; `join()` waits for them."""

    def __init__(self, backend: P2PBackend, ctx: Context, epoch: int):
        self.backend, self.ctx, self.epoch = backend, ctx, epoch
        self.errors: list[BaseException] = []
        self.lost: list[int] = []

    def start(self) -> "Push":
        be, ctx, plan = self.backend, self.ctx, self.ctx.plan
        c = plan.chunks_per_rank
        # The last launch's copies out of this pinned word finished: join() synchronised them.
        be.epoch_host.fill_(self.epoch)
        for p, chunks in be.order.items():
            buf, sig = be.peers[p]
            stream = be.streams[p]
            # The compute stream's work since the last host sync comes first: the epoch source word
            # is allocated (zeroed) there when the context connects, and streams are unordered. If
            # the zeroing ran after the epoch's copy, the flags behind every chunk would carry 0 (an
            # H200 run showed exactly that: a peer's flags at 0 after all pushes had completed).
            be.memory.after_compute(stream, ctx.buffer.device)
            with be.memory.using(stream):
                # This stream's own device copy of the epoch: the source of its flag copies (a copy
                # into a peer on another GPU runs on the source device's stream, i.e. this one).
                epoch_word = be.epoch_dev[p]
                epoch_word.copy_(be.epoch_host, non_blocking=True)
                for g in chunks:
                    if divmod(g, c) in be.faults.drop:
                        continue
                    lo, hi = plan.bounds(g)
                    buf.narrow(ctx.dim, lo, hi - lo).copy_(ctx.send_view(g, p), non_blocking=True)
                    f = plan.flags(g)
                    sig[dev.SIG_HEADER + f.start : dev.SIG_HEADER + f.stop].copy_(epoch_word[: len(f)], non_blocking=True)
        if be.shared_device:
            # Processes on one GPU take turns: a kernel launched now could hold the GPU while the
            # pushes it waits for sit in a peer's queue (module doc). Deliver everything first.
            self.join()
            be.barrier(f"the delivery of launch {self.epoch}")
        return self

    def join(self) -> None:
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
        acc = None
        wide = torch.float32 if out.dtype in (torch.float16, torch.bfloat16) else out.dtype
        for r in range(be.world):
            part = ctx.buffer if r == rank else be.peers[r][0]
            if ctx.plan.pattern == "reduce_scatter":
                part = part.narrow(dim, rank * out.shape[dim], out.shape[dim])
            if part.device != out.device:
                part = part.to(out.device)  # a peer on another GPU: one copy-engine copy
            acc = part.to(wide, copy=True) if acc is None else acc.add_(part)
        out.copy_(acc)
        be.memory.sync(out.device)  # our reads of the peers' partials are done...
        be.barrier(f"the end of launch {ctx.epoch}")  # ...and everyone's, before anyone rewrites a partial
        for g in ctx.plan.owned:
            self.final[g].set()
