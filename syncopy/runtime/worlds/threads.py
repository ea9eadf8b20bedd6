r"""The thread world: W ranks of one fused operator on one GPU, in one process. Each rank has its own
streams (compute, and one per peer for its transfers) and its own buffers and signal pad, all in one
address space; chunks move by copy-engine copies (`cuMemcpyAsync`; a chunk of every listed tensor,
`tensor: [K, V]`, before its flag) and flags by stream write-values (runtime/streams/streamops.py): the p2p
protocol end to end, without IPC. Kernels of different streams of
one process run concurrently on one GPU (processes take turns), so this is where several fused
kernels, their pushes and (producer patterns) their sends and reductions overlap for real on a
single device.

    all_gather / all_to_all, launch e (rank r; one push stream per peer p)
    caller    [fork]                                                             [join: waits every rank]
    compute r   [epoch, own rows, own flags = e, ready[r] = e][== fused kernel r ==][wait r's pushes][error words -> ring]
    push r->p                         [wait ready[p] >= e][chunk -> p's buffer][p's flag = e][chunk][flag] ...
                                       \__ p's kernel e-1 is done with its buffer, and p's own writes for e

    reduce_scatter / all_reduce, launch e (sent straight to each chunk's owner, whatever the plan's algorithm)
    compute r   [epoch, targets, partial = 0 (or C)][== fused kernel r: flags rise ==][wait sends to r][reduce r's rows][all_reduce: copy peers' rows]
    send r->d                         [wait d's last reduction][wait flag g >= e][g -> d's inbox][...]
                                        (enqueued after every rank's kernel: see below)

One host thread enqueues every rank's work, phase by phase (all ranks' pre-kernel writes, then every
transfer, then every kernel, ...), so that every stream wait is enqueued after the work that releases
it. Streams share the GPU's hardware queues: a wait enqueued before the kernel that releases it can
sit ahead of that kernel in one queue and block it for good (an H200 run of the loopback world hung
so). With each rank's launch from its own host thread, the order across ranks would be the threads'
chance; with one thread it is fixed, and a wait never precedes what it waits for.

Every rank's kernel starts after every rank's pre-kernel work (own rows, epoch, poisoning): a kernel
that fills the GPU with waiting tiles must not hold the SMs a peer's memset or fill still needs
before that peer's pushes can start. Whether the pushes themselves (device-to-device copies) run
beside kernels that hold every SM is the hardware's and driver's business, and on an H100 they did
not reliably: a probe (`copies_run_beside_full_sms`: 4 spinning programs per SM, a copy on another
stream) said they do, and 4 ranks of 1024 waiting 64x64 tiles each ran correctly with in-kernel
pushes, but 4 ranks of 4096 tiles of 128x128 (8192x8192x4096) hung until their poll budgets ran
out. So on a GPU each rank's kernel starts once the pushes into it are done (`pushes="before-kernel"`,
the default: correct, overlapped across ranks, not inside a kernel); `pushes="in-kernel"` (or
$SYNCOPY_THREAD_PUSHES=in-kernel) lets tiles wait inside, where the kernels leave SMs free.

A launch enqueues and returns, like any CUDA op: its ranks' streams first wait for the caller's
current stream (inputs ready), and with `join=True` (the default) the caller's stream waits for
every rank (outputs ready in stream order). With `join=False` launches of different ranks overlap
from one launch to the next, held apart only by the device-side handshakes above. Errors (a wait
that ran out) are read off the launch path from each rank's error ring (runtime/streams/error_ring.py), at the
next launch or `synchronize()`, and raise SyncopyTimeout naming rank, chunk and epoch.

Templates run through `ThreadWorld.run`: each rank's `launch(fused, ..., group=...)` is given a
stand-in kernel that records its call and a `RankGroup` answering `size()` and `rank()`. A pipeline
template's operator (tp_mlp) runs through runtime/worlds/thread_pipeline.py: a thread world per operator,
links per rank.

`ThreadWorld(..., device="cpu")` runs the same protocol between CPU tensors under the Triton
interpreter (tests): transfer streams are worker threads (streamops.HostStream), and interpreted
kernels run one after another on the calling thread while the peers' pushes land.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import contextlib
import functools
import os
import time

import torch
import triton
import triton.language as tl

from syncopy import device as dev
from syncopy.runtime.launch.sequence import init_partial
from syncopy.runtime.where import ensure_allocator, spin_limit
from syncopy.errors import LaunchError
from syncopy.runtime.streams import streamops
from syncopy.runtime.state.context import Context
from syncopy.runtime.transport.reduction import reduce_into
from syncopy.runtime.worlds.loopback import _Cuda, _Host, _Loop, _Timeline, launch_args, start_producer
from syncopy.runtime.streams.streamops import ptr, wrap32
from syncopy.runtime.streams.error_ring import wait_bound
from syncopy.runtime.worlds.rank_group import RankGroup  # noqa: F401 (what templates take for a group here)

if TYPE_CHECKING:  # the runtime never imports the user-facing layer (syncopy.api)
    from syncopy.api import FusedKernel


PUSH_MODES = ("in-kernel", "before-kernel")


@triton.jit
def _spin_until_set(flag, started, seen, polls):
    tl.atomic_add(started, 1, sem="relaxed")
    i = 0
    v = tl.atomic_add(flag, 0, sem="acquire")
    while (v == 0) & (i < polls):
        v = tl.atomic_add(flag, 0, sem="acquire")
        i += 1
    tl.store(seen + tl.program_id(0), v)


@functools.lru_cache(maxsize=None)
def copies_run_beside_full_sms(device_index: int) -> bool:
    """Does a device-to-device copy on one stream complete while a kernel on another has waiting
    programs on every SM (4 programs of 128 threads per SM, as a fused GEMM's tiles hold them, each
    spinning -- bounded, ~0.1 s -- for a flag raised behind the copy)? The copy is enqueued once
    every program is resident. Measured once per device, with a host sync (first launch only)."""
    from syncopy.runtime.streams.occupancy import sm_count

    device = torch.device("cuda", device_index)
    ops = streamops.cuda_ops()
    grid = sm_count(device) * 4  # surely resident together: a few registers and no shared memory each
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    started = torch.zeros(1, dtype=torch.int32, device=device)
    seen = torch.zeros(grid, dtype=torch.int32, device=device)
    src = torch.ones(1 << 20, dtype=torch.float32, device=device)
    dst = torch.zeros_like(src)
    spin, copy = torch.cuda.Stream(device), torch.cuda.Stream(device)
    torch.cuda.synchronize(device)
    with torch.cuda.stream(spin):
        _spin_until_set[(grid,)](flag, started, seen, 100_000, num_warps=4)
    hc = ops.handle(copy)
    ops.wait32(ptr(started), grid, hc)  # enqueued after the kernel: see the module doc
    ops.copy(ptr(dst), ptr(src), src.nbytes, hc)
    ops.write32(ptr(flag), 1, hc)
    torch.cuda.synchronize(device)
    return bool((seen != 0).all()) and bool((dst == 1).all())


class _RankKernel:
    """Stands in for the FusedKernel in a template's `launch` on one rank: records the call."""

    def __init__(self, fused: FusedKernel):
        self.fused = fused
        self.calls: list[tuple] = []

    def __getitem__(self, grid):
        def record(*args, group=None, **kwargs):
            self.calls.append((grid, args, kwargs))

        return record

    def backend_for(self, device, group=None) -> str:
        return "threads"


