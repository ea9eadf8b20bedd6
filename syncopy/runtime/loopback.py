"""One-GPU loopback world: one device plays rank `rank` of a `world`-rank all-gather.

Peers' shards live in pinned host memory and "arrive" by copy-engine copies on a side stream; each
chunk's flag is raised by a second copy (of the epoch, from pinned memory) on the same stream, so
stream order puts the data before the flag and communication uses no SMs:

    compute stream  |== fused kernel: tiles spin on flags, compute as chunks land ==|
    side stream        [chunk 0][flag 0]  (host waits delay_s)  [chunk 1][flag 1] ...

Host-side pacing (`delay_s` between chunks) emulates a slower link without occupying an SM.

`LoopbackWorld(..., device="cpu")` runs the same launch between CPU tensors under the Triton
interpreter (tests): copies are done when issued, and arrivals after the kernel's launch come from
a host thread while the interpreted kernel's tiles spin.
"""
from __future__ import annotations

import contextlib
import threading
import time

import torch

from syncopy import device as dev
from syncopy.api import FusedKernel, _ensure_allocator, _spin_limit
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime import plan as planning
from syncopy.runtime.context import Context


class _Cuda:
    """Streams, events and pinned memory of the GPU the loopback world runs on."""

    device_type = "cuda"
    concurrent = True  # a launch returns at once; the side stream's copies run beside the kernel

    def stream(self):
        return torch.cuda.Stream(priority=-1)

    def current(self):
        return torch.cuda.current_stream()

    def using(self, stream):
        return torch.cuda.stream(stream)

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory()

    def event(self, stream):
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream)
        return ev

    def synchronize(self) -> None:
        torch.cuda.synchronize()


class _HostStream:
    """A CPU "stream": its work is done when issued."""

    def wait_stream(self, other) -> None:
        pass

    def synchronize(self) -> None:
        pass


class _Host(_Cuda):
    """The same launch between CPU tensors under the Triton interpreter, for tests."""

    device_type = "cpu"
    concurrent = False  # an interpreted launch returns when the kernel is done

    def stream(self):
        return _HostStream()

    current = stream

    def using(self, stream):
        return contextlib.nullcontext()

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def event(self, stream):
        return time.perf_counter()

    def synchronize(self) -> None:
        pass


