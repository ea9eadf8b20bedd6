"""One-GPU loopback world: one device plays rank `rank` of a `world`-rank all-gather.

Peers' shards live in pinned host memory and "arrive" by copy-engine copies on a side stream; each
chunk's flag is raised once its copy is done by a stream write-value (`cuStreamWriteValue32`, a
memory barrier first: see runtime/streams/streamops.py) on a flags stream, so communication uses no SMs
and the copy train has no holes (flags="own-stream", the default; "behind-copy" writes the flags
on the side stream itself):

    compute stream  [wait side(e-1)][epoch, own rows, own flags][== fused kernel e ==][error words -> pinned ring]
    side stream                      [wait compute: kernel e-1 done][chunk 0][ev 0][chunk 1][ev 1] ...
    flags stream                                                          [wait ev 0][flag 0 = e][wait ev 1][flag 1 = e] ...

A launch enqueues and returns, like any CUDA op: nothing on its path waits for the device. The
error words a kernel leaves (a wait that ran out) are copied behind it into a pinned ring and read
once the launch's event has completed -- at the next launch or at `synchronize()` (`sync=True`
does both at once) -- and raise `SyncopyTimeout` naming rank, chunk and epoch.

Host-side pacing (`delay_s` between chunks) emulates a slower link without occupying an SM.

A warm all_gather launch can be captured in a CUDA graph (`torch.cuda.graph`, or `capture()`):
from its first captured launch a context advances its epoch on the device instead of writing
host-chosen values (runtime/streams/graph_epochs.py), so that every replay moves new data under a new epoch; its
errors are then raised by `synchronize()`.

`LoopbackWorld(..., device="cpu")` runs the same launch between CPU tensors under the Triton
interpreter (tests): copies are done when issued, and arrivals after the kernel's launch come from
a host thread while the interpreted kernel's tiles spin.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import contextlib
import os
import threading
import time

import torch

from syncopy import device as dev
from syncopy.runtime.launch import host_descriptors
from syncopy.runtime.launch.sequence import init_partial
from syncopy.runtime.where import ensure_allocator, spin_limit
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.streams import graph_epochs as graphs
from syncopy.runtime.streams import streamops
from syncopy.runtime.state.context import Context
from syncopy.runtime.transport.backends import refuse_listed
from syncopy.runtime.transport.reduction import reduce_into
from syncopy.runtime.streams.error_ring import LaunchErrors, wait_bound
from syncopy.runtime.streams.streamops import ptr, wrap32

if TYPE_CHECKING:  # the runtime never imports the user-facing layer (syncopy.api)
    from syncopy.api import FusedKernel


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (lambda index: torch.cuda.current_stream(index).cuda_stream)


class _Cuda:
    """Streams, events and pinned memory of the GPU the loopback world runs on."""

    device_type = "cuda"
    concurrent = True  # a launch returns at once; the side stream's copies run beside the kernel

    def __init__(self):
        self.ops = streamops.cuda_ops()

    def stream(self, device):
        return torch.cuda.Stream(device=device, priority=-1)

    def current(self, device):
        return torch.cuda.current_stream(device)

    @staticmethod
    def current_handle(device) -> int:
        """The CUstream of `device`'s current stream without making a stream object (5 us of host
        time an H100's launch spent in torch.cuda.current_stream: benchmarks/host_profile.py); the
        call Triton's own launcher makes."""
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())

    def on(self, device):
        """Make the tensors' GPU current: Triton launches on the current device's current stream."""
        return torch.cuda.device(device)

    def side_stream(self, device, deadline_s: float):
        return self.stream(device)  # a GPU stream's waits have no deadline: the kernel always finishes its chunks

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory()

    def event(self, stream):
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream)
        return ev

    def synchronize(self, device) -> None:
        torch.cuda.synchronize(device)

    def capturing(self) -> bool:
        """Is the current stream being captured into a CUDA graph (torch.cuda.graph)?"""
        return torch.cuda.is_current_stream_capturing()

    def enqueue(self, launch) -> None:
        """Run a kernel launch now (it enqueues on the current stream; a capture records it)."""
        launch()

    def recording_ops(self, ops):
        return ops  # CUDA's stream capture records the driver calls themselves


class _Host(_Cuda):
    """The same launch between CPU tensors under the Triton interpreter, for tests."""

    device_type = "cpu"
    concurrent = False  # an interpreted launch returns when the kernel is done

    def __init__(self):
        self.ops = streamops.HostOps()
        self.graph: graphs.HostGraph | None = None  # while a capture records (LoopbackWorld.capture)

    def stream(self, device):
        return None  # done when enqueued

    current = stream

    @staticmethod
    def current_handle(device):
        return None  # done when enqueued

    def on(self, device):
        return contextlib.nullcontext()

    def side_stream(self, device, deadline_s: float):
        """A stream whose waits must pass while an interpreted kernel runs: a worker thread."""
        return streamops.HostStream(deadline_s, name="syncopy-loopback-stream")

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def event(self, stream):
        """The host time the stream reaches this point (a list, filled by a worker's stream when it runs)."""
        if stream is None:
            return time.perf_counter()
        stamp: list[float] = []
        stream.put(lambda: stamp.append(time.perf_counter()), always=True)
        return stamp

    def synchronize(self, device) -> None:
        pass

    def capturing(self) -> bool:
        return self.graph is not None and self.graph.recording

    def enqueue(self, launch) -> None:
        if self.capturing():
            self.graph.steps.append(launch)
        else:
            launch()

    def recording_ops(self, ops):
        return graphs.RecordingOps(ops, self.graph) if self.capturing() else ops