class _Rank(_Loop):
    """One rank's context, streams and transfers (made once per shard shape)."""

    def __init__(self, world: "ThreadWorld", ctx: Context, shard_shape: tuple[int, ...]):
        super().__init__(ctx, shard_shape, world.engine, world.fk.timeout_s)
        eng, ops = world.engine, world.ops
        self.rank = ctx.plan.rank
        self.stream = self.side  # this rank's compute stream (None on the CPU engine: done when enqueued)
        self.ready = ctx.word_address(ctx.ready_word(self.rank))  # raised by this rank, waited on by its peers' pushes
        self.fork = ops.event()  # this launch's pre-kernel writes are done
        self.done = ops.event()  # this launch is done (the caller's stream joins it)
        self.reduced = ops.event()  # producer: this rank's reduction is done (its inbox may be rewritten)
        ops.record(self.reduced, None if eng.device_type == "cpu" else ops.handle(eng.current(ctx.buffer.device)))
        peers = [p for p in range(world.world) if p != self.rank]
        self.out = {p: eng.side_stream(ctx.buffer.device, world.fk.timeout_s) for p in peers}  # pushes / sends to p
        self.out_done = {p: ops.event() for p in peers}
        if not ctx.producer:  # behind the own rows: error words cleared, the epoch, the own flags, then ready[r]
            self.start_writes = ops.batch([(self.errors.words + 4 * i, 0) for i in range(4)] + [(self.epoch_word, None)]
                                          + [(f, None) for f in self.own_flags] + [(self.ready, None)])
        rows = ctx.plan.rows_per_rank
        # The other listed tensors (`tensor: [K, V]`): this rank's slot of each gathered buffer.
        slots = [t.narrow(ctx.dim, self.rank * rows, rows) for t in ctx.extras]
        self.own_extras = [(ptr(slot), slot.nbytes) for slot in slots]
        # consumer: p -> [(chunk, dst, src offset, bytes, p's flag addresses, [(dst, src, bytes) of each other listed tensor])]
        self.moves: dict[int, list[tuple]] = {}
        self.inbox: dict[int, torch.Tensor] = {}  # producer: peer -> its partial of this rank's rows
        self.sends: dict[int, list[tuple]] = {}  # producer: p -> [(chunk, flag address, dst, src, bytes)] in finish order
        self.starts: dict[tuple, object] = {}  # producer: tiles per chunk -> a launch's start writes (loopback.start_producer)
        n = ctx.n_chunks  # producer: the words those writes go to (epoch, error words, targets, flags)
        self.start_words = (self.epoch_word, self.errors.words, [ctx.word_address(ctx.target_word(g)) for g in range(n)],
                            [ctx.flag_address(g) for g in range(n)])