class LoopbackWorld:
    """Drive a FusedKernel on one GPU with emulated peers (see module docstring)."""

    def __init__(self, fused: FusedKernel, world: int, rank: int = 0, device: str = "cuda"):
        if device == "cuda" and not torch.cuda.is_available():
            raise LaunchError("the loopback world needs a CUDA device (or device='cpu' under the Triton interpreter)")
        self.fk, self.world, self.rank = fused, world, rank
        self.engine = _Cuda() if device == "cuda" else _Host()
        self.side = self.engine.stream()
        self.contexts: dict[tuple, Context] = {}

    def _context(self, shard: torch.Tensor, args: dict) -> Context:
        key = (tuple(shard.shape), shard.dtype)
        if key not in self.contexts:
            # One process plays every rank here: the planner's choice needs no exchange.
            choice = self.fk._resolve(shard, self.world, args) if self.fk.schedule.planned else None
            schedule, resolution = self.fk._lowered(choice)
            p = planning.all_gather(schedule, self.rank, self.world, shard.shape[schedule.dim])
            ctx = Context(p, tuple(shard.shape), shard.dtype, shard.device, schedule.dim)
            ctx.schedule, ctx.resolution = schedule, resolution
            self.contexts[key] = ctx
        return self.contexts[key]

    def launch(self, grid, args: tuple, kwargs: dict, peers: list[torch.Tensor], delay_s: float = 0.0,
               presignal: bool = False, sync: bool = True, withhold: frozenset = frozenset(), timeline: bool = False,
               copies_first: bool | None = None) -> Context:
        """Launch the fused kernel with `peers[r]` (pinned host shards, None for this rank) arriving.

        Without pacing the copies are enqueued before the kernel, as a real peer's pushes start
        independently of this rank's launch; with `delay_s` the host enqueues them one by one after
        it (`copies_first` overrides the choice). timeline: record events (CUDA events on a GPU: start, kernel
        launch, each chunk landed, end) and host times for `timeline_ms()`.
        """
        host0 = time.perf_counter()
        fk = self.fk
        fk.build()
        _, fused, _, _ = fk._built
        bound, shard, options = fk._bind(args, dict(kwargs))
        _ensure_allocator(shard.device)
        ctx = self._context(shard, bound)
        call = dict(bound)
        call[fk.schedule.tensor] = ctx.buffer
        order, _, _ = fk._order(ctx, grid, call, None)
        eng = self.engine
        cur = eng.current()
        events = self._events(timeline)
        events.mark("start", cur)
        events.host("setup", host0)
        c = ctx.plan.chunks_per_rank
        epoch = ctx.epoch + 1  # this launch's; ctx.begin below, after the copies are on their way, makes it so
        flag = self._epoch_words(ctx, epoch)
        moves = self._moves(ctx, peers)
        cur.wait_stream(self.side)  # the last launch's copies are done
        self.side.wait_stream(cur)  # this launch's copies follow the last kernel

        pending = [g for g in ctx.plan.arrival if g in moves and g not in withhold]

        def arrive():
            """Issue the pending chunk copies, each followed by its flags."""
            take = list(pending)
            pending.clear()
            with eng.using(self.side):
                for g in take:
                    if delay_s:
                        time.sleep(delay_s)
                    dst, src, flags = moves[g]
                    dst.copy_(src, non_blocking=True)
                    flags.copy_(flag[: flags.numel()], non_blocking=True)
                    events.mark(g, self.side)

        # Unpaced, the copies go first: they are the critical path, and this rank's own writes below
        # (epoch, own slot, own flags) concern only the kernel. (Measured on an H200: enqueueing two
        # copies, then the kernel, then the rest left the copy engine idle while the host launched
        # the kernel; the last chunk landed 0.4 ms later.)
        if copies_first is None:
            copies_first = not presignal and not delay_s
        if copies_first and not presignal:
            arrive()
            events.host("copies enqueued", host0)
        ctx.begin(_spin_limit(fk.timeout_s, eng.device_type))  # epoch + 1 -> epoch
        rows, per = ctx.plan.rows_per_rank, ctx.plan.flags_per_rank
        ctx.buffer.narrow(ctx.dim, self.rank * rows, rows).copy_(shard)
        ctx.signals[dev.SIG_HEADER + self.rank * per : dev.SIG_HEADER + (self.rank + 1) * per] = epoch
        if presignal:
            for g, (dst, src, flags) in moves.items():
                dst.copy_(src)
                flags.fill_(epoch)
        if ctx.no_trace is None:
            ctx.no_trace = torch.zeros(1, dtype=torch.int32, device=shard.device)
        dummy = ctx.no_trace
        # Arrivals after the launch: enqueued behind it on a GPU; on the host, from a thread that
        # runs while the interpreted kernel does (its launch returns only when the kernel is done).
        late = None
        if not presignal and pending and not eng.concurrent:
            late = threading.Thread(target=arrive, name="syncopy-loopback", daemon=True)
            late.start()
        events.mark("kernel", cur)
        events.host("own writes", host0)
        try:
            fused[grid](**call, **fk._extra(ctx, order, dummy), **options)
        finally:
            if late is not None:
                late.join()
        events.mark("end", cur)
        events.host("kernel launched", host0)
        if not presignal and pending:
            arrive()
            events.host("copies enqueued", host0)
        if sync:
            eng.synchronize()
            err = ctx.error()
            if err is not None:
                raise SyncopyTimeout(err[0], divmod(ctx.plan.chunk_of_flag(err[1]), c), err[2], fk.timeout_s)
        return ctx

    EPOCH_ROWS = 1024  # launches served by one fill of the pinned epoch table

    def _epoch_words(self, ctx: Context, epoch: int) -> torch.Tensor:
        """A pinned row of `epoch` values, the source of this launch's flag copies. Rows for the next
        EPOCH_ROWS epochs are filled at once, so a launch allocates no pinned memory (a pinned
        allocation can cost the host more than every copy it feeds); refilling waits for the copies
        still reading the old rows."""
        table = getattr(ctx, "_loopback_epochs", None)  # (first epoch, rows); a context's plan never changes
        if table is None or not table[0] <= epoch < table[0] + self.EPOCH_ROWS:
            if table is not None:
                self.side.synchronize()
            widest = max(len(ctx.plan.flags(g)) for g in range(ctx.n_chunks))
            rows = torch.arange(epoch, epoch + self.EPOCH_ROWS, dtype=torch.int32).unsqueeze(1).expand(-1, widest)
            table = (epoch, self.engine.pin(rows.contiguous()))
            ctx._loopback_epochs = table
        return table[1][epoch - table[0]]

    def _events(self, on: bool) -> "_Timeline":
        self.timeline = _Timeline(self.engine) if on else _Timeline.OFF
        return self.timeline

    def timeline_ms(self) -> dict:
        """After a synchronised launch(timeline=True): GPU ms from its start to the kernel's launch
        point, to each chunk's landing (flag raised) and to the kernel's end; and under "host", ms of
        host time from the call to each step (setup, copies enqueued, own writes, kernel launched)."""
        return self.timeline.ms()

    @staticmethod
    def _flags(ctx: Context, g: int) -> slice:
        """Chunk g's flags in the signal pad (one per unit it covers)."""
        f = ctx.plan.flags(g)
        return slice(dev.SIG_HEADER + f.start, dev.SIG_HEADER + f.stop)

    def _moves(self, ctx: Context, peers) -> dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per remote chunk: (its rows in the buffer, the same rows of the peer's pinned shard, its
        flags), views made once per context and peer list (each view costs the host a few us)."""
        cached = getattr(ctx, "_loopback_moves", None)  # (the peer tensors themselves, their moves)
        if cached is not None and len(cached[0]) == len(peers) and all(a is b for a, b in zip(cached[0], peers)):
            return cached[1]
        c, rows = ctx.plan.chunks_per_rank, ctx.plan.rows_per_rank
        moves = {}
        for g in range(ctx.n_chunks):
            src = g // c
            if src == self.rank:
                continue
            lo, hi = ctx.plan.bounds(g)
            moves[g] = (ctx.chunk_view(g), peers[src].narrow(ctx.dim, lo - src * rows, hi - lo), ctx.signals[self._flags(ctx, g)])
        ctx._loopback_moves = (list(peers), moves)
        return moves


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
        if isinstance(start, float):  # host clock (the CPU engine)
            out = {name: (t - start) * 1e3 for name, t in self.events.items() if name != "start"}
        else:
            out = {name: start.elapsed_time(ev) for name, ev in self.events.items() if name != "start"}
        out["host"] = dict(self.host_ms)
        return out


_Timeline.OFF = _Timeline()