class _Loop:
    """What the loopback world keeps per context: the context, its chunk moves (addresses made once
    per peer list), the addresses of its epoch and error words, and its launches whose errors are
    not read yet (runtime/streams/error_ring.py)."""

    def __init__(self, ctx: Context, shard_shape: tuple[int, ...], engine, timeout_s: float):
        self.ctx, self.shard_shape = ctx, shard_shape
        self.peers: list | None = None  # the peer tensors the moves were made from (compared by identity and address)
        self.peer_addresses: list = []
        self.moves: dict[int, tuple[int, int, int, list[int]]] = {}  # chunk -> (dst, src, bytes, flag addresses)
        self.epoch_word = ptr(ctx.ctx) + 8 * dev.CTX_EPOCH.value  # low half of an int64 (little-endian)
        rows, rank, per = ctx.plan.rows_per_rank, ctx.plan.rank, ctx.plan.flags_per_rank
        self.own, self.own_flags = (0, 0), []  # producer contexts write no slot of their own before the kernel
        if not ctx.producer:
            own = ctx.buffer.narrow(ctx.dim, rank * rows, rows)
            self.own = (ptr(own), own.nbytes)
            self.own_flags = [ctx.flag_address(rank * per + f) for f in range(per)]
        self.own_flag_range = (rank * per, per)
        # Set once a launch of this context is captured in a graph (or with graph=True): from then
        # on every launch advances the epoch on the device (runtime/streams/graph_epochs.py), since the host no
        # longer knows which epoch a replay runs.
        self.device_epoch: graphs.DeviceEpoch | None = None
        self.prepared: graphs.DeviceEpoch | LaunchError | None = None  # made at the first launch (LoopbackWorld._prepare_device_epoch)
        ops = engine.ops
        self.errors = LaunchErrors(ctx, ops, engine.pin, timeout_s, refuses=False)  # a test world: it launches after a failure
        # Behind the own rows, one driver call: error words cleared, the epoch, the own flags.
        self.start_writes = ops.batch([(self.errors.words + 4 * i, 0) for i in range(4)]
                                      + [(self.epoch_word, None)] + [(f, None) for f in self.own_flags])
        # Per launch shape (grid, scalars): the tile order and the kernel's extra arguments; per
        # withheld set: the chunk moves in arrival order (cleared with `moves`).
        self.launch_args: dict[tuple, tuple[torch.Tensor, dict]] = {}
        self.arrivals: dict[frozenset, list[tuple[int, int, int, list[int]]]] = {}
        self.compute_mark, self.side_mark = ops.event(), ops.event()
        self.side = engine.stream(ctx.buffer.device)  # the chunk copies' stream, on the context's GPU
        # flags="own-stream": the flags' stream and one event per remote chunk (made at first use).
        self.flag_stream = None
        self.flag_events: list = []
        self.kernel_marked = False  # buffers=2: compute_mark was recorded behind a kernel of this context
        self.wire: _Wire | None = None  # producer contexts: their transfers (made with the first peer list)