class ThreadWorld:
    """Drive a FusedKernel as `world` ranks on one GPU (see module docstring)."""

    def __init__(self, fused: FusedKernel, world: int, device: str = "cuda", pushes: str | None = None):
        """pushes: "in-kernel" (tiles wait for chunks that land while the kernels run) or
        "before-kernel" (each rank's kernel starts once the pushes into it are done); default
        $SYNCOPY_THREAD_PUSHES, else before-kernel on a GPU and in-kernel on the CPU engine (module doc)."""
        pushes = pushes or os.environ.get("SYNCOPY_THREAD_PUSHES") or None
        if pushes is not None and pushes not in PUSH_MODES:
            raise LaunchError(f"pushes={pushes!r}: expected one of {', '.join(PUSH_MODES)} (or unset: before-kernel on a GPU)")
        self.pipeline = None
        if hasattr(fused, "rank_view"):  # a pipeline template's operator (tp_mlp): its operators, linked per rank
            from syncopy.runtime.worlds.thread_pipeline import ThreadPipeline

            self.fk, self.world = fused, world
            self.pipeline = ThreadPipeline(fused, world, device, pushes, operator_world=ThreadWorld)
            return
        # CPU streams are threads: they always run beside the kernel. On a GPU, in-kernel is opt-in
        # (module doc: measured to hang an H100 at 8192x8192x4096 while the copy probe said yes).
        self.pushes = pushes or ("before-kernel" if device == "cuda" else "in-kernel")
        if world < 1:
            raise LaunchError(f"a thread world needs at least one rank, got world={world}")
        if device == "cuda" and not torch.cuda.is_available():
            raise LaunchError("the thread world needs a CUDA device (or device='cpu' under the Triton interpreter)")
        self.fk, self.world = fused, world
        self.engine = _Cuda() if device == "cuda" else _Host()
        self.ops = self.engine.ops
        self.worlds: dict[tuple, list[_Rank]] = {}
        self.epochs: dict[tuple, int] = {}
        self.delay_s = 0.0
        self.timelines: list[_Timeline] = [_Timeline.OFF] * world

    def group(self, rank: int) -> RankGroup:
        return RankGroup(rank, self.world)

    def stream(self, rank: int, shard_shape: tuple[int, ...] | None = None, dtype=None):
        """Rank `rank`'s compute stream (of the only shape launched so far, or of `shard_shape`/`dtype`)."""
        if shard_shape is None:
            if len(self.worlds) != 1:
                raise LaunchError(f"the thread world has {len(self.worlds)} shapes; name one: stream(rank, shard_shape, dtype)")
            return next(iter(self.worlds.values()))[rank].stream
        return self.worlds[(tuple(shard_shape), dtype)][rank].stream

    # -- launches ---------------------------------------------------------------------------------
    def run(self, body, delay_s: float = 0.0) -> list:
        """Call `body(fused, group, rank)` for every rank (a template's `launch(fused, ..., group=group)`),
        then launch what they called, all ranks at once; returns each rank's return value (its
        output, filled in stream order). `delay_s`: as for `launch` (CPU engine: a slower link)."""
        if self.pipeline is not None:
            return self.pipeline.run(body, delay_s)
        outs, calls = [], []
        for r in range(self.world):
            stand_in = _RankKernel(self.fk)
            outs.append(body(stand_in, self.group(r), r))
            if len(stand_in.calls) != 1:
                raise LaunchError(f"rank {r}'s launch called the fused kernel {len(stand_in.calls)} times; the thread world runs one call per rank")
            calls.append(stand_in.calls[0])
        self.launch([c[0] for c in calls], [c[1] for c in calls], [c[2] for c in calls], delay_s=delay_s)
        return outs

    def launch(self, grid, args: list[tuple], kwargs: list[dict] | dict | None = None, *, join: bool = True, sync: bool = False,
               withhold: frozenset = frozenset(), delay_s: float = 0.0, timeline: bool = False,
               links: list[dict] | None = None) -> list[Context]:
        """Launch the fused kernel on every rank: `args[r]` / `kwargs[r]` are rank r's arguments as
        the local kernel takes them, with the communicated tensor at its per-rank size; `grid` is
        one grid for all or one per rank. Enqueues and returns (module doc); `sync=True` waits and
        raises the launch's error, if any. `withhold`: chunk ids never sent (tests: a lost chunk).
        `delay_s` (CPU engine only): a pause before each chunk a stream moves, a slower link.
        `timeline`: mark each rank's kernel start and end and each chunk landing in it
        (`timeline_ms()` after a synchronised launch). `links`: per rank, a pipeline's link
        arguments of this operator (runtime/worlds/thread_pipeline.py)."""
        if self.pipeline is not None:
            raise LaunchError("a pipeline template's operators launch together: call run(body) with the template's launch")
        if delay_s and self.engine.device_type != "cpu":
            raise LaunchError("delay_s paces the CPU engine's transfer threads; a GPU stream cannot pause: drop delay_s")
        self.delay_s = delay_s
        self.timelines = [_Timeline(self.engine) if timeline else _Timeline.OFF for _ in range(self.world)]
        if len(args) != self.world:
            raise LaunchError(f"the thread world has {self.world} ranks but got arguments for {len(args)}; pass one tuple per rank")
        kwargs = [dict(kwargs or {}) for _ in range(self.world)] if not isinstance(kwargs, list) else [dict(k) for k in kwargs]
        grids = grid if isinstance(grid, list) else [grid] * self.world
        device = next((a.device for a in args[0] if isinstance(a, torch.Tensor)), None)
        with (torch.cuda.device(device) if self.engine.device_type == "cuda" else contextlib.nullcontext()), torch.inference_mode():
            ranks = self._launch(grids, args, kwargs, join, withhold, links)
        if sync:
            self.synchronize()
        return [rk.ctx for rk in ranks]

    def _launch(self, grids, args, kwargs, join: bool, withhold: frozenset, links: list[dict] | None = None) -> list[_Rank]:
        fk = self.fk
        fused = fk.kernel.build().fused
        bound = [fk.binder.bind(a, k) for a, k in zip(args, kwargs)]  # (arguments, shard, launch options) per rank
        shards = [b[1] for b in bound]
        ensure_allocator(shards[0].device)
        key, ranks = self._ranks(shards, bound)
        for rk in ranks:
            rk.errors.check()  # earlier launches that are done: their errors surface here
            rk.errors.make_room()  # before the kernels: an older launch's failure raises now, this launch's words get a slot
        calls = []
        listed = fk.schedule.tensors[1:]
        for rk, g, (arguments, _, options, *_) in zip(ranks, grids, bound):
            call = dict(arguments)
            rk.ctx.extra_shards = [arguments[n] for n in listed]
            call[fk.schedule.tensors[0]] = rk.ctx.buffer
            call.update(zip(listed, rk.ctx.extras))
            if links is not None:
                fk.link_args = links[rk.rank]  # the probe of the first launch of a shape takes them too
            if fk.producer:
                order = fk.orders.order(rk.ctx, g, call, None).table
                extra = fk.kernel.syncopy_args(rk.ctx, order, rk.ctx.no_trace)
            else:
                extra = launch_args(fk, rk, g, call)[1]
            if links is not None:  # this rank's links, at every launch (launch_args keeps extras per shape, not per link)
                extra = {**extra, **links[rk.rank]}
            calls.append((g, call, extra, options))
        epoch = self.epochs[key] = self.epochs.get(key, 0) + 1
        eng, ops = self.engine, self.ops
        caller = ops.handle(eng.current(shards[0].device))
        start = ops.event()
        ops.record(start, caller)
        for rk in ranks:
            rk.ctx.epoch = epoch
            if eng.device_type == "cuda":  # the caller's tensors are used on this rank's stream
                for t in (*calls[rk.rank][1].values(), shards[rk.rank], *rk.ctx.extra_shards):
                    if isinstance(t, torch.Tensor) and t.is_cuda:
                        t.record_stream(rk.stream)
        if fk.producer:
            self._produce(ranks, calls, shards, epoch, start, fused)
        else:
            self._consume(ranks, calls, shards, epoch, start, fused, withhold)
        for rk in ranks:
            hc = ops.handle(rk.stream)
            rk.errors.record(epoch, hc)
            if join:
                ops.record(rk.done, hc)
                ops.wait_event(caller, rk.done)
        return ranks

    def _consume(self, ranks: list[_Rank], calls, shards, epoch: int, start, fused, withhold: frozenset) -> None:
        """all_gather / all_to_all: pre-kernel writes, pushes, kernels, then each compute stream
        waits for its rank's pushes (the next launch rewrites the rows they read)."""
        fk, ops = self.fk, self.ops
        a2a = fk.schedule.pattern == "all_to_all"
        for rk in ranks:
            hc = ops.handle(rk.stream)
            ops.wait_event(hc, start)
            self.timelines[rk.rank].mark("start", rk.stream)
            if fk.poison_receive:
                with self._using(rk.stream):  # a read before its chunk lands gives NaN
                    for t in rk.ctx.tensors():
                        if t.is_floating_point():
                            t.fill_(float("nan"))
            mine = shards[rk.rank]
            if a2a:
                rows = rk.ctx.plan.rows_per_rank
                mine = mine.narrow(rk.ctx.dim, rk.rank * rows, rows)
            ops.copy(rk.own[0], ptr(mine), rk.own[1], hc)
            for (dst, n), extra in zip(rk.own_extras, rk.ctx.extra_shards):
                ops.copy(dst, ptr(extra), n, hc)
            ops.write_batch(rk.start_writes, epoch, hc)  # error words cleared, the epoch, own flags, ready[r]: one driver call
            ops.record(rk.fork, hc)
        for rk in ranks:
            base = ptr(shards[rk.rank]) if a2a else ptr(rk.ctx.buffer)
            for p, moves in rk.moves.items():
                hs = ops.handle(rk.out[p])
                ops.wait_event(hs, rk.fork)
                ops.wait32(ranks[p].ready, epoch, hs)
                for g, dst, offset, n, flags, extras in moves:
                    if g in withhold:
                        continue
                    self._pause(rk.out[p])
                    ops.copy(dst, base + offset, n, hs)
                    for extra in extras:  # the chunk's rows of every listed tensor, then its flags
                        ops.copy(*extra, hs)
                    for f in flags:
                        ops.write32(f, epoch, hs)
                    self.timelines[p].mark(g, rk.out[p])
                ops.record(rk.out_done[p], hs)
        for rk in ranks:
            hc = ops.handle(rk.stream)
            for other in ranks:  # every rank's pre-kernel work first (module doc)
                if other is not rk:
                    ops.wait_event(hc, other.fork)
            if self.pushes == "before-kernel":
                for other in ranks:
                    if other is not rk:
                        ops.wait_event(hc, other.out_done[rk.rank])
        self._kernels(ranks, calls, fused)
        for rk in ranks:
            hc = ops.handle(rk.stream)
            for p in rk.out:
                ops.wait_event(hc, rk.out_done[p])

    def _kernels(self, ranks: list[_Rank], calls, fused) -> None:
        """Every rank's fused kernel, each on its compute stream."""
        for rk, (grid, call, extra, options) in zip(ranks, calls):
            timeline = self.timelines[rk.rank]
            timeline.mark("kernel", rk.stream)
            with self._using(rk.stream):
                fused[grid](**call, **extra, **options)
            timeline.mark("end", rk.stream)

    def _pause(self, stream) -> None:
        if self.delay_s and isinstance(stream, streamops.HostStream):
            stream.put(lambda: time.sleep(self.delay_s))

    def timeline_ms(self) -> list[dict]:
        """Per rank, after a synchronised launch(timeline=True): ms from its launch start to its
        kernel's launch point ("kernel"), its end ("end") and each chunk's landing (chunk id)."""
        return [t.ms() for t in self.timelines]

    def _produce(self, ranks: list[_Rank], calls, outs, epoch: int, start, fused) -> None:
        """reduce_scatter / all_reduce (module doc): each chunk goes to its owner as soon as its flag
        rises; each owner adds the partials of its rows in rank order (the same bits on every rank)."""
        fk, eng, ops = self.fk, self.engine, self.ops
        for rk, (grid, call, _, _) in zip(ranks, calls):
            ctx, hc = rk.ctx, ops.handle(rk.stream)
            ops.wait_event(hc, start)
            self.timelines[rk.rank].mark("start", rk.stream)
            tiles = ctx.tiles_per_chunk[fk.orders.shape_key(grid, call)]
            ctx.targets = [wrap32(t + k) for t, k in zip(ctx.targets, tiles)]
            start_producer(ops, rk.starts, rk.start_words, tiles, ctx.targets, epoch, hc)  # one driver call
            with self._using(rk.stream):
                init_partial(ctx, outs[rk.rank], fk.schedule.pattern)
            ops.record(rk.fork, hc)

        def sends():
            for rk in ranks:
                for d, sends in rk.sends.items():
                    hs = ops.handle(rk.out[d])
                    ops.wait_event(hs, rk.fork)
                    ops.wait_event(hs, ranks[d].reduced)  # d's last reduction has read its inbox
                    for g, flag, dst, src, n in sends:
                        ops.wait32(flag, epoch, hs)
                        self._pause(rk.out[d])
                        ops.copy(dst, src, n, hs)
                        self.timelines[rk.rank].mark(("sent", g), rk.out[d])
                    ops.record(rk.out_done[d], hs)

        # On a GPU the sends' flag waits are enqueued after the kernels that raise them (module
        # doc); an interpreted kernel returns when done, so on CPU the worker streams go first.
        if eng.device_type == "cpu":
            sends()
        self._kernels(ranks, calls, fused)
        if eng.device_type != "cpu":
            sends()
        all_reduce = fk.schedule.pattern == "all_reduce"
        for rk in ranks:
            hc = ops.handle(rk.stream)
            for p, other in enumerate(ranks):
                if p != rk.rank:
                    ops.wait_event(hc, other.out_done[rk.rank])
            with self._using(rk.stream):
                self._reduce(rk, outs[rk.rank], all_reduce)
            self.timelines[rk.rank].mark("reduced", rk.stream)
            ops.record(rk.reduced, hc)
        for rk in ranks:
            hc = ops.handle(rk.stream)
            for p in rk.out:
                ops.wait_event(hc, rk.out_done[p])  # the next launch rewrites the partial they read
                if all_reduce:
                    ops.wait_event(hc, ranks[p].reduced)
            if all_reduce:
                with self._using(rk.stream):
                    for p, other in enumerate(ranks):
                        if p != rk.rank:
                            lo, hi = other.ctx.plan.part(p)
                            outs[rk.rank].narrow(rk.ctx.dim, lo, hi - lo).copy_(outs[p].narrow(rk.ctx.dim, lo, hi - lo))

    def _reduce(self, rk: _Rank, out: torch.Tensor, all_reduce: bool) -> None:
        """This rank's rows: its own partial plus every peer's, in rank order, in fp32 for half types."""
        ctx, dim = rk.ctx, rk.ctx.dim
        lo, hi = ctx.plan.part(rk.rank)
        if hi == lo:
            return
        reduce_into(out.narrow(dim, lo, hi - lo) if all_reduce else out,
                    (ctx.buffer.narrow(dim, lo, hi - lo) if r == rk.rank else rk.inbox[r].narrow(dim, 0, hi - lo) for r in range(self.world)))

    def _using(self, stream):
        return torch.cuda.stream(stream) if self.engine.device_type == "cuda" else contextlib.nullcontext()

    # -- contexts ---------------------------------------------------------------------------------
    def _ranks(self, shards: list[torch.Tensor], bound) -> tuple[tuple, list[_Rank]]:
        """Every rank's context of this shard shape (made together the first time)."""
        first = shards[0]
        for r, s in enumerate(shards):
            if tuple(s.shape) != tuple(first.shape) or s.dtype != first.dtype or s.device != first.device:
                raise LaunchError(f"rank {r} passed '{self.fk.schedule.tensors[0]}' as {list(s.shape)} {s.dtype} on {s.device} but rank 0 "
                                  f"passed {list(first.shape)} {first.dtype} on {first.device}; every rank's shard must match")
        fk = self.fk
        extras = fk.contexts.listed_shapes(bound[0][0])
        for r, (arguments, *_) in enumerate(bound):
            if fk.contexts.listed_shapes(arguments) != extras:
                raise LaunchError(f"rank {r} passed the listed tensors {', '.join(fk.schedule.tensors[1:])} with shapes and dtypes "
                                  f"{fk.contexts.listed_shapes(arguments)} but rank 0 {extras}; every rank's shards must match")
        key = (tuple(first.shape), first.dtype, *((extras,) if extras else ()))
        if key not in self.worlds:
            # One process plays every rank: the planner's choice needs no exchange.
            choice = fk.contexts.resolve(first, self.world, bound[0][0]) if fk.schedule.planned else None
            ranks = []
            for r in range(self.world):
                ctx = fk.contexts.make(shards[r], r, self.world, choice, **({"extras": extras} if extras else {}))
                ctx.ctx[dev.CTX_SPIN_LIMIT.value] = spin_limit(fk.timeout_s, self.engine.device_type)
                ranks.append(_Rank(self, ctx, key[0]))
            if fk.producer:
                self._wire_producer(ranks)
            else:
                self._wire_consumer(ranks)
            self.worlds[key] = ranks
        return key, self.worlds[key]

    def _wire_consumer(self, ranks: list[_Rank]) -> None:
        """Per rank and peer, this rank's chunks in the order the peer expects them (the peer's plan's
        arrival order): where each lands in the peer's buffer, where it is read from (an offset into
        this rank's buffer; all_to_all: into its input, the peer's block), its bytes and flags."""
        c = ranks[0].ctx.plan.chunks_per_rank
        a2a = self.fk.schedule.pattern == "all_to_all"
        for rk in ranks:
            ctx = rk.ctx
            for g in range(ctx.n_chunks):
                if not ctx.chunk_view(g).is_contiguous():
                    raise LaunchError(f"the thread world moves each chunk with one copy, which needs it contiguous, but chunks "
                                      f"along dim {ctx.dim} of a {list(ctx.buffer.shape)} tensor are strided; shard along dim 0")
            row_bytes = ctx.buffer.stride(ctx.dim) * ctx.buffer.element_size()
            rows = ctx.plan.rows_per_rank
            for p in rk.out:
                peer = ranks[p].ctx
                moves = []
                for g in peer.plan.arrival:
                    if g // c != rk.rank:
                        continue
                    lo, hi = ctx.plan.bounds(g)
                    if hi <= lo:
                        continue
                    offset = (lo - rk.rank * rows + p * rows) * row_bytes if a2a else lo * row_bytes
                    dst = peer.chunk_view(g)
                    extras = []
                    for mine, theirs in zip(ctx.extras, peer.extras):
                        src_rows, dst_rows = mine.narrow(ctx.dim, lo, hi - lo), theirs.narrow(ctx.dim, lo, hi - lo)
                        if not (src_rows.is_contiguous() and dst_rows.is_contiguous()):
                            raise LaunchError(f"the thread world moves each chunk with one copy, which needs it contiguous, but chunks "
                                              f"along dim {ctx.dim} of a {list(mine.shape)} tensor are strided; shard along dim 0")
                        extras.append((ptr(dst_rows), ptr(src_rows), src_rows.nbytes))
                    moves.append((g, ptr(dst), offset, dst.nbytes, [peer.flag_address(f) for f in peer.plan.flags(g)], extras))
                rk.moves[p] = moves

    def _wire_producer(self, ranks: list[_Rank]) -> None:
        """Per rank: an inbox per peer (its partial of this rank's rows) and, per owner, the sends of
        this rank's chunks in its finish order."""
        c = ranks[0].ctx.plan.chunks_per_rank
        for rk in ranks:
            ctx = rk.ctx
            rows = ctx.plan.rows_per_rank
            shape = list(ctx.buffer.shape)
            shape[ctx.dim] = rows
            rk.inbox = {p: torch.zeros(shape, dtype=ctx.buffer.dtype, device=ctx.buffer.device) for p in range(self.world) if p != rk.rank}
        for rk in ranks:
            ctx = rk.ctx
            rows = ctx.plan.rows_per_rank
            rk.sends = {d: [] for d in rk.out}
            for g in ctx.plan.finish:
                d = g // c
                if d == rk.rank or ctx.plan.empty(g):
                    continue
                lo, hi = ctx.plan.bounds(g)
                dst = ranks[d].inbox[rk.rank].narrow(ctx.dim, lo - d * rows, hi - lo)
                src = ctx.buffer.narrow(ctx.dim, lo, hi - lo)
                if not (dst.is_contiguous() and src.is_contiguous()):
                    raise LaunchError(f"the thread world moves each chunk with one copy, which needs it contiguous, but chunks "
                                      f"along dim {ctx.dim} of a {list(ctx.buffer.shape)} tensor are strided; shard along dim 0")
                rk.sends[d].append((g, ctx.flag_address(g), ptr(dst), ptr(src), src.nbytes))

    # -- errors -----------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise the first error of the launches done by now, without waiting (SyncopyTimeout)."""
        if self.pipeline is not None:
            return self.pipeline._check()
        for ranks in self.worlds.values():
            for rk in ranks:
                rk.errors.check()

    def synchronize(self) -> None:
        """Wait for every launch so far and raise the first error among them (SyncopyTimeout)."""
        if self.pipeline is not None:
            return self.pipeline.synchronize()
        for ranks in self.worlds.values():
            for rk in ranks:
                self.engine.synchronize(rk.ctx.buffer.device)
                for stream in rk.out.values():
                    if isinstance(stream, streamops.HostStream):
                        stream.drain(wait_bound(self.fk.timeout_s))  # bounded, as the rings' waits below
                        self._raise_stream_error(rk, stream)
            for rk in ranks:
                rk.errors.check(wait=True)

    def _raise_stream_error(self, rk: _Rank, stream: streamops.HostStream) -> None:
        """A CPU transfer stream whose wait ran out: a peer never got ready, or a kernel never
        finished a chunk (the device's own waits have no deadline; their kernels' waits do)."""
        if not stream.errors:
            return
        exc = stream.errors[0]
        stream.errors.clear()
        if not isinstance(exc, streamops.StreamTimeout):
            raise exc
        from syncopy.errors import SyncopyTimeout

        ctx = rk.ctx
        if exc.addr == rk.ready or any(exc.addr == other.ready for other in self.worlds_of(rk)):
            raise LaunchError(f"rank {rk.rank}: a peer never got ready for launch {ctx.unwrap(exc.value)} within {self.fk.timeout_s:g}s")
        flag = (exc.addr - ctx.flag_address(0)) // 4
        raise SyncopyTimeout(rk.rank, divmod(flag, ctx.plan.chunks_per_rank), ctx.unwrap(exc.value), self.fk.timeout_s,
                             "the kernel never finished it")

    def worlds_of(self, rk: _Rank) -> list[_Rank]:
        return next(ranks for ranks in self.worlds.values() if rk in ranks)


__all__ = ["RankGroup", "ThreadWorld"]