class LoopbackWorld:
    """Drive a FusedKernel on one GPU with emulated peers (see module docstring)."""

    COPIES = ("before", "after", "beside", "split")
    FLAGS = ("behind-copy", "own-stream")

    def __init__(self, fused: FusedKernel, world: int, rank: int = 0, device: str = "cuda", graph: bool = False,
                 flags: str | None = None, buffers: int = 1):
        """graph: advance every launch's epoch on the device (runtime/streams/graph_epochs.py) from the first
        launch on, as a context does anyway from its first captured launch.
        flags: where a chunk's flag is written (host-epoch launches):
          "own-stream" (the default): on a stream of its own that waits for an event recorded
                        behind the chunk, so the next chunk's copy does not wait for the write-value
                        and its memory barrier. Behind the copy, each write-value left a 5-7 us hole
                        in the copy train on an H200 (torch.profiler: 12 holes, ~0.07 ms of a
                        12-chunk launch; gpu_bench.py `gpu_profile`; 1.8 us on an H100 by `flag_cost`),
                        none on their own stream: two-buffer launches went 1.009 -> 0.982 ms.
          "behind-copy": a write-value on the copies' stream, behind the chunk (one stream fewer).
        Default from $SYNCOPY_LOOPBACK_FLAGS.
        buffers: 2 gives each shape two contexts (buffers, flags, epochs) that launches alternate
        between, by epoch parity: a launch's copies then wait only for the kernel two launches
        back, which read the same buffer, instead of the last one, so back-to-back launches keep
        the copy engine busy while the last kernel still computes. Twice the receive memory;
        all_gather launches without graph capture."""
        refuse_listed(fused.schedule, "a loopback world")
        flags = flags or os.environ.get("SYNCOPY_LOOPBACK_FLAGS") or "own-stream"
        if flags not in self.FLAGS:
            raise ValueError(f"flags={flags!r}: expected one of {', '.join(self.FLAGS)}")
        self.flags = flags
        if buffers not in (1, 2):
            raise ValueError(f"buffers={buffers!r}: expected 1 or 2")
        if buffers == 2 and (graph or fused.producer):
            raise LaunchError("buffers=2 alternates the receive buffers of all_gather launches without graph capture; "
                              f"leave it out for {'graph=True' if graph else fused.schedule.pattern}")
        self.buffers = buffers
        self.twins: dict[tuple, _Loop] = {}  # buffers=2: each shape's second context
        self.turns: dict[tuple, int] = {}  # buffers=2: launches so far per shape (parity picks the context)
        if device == "cuda" and not torch.cuda.is_available():
            raise LaunchError("the loopback world needs a CUDA device (or device='cpu' under the Triton interpreter)")
        self.fk, self.world, self.rank = fused, world, rank
        self.graph = graph
        self.engine = _Cuda() if device == "cuda" else _Host()
        self.ops = self.engine.ops
        self.loops: dict[tuple, _Loop] = {}

    @property
    def contexts(self) -> dict[tuple, Context]:
        """The contexts made so far, by (shard shape, dtype)."""
        return {key: loop.ctx for key, loop in self.loops.items()}

    def _loop(self, shard: torch.Tensor, args: dict) -> _Loop:
        key = (tuple(shard.shape), shard.dtype)
        if key not in self.loops:
            loop = self.loops[key] = self._new_loop(shard, args)
            if not self.fk.producer:
                self._prepare_device_epoch(loop)
        return self.loops[key]

    def _new_loop(self, shard: torch.Tensor, args: dict) -> _Loop:
        # One process plays every rank here: the planner's choice needs no exchange.
        choice = self.fk.contexts.resolve(shard, self.world, args) if self.fk.schedule.planned else None
        ctx = self.fk.contexts.make(shard, self.rank, self.world, choice)
        ctx.ctx[dev.CTX_SPIN_LIMIT.value] = spin_limit(self.fk.timeout_s, self.engine.device_type)
        return _Loop(ctx, tuple(shard.shape), self.engine, self.fk.timeout_s)

    def _turn(self, loop: _Loop, key: tuple, shard: torch.Tensor, args: dict) -> _Loop:
        """buffers=2: this launch's context, the shape's first or second by launch parity. The
        second shares the first's copies stream, so a launch's copies still follow the last one's."""
        turn = self.turns[key] = self.turns.get(key, -1) + 1
        if turn % 2 == 0:
            return loop
        twin = self.twins.get(key)
        if twin is None:
            twin = self.twins[key] = self._new_loop(shard, args)
            twin.side = loop.side
        return twin

    def _prepare_device_epoch(self, loop: _Loop) -> None:
        """Allocate (and on a GPU compile and load) what device-epoch mode needs now, at the first
        launch of a shape: a later capture may switch to it, and a capture can neither allocate
        pinned memory nor be trusted to load a kernel's module."""
        per_lo, per = loop.own_flag_range
        loop.prepared = graphs.DeviceEpoch(loop.ctx, self.engine.pin, per_lo, per)
        if self.engine.device_type == "cuda":
            try:
                loop.prepared.warm()
            except Exception as exc:  # only graph capture needs it: raised when a launch asks for it
                loop.prepared = LaunchError(f"graph capture is unavailable here: the epoch advance kernel failed to load "
                                            f"({type(exc).__name__}: {exc}); launch without torch.cuda.graph and graph=True")

    def launch(self, grid, args: tuple, kwargs: dict, peers: list[torch.Tensor], delay_s: float = 0.0,
               presignal: bool = False, sync: bool = True, withhold: frozenset = frozenset(), timeline: bool = False,
               copies: str | None = None) -> Context:
        """Launch the fused kernel with `peers[r]` (pinned host shards, None for this rank) arriving.

        Enqueues and returns (see module doc); `sync=True` also waits for the launch and raises
        its error, if any. An error of an earlier launch is raised here once that launch is done.
        copies: when the host issues the chunk copies, against the kernel's launch --
          "before": all enqueued, then the kernel (the default unpaced on the CPU engine, and in a
                    capture: a real peer's pushes start independently of this rank's launch);
          "split":  the first chunk, then the kernel, then the rest (the default unpaced on a GPU):
                    the copy engine starts at once and stays busy with the first chunk while the
                    host launches the kernel, which no longer waits behind every copy's host call
                    (on an H100, 12 copies and their flags delayed the kernel by ~0.15 ms);
          "after":  the kernel, then the copies (the default with `delay_s`, which paces them);
          "beside": from a host thread started just before the kernel's launch, so that neither
                    waits for the other's host time.
        This rank's own writes (epoch, own rows, own flags) always go first: they are all the
        kernel needs to start, and on a GPU its own-rows copy would otherwise queue behind the
        chunk copies on the copy engine.
        timeline: record events (CUDA events on a GPU: start, kernel launch, each chunk landed,
        end) and host times for `timeline_ms()`.
        """
        # As FusedKernel's launches: syncopy's own tensor work in inference mode, whatever the caller's.
        with self.engine.on(self._device(args, kwargs)), torch.inference_mode():
            return self._launch(grid, args, kwargs, peers, delay_s, presignal, sync, withhold, timeline, copies)

    def _device(self, args: tuple, kwargs: dict):
        """The device of the launch's tensors (the first one passed)."""
        return next((a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)

    def _launch(self, grid, args: tuple, kwargs: dict, peers: list[torch.Tensor], delay_s: float, presignal: bool, sync: bool,
                withhold: frozenset, timeline: bool, copies: str | None) -> Context:
        host0 = time.perf_counter()
        fk, eng = self.fk, self.engine
        capturing = eng.capturing()
        fused = fk.kernel.build().fused
        bound_call = fk.binder.bind(args, dict(kwargs))
        bound, shard, options = bound_call.arguments, bound_call.shard, bound_call.options
        ensure_allocator(shard.device)
        key = (tuple(shard.shape), shard.dtype)
        if capturing:
            self._check_capture(key, grid, bound, sync, delay_s, copies, timeline)
        loop = self._loop(shard, bound)
        if self.buffers == 2:
            if capturing:
                raise LaunchError("a world with buffers=2 cannot be captured in a CUDA graph (a replay would reuse one "
                                  "buffer); make the world with buffers=1")
            loop = self._turn(loop, key, shard, bound)
        if not capturing:  # event queries are not allowed while a stream is captured (nor recorded: its launch records none)
            self._check(loop)
            loop.errors.make_room()  # before the kernel: an older launch's failure raises now, this launch's words get a slot
        ctx = loop.ctx
        call = dict(bound)
        call[fk.schedule.tensor] = ctx.buffer
        call = host_descriptors.rewrapped(call, bound_call.descriptors)  # a host descriptor: one over the gathered buffer
        if fk.producer:
            if capturing or self.graph or loop.device_epoch is not None:
                raise LaunchError("graph capture covers all_gather launches on the loopback world; launch reduce_scatter "
                                  "without torch.cuda.graph (and without graph=True)")
            order = fk.orders.order(ctx, grid, call, None).table
            return self._launch_producer(loop, grid, call, order, shard, options, peers, sync, timeline, host0)
        order, extra = self._launch_args(loop, grid, call)
        if copies is None:  # a capture records the copies before the kernel (a CPU replay paces them on the side stream)
            if (presignal or delay_s) and not capturing:
                copies = "after"
            else:
                copies = "split" if eng.concurrent and not capturing else "before"
        if copies not in self.COPIES:
            raise ValueError(f"copies={copies!r}: expected one of {', '.join(self.COPIES)}")
        if (capturing or self.graph) and loop.device_epoch is None:
            self._use_device_epoch(loop)
        moves = self._moves(loop, peers)
        ops = eng.recording_ops(self.ops)
        cur = eng.current(ctx.buffer.device) if timeline else None  # a stream object only for the timeline's events
        hc, hs = eng.current_handle(ctx.buffer.device) if cur is None else ops.handle(cur), ops.handle(loop.side)
        events = self._events(timeline)
        events.mark("start", cur)
        events.host("setup", host0)
        # The last launch's copies are done before this launch writes the buffer; this launch's
        # copies follow the last kernel's reads of it (not this launch's own writes: see docstring).
        # In a capture the graph's side branch joins back at its end instead (below): a captured
        # stream may not wait for an event recorded outside the capture.
        if not capturing:
            ops.record(loop.side_mark, hs)
            ops.wait_event(hc, loop.side_mark)
        if self.buffers == 2:  # epochs count the shape's launches, whichever buffer takes them
            ctx.epoch = self.turns[key]
        ctx.epoch = epoch = ctx.epoch + 1
        raise_flags = self._own_writes(loop, shard, epoch, ops, hc, hs)
        if presignal:
            for _, dst, src, n, flags in self._arrivals(loop, moves, frozenset()):
                ops.copy(dst, src, n, hc)
                raise_flags(flags, hc, barrier=False)  # the kernel follows on this stream
        events.host("own writes", host0)

        pending = [] if presignal else list(self._arrivals(loop, moves, withhold))
        failed: list[BaseException] = []
        copy, marked = ops.copy, events is not _Timeline.OFF
        # A chunk has landed once its flags are written: on the flags' own stream where they have one.
        landed_on = loop.flag_stream if loop.flag_stream is not None and loop.device_epoch is None else loop.side

        def arrive(limit: int | None = None):
            """Issue the pending chunk copies (the first `limit` of them), each followed by its flags."""
            take = pending[:limit]
            del pending[:limit]
            try:
                for g, dst, src, n, flags in take:
                    if delay_s and capturing:
                        ops.delay(delay_s, hs)  # CPU engine only (_check_capture)
                    elif delay_s:
                        time.sleep(delay_s)
                    copy(dst, src, n, hs)
                    raise_flags(flags, hs)
                    if marked:
                        events.mark(g, landed_on)
                events.host("copies enqueued", host0)
            except BaseException as exc:  # surfaced by the launching thread
                failed.append(exc)

        if copies == "before":
            arrive()
        elif copies == "split":
            arrive(1)
        # A thread issues the copies beside the launch; on the host engine also "after", since an
        # interpreted launch returns only when the kernel is done.
        beside = None
        if pending and (copies == "beside" or (copies in ("after", "split") and not eng.concurrent)):
            beside = threading.Thread(target=arrive, name="syncopy-loopback", daemon=True)
            beside.start()
        events.mark("kernel", cur)
        try:
            eng.enqueue(lambda: fused[grid](**call, **extra, **options))
        finally:
            if beside is not None:
                beside.join()
        events.mark("end", cur)
        events.host("kernel launched", host0)
        if pending:
            arrive()
        if capturing:  # the side branch rejoins the captured stream: the graph ends when its copies do
            ops.record(loop.side_mark, hs)
            ops.wait_event(hc, loop.side_mark)
        if loop.device_epoch is None:
            self._after_kernel(loop, epoch, hc)
        if self.buffers == 2:  # this buffer's next copies wait for this kernel (_own_writes)
            ops.record(loop.compute_mark, hc)
            loop.kernel_marked = True
        if failed:
            raise failed[0]
        if sync:
            self.synchronize()
        return ctx

    def _own_writes(self, loop: _Loop, shard: torch.Tensor, epoch: int, ops, hc, hs):
        """Enqueue what the kernel needs before it starts: the epoch, cleared error words, this
        rank's rows and their flags; and start the side stream (`hs`) once what its flags need is
        there. Returns how this launch raises a chunk's flags,
        `raise_flags(flag addresses, stream, barrier=True)`: the host's epoch by write-value, or
        in device-epoch mode (runtime/streams/graph_epochs.py) a copy from the epoch's pinned mirror."""
        own_dst, own_bytes = loop.own
        de = loop.device_epoch
        if de is None:
            # The side stream needs nothing of this launch: its copies start at once, once the last
            # kernel that read this buffer is done (buffers=2: the one two launches back, marked
            # after it; its first launch has none).
            if self.buffers == 1:
                ops.record(loop.compute_mark, hc)
                ops.wait_event(hs, loop.compute_mark)
            elif loop.kernel_marked:
                ops.wait_event(hs, loop.compute_mark)
            ops.copy(own_dst, ptr(shard), own_bytes, hc)
            ops.write_batch(loop.start_writes, epoch, hc)  # error words cleared, the epoch, the own flags
            write32 = ops.write32

            def raise_flags(flags, stream, barrier=True):
                for f in flags:
                    write32(f, epoch, stream)

            return self._raise_on_flag_stream(loop, ops, hs, raise_flags) if self.flags == "own-stream" else raise_flags
        # The side stream's flags are copies of the new epoch: it starts once the mirror holds it.
        # The own rows may land after the advance raised their flags: only the fused kernel,
        # behind them on this stream, reads those flags.
        self.engine.enqueue(de.advance)
        ops.copy(de.mirror_address, loop.epoch_word, 4, hc)
        ops.record(loop.compute_mark, hc)
        ops.wait_event(hs, loop.compute_mark)
        ops.copy(own_dst, ptr(shard), own_bytes, hc)
        mirror, scratch = de.mirror_address, de.scratch_address

        def raise_flags(flags, stream, barrier=True):
            if barrier:  # the chunk's bytes are visible before its flag (see runtime/streams/graph_epochs.py)
                ops.write32(scratch, 0, stream)
            for f in flags:
                ops.copy(f, mirror, 4, stream)

        # Behind the copies whatever `flags` says: on their own stream, a captured launch's
        # replays took 1.36 ms of GPU time against 1.15 with the flags behind the copies (H200,
        # 8192x8192x4096: benchmarks/results/h200-2026-11-27-s9); in a graph the flags' branch
        # does not keep the copy train free as a stream does.
        return raise_flags

    def _raise_on_flag_stream(self, loop: _Loop, ops, hs, raise_on):
        """flags="own-stream": a chunk's flags are raised (`raise_on(flags, stream, barrier)`: a
        write-value of the host's epoch) on the flags' stream once an event recorded behind the
        chunk on the copies' stream `hs` has completed (the chunk is in memory), so the copies'
        stream goes on to the next chunk at once. A flag on another stream (a presignalled chunk
        on the compute stream) is raised there, behind the chunk."""
        if not loop.flag_events:  # made once (the CPU engine's stream is None: done when enqueued)
            loop.flag_events = [ops.event() for _ in range(loop.ctx.n_chunks)]
            loop.flag_stream = self.engine.stream(loop.ctx.buffer.device)
        hf, events = ops.handle(loop.flag_stream), iter(loop.flag_events)

        def raise_flags(flags, stream, barrier=True):
            if stream != hs:
                raise_on(flags, stream, barrier)
                return
            ev = next(events)
            ops.record(ev, stream)
            ops.wait_event(hf, ev)
            raise_on(flags, hf, True)

        return raise_flags

    def _use_device_epoch(self, loop: _Loop) -> None:
        """From now on `loop`'s launches advance the epoch on the device (runtime/streams/graph_epochs.py). On the
        CPU engine its chunk copies move to a worker stream, so that a replayed graph's copies
        run beside the interpreted kernel as a GPU's side stream does."""
        if isinstance(loop.prepared, LaunchError):
            raise loop.prepared
        loop.device_epoch = loop.prepared
        if loop.side is None:
            loop.side = self.engine.side_stream(loop.ctx.buffer.device, self.fk.timeout_s)

    def _launch_args(self, loop: _Loop, grid, call: dict) -> tuple[torch.Tensor, dict]:
        return launch_args(self.fk, loop, grid, call)

    def _arrivals(self, loop: _Loop, moves: dict, withhold: frozenset) -> list:
        """(chunk, dst, src, bytes, flags) of the remote chunks not withheld, in arrival order."""
        got = loop.arrivals.get(withhold)
        if got is None:
            got = loop.arrivals[withhold] = [(g, *moves[g]) for g in loop.ctx.plan.arrival if g in moves and g not in withhold]
        return got

    def _check_capture(self, key: tuple, grid, bound: dict, sync: bool, delay_s: float, copies: str | None, timeline: bool) -> None:
        """A captured launch must be warm (its first launch probes and reads back on the host) and
        enqueue everything from the capturing thread, with nothing to wait for on the host."""
        if sync:
            raise LaunchError("a launch captured in a CUDA graph cannot wait for itself: pass sync=False and call "
                              "synchronize() after the replays")
        if (delay_s and self.engine.device_type == "cuda") or copies not in (None, "before") or timeline:
            raise LaunchError("a captured launch enqueues its chunk copies before the kernel: leave out delay_s, copies= "
                              "and timeline= when capturing")
        loop = self.loops.get(key)
        call = dict(bound)
        if loop is not None:
            call[self.fk.schedule.tensor] = loop.ctx.buffer
        if loop is None or self.fk.orders.shape_key(grid, call) not in loop.ctx.orders:
            raise LaunchError("launch once with these shapes, grid and scalars before capturing: the first launch "
                              "probes the kernel's tiles and reads the answer back, which a capture cannot")

    def _after_kernel(self, loop: _Loop, epoch: int, hc) -> None:
        """Copy the kernel's error words into the launch's ring slot behind it; read them later."""
        loop.errors.record(epoch, hc)

    def synchronize(self) -> None:
        """Wait for every launch so far and raise the first error among them (SyncopyTimeout);
        in device-epoch mode also those of graph replays, which only the device knows of."""
        for loop in [*self.loops.values(), *self.twins.values()]:
            self.engine.synchronize(loop.ctx.buffer.device)
            streams = [loop.side, loop.flag_stream] + ([loop.wire.send, loop.wire.recv] if loop.wire is not None else [])
            for stream in streams:
                if isinstance(stream, streamops.HostStream):
                    stream.drain(wait_bound(self.fk.timeout_s))  # bounded, as the ring's wait below
            self._check(loop, wait=True)
            if loop.device_epoch is not None:
                self._check_device_epoch(loop)

    def _check_device_epoch(self, loop: _Loop) -> None:
        """After a synchronize: take the epoch the device reached (replays advance it unseen) and
        raise the first error the device kept (runtime/streams/graph_epochs.py)."""
        ctx, de = loop.ctx, loop.device_epoch
        ctx.epoch = ctx.unwrap(de.epoch_word())
        err = de.first_error()
        if err is not None:
            rank, unit, at = err
            plan = ctx.plan
            raise SyncopyTimeout(rank, divmod(plan.chunk_of_flag(unit), plan.chunks_per_rank), ctx.unwrap(at), self.fk.timeout_s)

    def capture(self, grid, args: tuple, kwargs: dict, peers: list[torch.Tensor], withhold: frozenset = frozenset(),
                delay_s: float = 0.0):
        """Capture one warm launch as a graph; `graph.replay()` runs it again with whatever the
        captured tensors (this rank's shard, `peers`, the kernel's other arguments) hold by then,
        and advances the epoch on the device (runtime/streams/graph_epochs.py). Errors of replays are raised by
        `synchronize()`. On a GPU this is `torch.cuda.graph` around `launch(..., sync=False)`
        (which works as well written out); on the CPU engine a HostGraph, whose `delay_s` paces
        the chunk copies on the side stream's worker at every replay (a slow link)."""
        if self.engine.device_type == "cuda":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.launch(grid, args, kwargs, peers, sync=False, withhold=withhold, delay_s=delay_s)
            return graph
        graph = self.engine.graph = graphs.HostGraph()
        try:
            self.launch(grid, args, kwargs, peers, sync=False, withhold=withhold, delay_s=delay_s)
        finally:
            graph.recording = False
            self.engine.graph = None
        return graph

    def _check(self, loop: _Loop, wait: bool = False) -> None:
        """Raise the first error of this context's launches that are done (all of them, with `wait`)."""
        self._check_streams(loop)
        loop.errors.check(wait=wait)

    # -- producer patterns ------------------------------------------------------------------------
    def _launch_producer(self, loop: _Loop, grid, call: dict, order, out: torch.Tensor, options: dict, peers,
                         sync: bool, timeline: bool, host0: float) -> Context:
        """reduce_scatter: the kernel writes its full partial and raises each chunk's flag when its
        last tile is stored; a send stream waits for each remote chunk's flag on the device and
        copies the chunk out to its owner (`outbox`, pinned host memory), while later tiles still
        compute. The peers' partials of this rank's rows (`peers[p]`, pinned) arrive on a receive
        stream, each when the peer would have finished it -- peers run in lockstep with this
        rank, so peer p's k-th chunk lands once this rank's k-th chunk is done -- and are added
        into `out` behind the kernel:

            compute  [epoch, targets][=== fused kernel: tiles in send order, flags rise ===][out = own + sum(inbox)]
            send                     [wait flag g0][g0 -> owner][wait flag g1][g1 -> owner] ...
            receive                  [wait flag of this rank's k-th chunk][peer p's k-th chunk -> inbox] ...
                                     (both enqueued after the kernel: see the comment there)

        The emulation sends every chunk straight to its owner (the direct algorithm); ring plans
        pass running sums between peers, which one process cannot play."""
        fk, ctx, ops, eng = self.fk, loop.ctx, self.ops, self.engine
        fused, plan = fk.kernel.build().fused, ctx.plan
        if plan.pattern != "reduce_scatter" or plan.algorithm != "direct":
            raise LaunchError(f"the loopback world emulates reduce_scatter sent straight to each owner, not {plan.pattern} "
                              f"({plan.algorithm}); use pattern reduce_scatter with order local_first or a list of peer offsets")
        wire = self._wire(loop, peers, out)
        cur = eng.current(ctx.buffer.device)
        hc = ops.handle(cur)
        hs, hr = ops.handle(wire.send), ops.handle(wire.recv)
        events = self._events(timeline)
        events.mark("start", cur)
        events.host("setup", host0)
        # The kernel rewrites the partial that the last launch's sends read: they go first.
        ops.record(loop.side_mark, hs)
        ops.wait_event(hc, loop.side_mark)
        ctx.epoch = epoch = ctx.epoch + 1
        tiles = ctx.tiles_per_chunk[fk.orders.shape_key(grid, call)]
        ctx.targets = [wrap32(t + k) for t, k in zip(ctx.targets, tiles)]
        # One driver call: the epoch, the error words cleared, this launch's targets and the flag of
        # every chunk no tile writes (final at once). The send and receive streams start after the
        # mark below, so the order of these writes and the partial's initialisation is theirs alone.
        start_producer(ops, wire.starts, (loop.epoch_word, loop.errors.words, wire.targets, wire.flags), tiles, ctx.targets, epoch, hc)
        init_partial(ctx, out, fk.schedule.pattern)  # what the partial holds before the kernel's stores, as in the reference
        # Both streams start after this launch's targets are written (flags of earlier epochs are
        # below `epoch`: the waits cannot pass early).
        ops.record(loop.compute_mark, hc)

        def transfers():
            ops.wait_event(hs, loop.compute_mark)
            ops.wait_event(hr, loop.compute_mark)
            for g, (flag, dst, src, n) in wire.sends.items():
                ops.wait32(flag, epoch, hs)
                ops.copy(dst, src, n, hs)
                events.mark(("sent", g), wire.send)
            for flag, dst, src, n in wire.receives:
                ops.wait32(flag, epoch, hr)
                ops.copy(dst, src, n, hr)
            events.host("copies enqueued", host0)

        # On a GPU the waits are enqueued after the kernel that raises their flags. Streams share
        # the GPU's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS of them): a wait enqueued first
        # could sit ahead of the kernel in the same queue and block it for good (the driver's
        # warning on cuStreamWaitValue32; an H200 run hung exactly so). Enqueued after it, a wait
        # that shares the kernel's queue only loses the overlap. An interpreted launch returns
        # when the kernel is done, so on CPU the worker streams get their waits first.
        if not eng.concurrent:
            transfers()
        events.mark("kernel", cur)
        fused[grid](**call, **fk.kernel.syncopy_args(ctx, order, ctx.no_trace), **options)
        events.mark("end", cur)
        events.host("kernel launched", host0)
        if eng.concurrent:
            transfers()
        ops.record(wire.received, hr)
        ops.wait_event(hc, wire.received)
        self._reduce_own(ctx, wire, out)
        events.mark("reduced", cur)
        self._after_kernel(loop, epoch, hc)
        if sync:
            self.synchronize()
        return ctx

    def launch_wire(self, out: torch.Tensor) -> "_Wire":
        """The send/receive buffers of the producer context of `out`'s shape (after a launch)."""
        return self.loops[(tuple(out.shape), out.dtype)].wire

    def _wire(self, loop: _Loop, peers, out: torch.Tensor) -> "_Wire":
        wire = loop.wire
        if wire is None or not (len(wire.peers) == len(peers) and all(a is b for a, b in zip(wire.peers, peers))):
            self._check_peers(loop, peers)
            wire = loop.wire = _Wire(self, loop, peers, out)
        return wire

    @staticmethod
    def _reduce_own(ctx: Context, wire: "_Wire", out: torch.Tensor) -> None:
        """out = this rank's own partial rows + every peer's (in rank order: the same bits as a
        reduce on any rank), accumulated in fp32 for half types."""
        rows, rank = ctx.plan.rows_per_rank, ctx.plan.rank
        reduce_into(out, (ctx.buffer.narrow(ctx.dim, rank * rows, rows) if r == rank else wire.inbox[r] for r in range(ctx.plan.world)))

    def _check_peers(self, loop: _Loop, peers) -> None:
        if len(peers) != self.world:
            raise LaunchError(f"the loopback world has {self.world} ranks but got {len(peers)} peer shards; pass one per rank (any value for rank {self.rank})")
        for r, t in enumerate(peers):
            if r != self.rank and (t is None or tuple(t.shape) != loop.shard_shape):
                got = "None" if t is None else tuple(t.shape)
                raise LaunchError(f"peer shard {r} has shape {got}; every peer's shard must have this rank's shard shape {loop.shard_shape}")
            if r != self.rank and not t.is_contiguous():
                raise LaunchError(f"peer shard {r} is not contiguous; pass .contiguous() shards (each chunk moves as one copy)")

    def _check_streams(self, loop: _Loop) -> None:
        """A CPU stream whose wait ran out (the kernel never raised a chunk's flag) is a SyncopyTimeout."""
        streams = (loop.side,) + ((loop.wire.send, loop.wire.recv) if loop.wire is not None else ())
        for stream in streams:
            errors = getattr(stream, "errors", None)
            if errors:
                exc = errors[0]
                errors.clear()
                if not isinstance(exc, streamops.StreamTimeout):
                    raise exc
                ctx = loop.ctx
                flag = (exc.addr - ctx.flag_address(0)) // 4
                raise SyncopyTimeout(ctx.plan.rank, divmod(flag, ctx.plan.chunks_per_rank), exc.value, self.fk.timeout_s,
                                     "the kernel never finished it")

    def _events(self, on: bool) -> "_Timeline":
        self.timeline = _Timeline(self.engine) if on else _Timeline.OFF
        return self.timeline

    def timeline_ms(self) -> dict:
        """After a synchronised launch(timeline=True): GPU ms from its start to the kernel's launch
        point, to each chunk's landing (flag raised) and to the kernel's end; and under "host", ms of
        host time from the call to each step (setup, own writes, copies enqueued, kernel launched),
        in the order they happened."""
        return self.timeline.ms()

    def _moves(self, loop: _Loop, peers) -> dict[int, tuple[int, int, int, list[int]]]:
        """Per remote chunk: (address of its rows in the buffer, of the same rows of the peer's pinned
        shard, their bytes, the addresses of its flags), made once per context and peer list."""
        # The same tensors at the same addresses (a tensor's storage can be swapped in place: `set_`).
        addresses = [p.data_ptr() if isinstance(p, torch.Tensor) else None for p in peers]
        if (loop.peers is not None and len(loop.peers) == len(peers) and all(a is b for a, b in zip(loop.peers, peers))
                and addresses == loop.peer_addresses):
            return loop.moves
        ctx = loop.ctx
        c, rows = ctx.plan.chunks_per_rank, ctx.plan.rows_per_rank
        self._check_peers(loop, peers)
        moves = {}
        for g in range(ctx.n_chunks):
            src = g // c
            if src == self.rank:
                continue
            lo, hi = ctx.plan.bounds(g)
            dst, what = ctx.chunk_view(g), peers[src].narrow(ctx.dim, lo - src * rows, hi - lo)
            if not dst.is_contiguous():
                raise LaunchError(f"the loopback world moves each chunk with one copy, which needs it contiguous, but chunks "
                                  f"along dim {ctx.dim} of a {list(ctx.buffer.shape)} tensor are strided; shard along dim 0")
            moves[g] = (ptr(dst), ptr(what), dst.nbytes, [ctx.flag_address(f) for f in ctx.plan.flags(g)])
        loop.peers, loop.peer_addresses, loop.moves = list(peers), addresses, moves
        loop.arrivals.clear()
        return moves



def start_producer(ops, starts: dict, words: tuple, tiles, targets: list[int], epoch: int, stream) -> None:
    """A producer launch's first stream operation, one driver call (cuStreamBatchMemOp): the epoch
    word, the four error words cleared, this launch's targets and the flag of every chunk no tile
    writes (final at once). `words`: (epoch word, error words, target addresses, flag addresses);
    the batch is made once per tiles per chunk (kept in `starts`), the targets assigned each launch."""
    epoch_word, error_words, target_addrs, flag_addrs = words
    tiles = tuple(tiles)
    batch = starts.get(tiles)
    if batch is None:
        writes = [(epoch_word, None)] + [(error_words + 4 * i, 0) for i in range(4)] + [(addr, 0) for addr in target_addrs]
        writes += [(flag_addrs[g], None) for g, count in enumerate(tiles) if count == 0]
        batch = starts[tiles] = ops.batch(writes)
    for i, target in enumerate(targets):
        batch.assign(5 + i, target)
    ops.write_batch(batch, epoch, stream)


def launch_args(fk: FusedKernel, loop: _Loop, grid, call: dict) -> tuple[torch.Tensor, dict]:
    """The tile order (TileOrders.order) and the kernel's extra arguments of this launch shape,
    kept per loop: the order depends on the grid and the scalar arguments (what TileOrders.shape_key holds:
    here the argument names in call order, then the values with None for each tensor, which skips
    its sort), and the extra arguments on the context, the order and the operator's trace switch.
    Tensors other than the communicated one (their data pointers) go to the kernel as passed, never
    into a key; a kernel probed at every launch (rows from loaded data) is never served from it."""
    key = None
    if isinstance(grid, tuple) and not fk.kernel.build().transformed.fresh_probe:  # a callable grid is evaluated by order(), a list is not hashable
        key = (grid, fk.trace, tuple(call), tuple([None if isinstance(v, torch.Tensor) else v for v in call.values()]))
        hit = loop.launch_args.get(key)
        if hit is not None:
            return hit
    order = fk.orders.order(loop.ctx, grid, call, None).table
    hit = (order, fk.kernel.syncopy_args(loop.ctx, order, loop.ctx.no_trace))
    if key is not None:
        loop.launch_args[key] = hit
    return hit

class _Wire:
    """A producer context's transfers on the loopback world: per remote chunk (its flag, where it
    goes in the pinned `outbox`, where it is in the partial, bytes); per peer partial of this
    rank's chunks (the flag of this rank's chunk at the same finish position, the `inbox` rows it
    lands in, the peer's pinned rows, bytes); the target words; the send and receive streams."""

    def __init__(self, world: "LoopbackWorld", loop: _Loop, peers, out: torch.Tensor):
        from syncopy.runtime.state import plan as planning

        ctx, eng = loop.ctx, world.engine
        plan, dim = ctx.plan, ctx.dim
        c, rows, rank = plan.chunks_per_rank, plan.rows_per_rank, plan.rank
        self.peers = list(peers)
        self.send, self.recv = (eng.side_stream(ctx.buffer.device, world.fk.timeout_s) for _ in range(2))
        self.received = eng.ops.event()
        n = ctx.n_chunks
        flag = self.flags = [ctx.flag_address(g) for g in range(n)]
        self.targets = [ctx.word_address(ctx.target_word(g)) for g in range(n)]
        self.starts: dict[tuple, object] = {}  # tiles per chunk -> a launch's start writes (start_producer)
        self.outbox = eng.pin(torch.empty_like(ctx.buffer, device="cpu"))
        self.inbox = {p: torch.empty_like(out) for p in range(plan.world) if p != rank}
        self.sends = {}
        for g in plan.finish:
            if g // c == rank or plan.empty(g):
                continue
            lo, hi = plan.bounds(g)
            part = ctx.buffer.narrow(dim, lo, hi - lo)
            self.sends[g] = (flag[g], ptr(self.outbox.narrow(dim, lo, hi - lo)), ptr(part), part.nbytes)
        # Receives in the order they become due (one stream runs them in order: a late one first
        # would hold back every other), each behind the flag of this rank's chunk at its position.
        due = []
        mine = list(plan.finish)  # this rank's finish order: position k -> its k-th chunk
        for p, box in self.inbox.items():
            theirs = planning.reduce(ctx.schedule, p, plan.world, rows, size=plan.size).finish
            for k, g in enumerate(theirs):
                if g // c != rank:
                    continue  # p's chunk for another rank
                lo, hi = plan.bounds(g)
                i_lo = lo - rank * rows
                dst, src = box.narrow(dim, i_lo, hi - lo), self.peers[p].narrow(dim, i_lo, hi - lo)
                k = min(k, len(mine) - 1)
                due.append((k, p, (flag[mine[k]], ptr(dst), ptr(src), dst.nbytes)))
        self.receives = [entry for _, _, entry in sorted(due, key=lambda d: d[:2])]


class _Timeline:
    """Events marked on streams during one launch, and host times (a no-op when off)."""

    OFF: "_Timeline"

    def __init__(self, engine=None):
        self.engine = engine
        self.events: dict = {}
        self.host_ms: dict = {}

    def mark(self, name, stream) -> None:
        if self.engine is not None:
            self.events[name] = self.engine.event(stream)

    def host(self, name: str, since: float) -> None:
        if self.engine is not None:
            self.host_ms[name] = (time.perf_counter() - since) * 1e3

    def ms(self) -> dict:
        start = self.events["start"]
        if isinstance(start, float):  # host clock (the CPU engine; a worker stream's stamp is a list)
            out = {name: ((t[0] if isinstance(t, list) else t) - start) * 1e3 for name, t in self.events.items() if name != "start"}
        else:
            out = {name: start.elapsed_time(ev) for name, ev in self.events.items() if name != "start"}
        out["host"] = dict(self.host_ms)
        return out


_Timeline.OFF = _Timeline()
