"""One-GPU loopback world: one device plays rank `rank` of a `world`-rank all-gather.

Peers' shards live in pinned host memory and "arrive" by copy-engine copies on a side stream; each
chunk's flag is raised by a second copy (of the epoch, from pinned memory) on the same stream, so
stream order puts the data before the flag and communication uses no SMs:

    compute stream  [own rows, own flags][== fused kernel: tiles spin on flags, compute as chunks land ==]
    side stream                          [chunk 0][flag 0]  (host waits delay_s)  [chunk 1][flag 1] ...

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
from syncopy.runtime.backends.p2p import Inline, put_own_shard
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


class _Host(_Cuda):
    """The same launch between CPU tensors under the Triton interpreter, for tests."""

    device_type = "cpu"
    concurrent = False  # an interpreted launch returns when the kernel is done

    def stream(self):
        return Inline()

    current = stream

    def using(self, stream):
        return contextlib.nullcontext()

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def event(self, stream):
        return time.perf_counter()

    def synchronize(self) -> None:
        pass


class _Loop:
    """What the loopback world keeps per context: the context, its chunk moves (views made once per
    peer list) and its pinned epoch table."""

    def __init__(self, ctx: Context, shard_shape: tuple[int, ...]):
        self.ctx, self.shard_shape = ctx, shard_shape
        self.peers: list | None = None  # the peer tensors the moves were made from (compared by identity)
        self.moves: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.epochs: tuple[int, torch.Tensor] | None = None  # (first epoch, pinned rows)


class LoopbackWorld:
    """Drive a FusedKernel on one GPU with emulated peers (see module docstring)."""

    COPIES = ("before", "after", "beside")

    def __init__(self, fused: FusedKernel, world: int, rank: int = 0, device: str = "cuda"):
        if device == "cuda" and not torch.cuda.is_available():
            raise LaunchError("the loopback world needs a CUDA device (or device='cpu' under the Triton interpreter)")
        self.fk, self.world, self.rank = fused, world, rank
        self.engine = _Cuda() if device == "cuda" else _Host()
        self.side = self.engine.stream()
        self.loops: dict[tuple, _Loop] = {}

    @property
    def contexts(self) -> dict[tuple, Context]:
        """The contexts made so far, by (shard shape, dtype)."""
        return {key: loop.ctx for key, loop in self.loops.items()}

    def _loop(self, shard: torch.Tensor, args: dict) -> _Loop:
        key = (tuple(shard.shape), shard.dtype)
        if key not in self.loops:
            # One process plays every rank here: the planner's choice needs no exchange.
            choice = self.fk._resolve(shard, self.world, args) if self.fk.schedule.planned else None
            self.loops[key] = _Loop(self.fk._make_context(shard, self.rank, self.world, choice), key[0])
        return self.loops[key]

    def launch(self, grid, args: tuple, kwargs: dict, peers: list[torch.Tensor], delay_s: float = 0.0,
               presignal: bool = False, sync: bool = True, withhold: frozenset = frozenset(), timeline: bool = False,
               copies: str | None = None) -> Context:
        """Launch the fused kernel with `peers[r]` (pinned host shards, None for this rank) arriving.

        copies: when the host issues the chunk copies, against the kernel's launch --
          "before": all enqueued, then the kernel (the default unpaced: a real peer's pushes start
                    independently of this rank's launch, and the copies are the critical path);
          "after":  the kernel, then the copies (the default with `delay_s`, which paces them);
          "beside": from a host thread started just before the kernel's launch, so that neither
                    waits for the other's host time.
        This rank's own writes (epoch, own rows, own flags) always go first: they are all the
        kernel needs to start, and on a GPU its own-rows copy would otherwise queue behind the
        chunk copies on the copy engine.
        timeline: record events (CUDA events on a GPU: start, kernel launch, each chunk landed,
        end) and host times for `timeline_ms()`.
        """
        host0 = time.perf_counter()
        fk = self.fk
        fk.build()
        _, fused, _, _ = fk._built
        bound, shard, options = fk._bind(args, dict(kwargs))
        _ensure_allocator(shard.device)
        loop = self._loop(shard, bound)
        ctx = loop.ctx
        call = dict(bound)
        call[fk.schedule.tensor] = ctx.buffer
        order, _, _ = fk._order(ctx, grid, call, None)
        if copies is None:
            copies = "after" if presignal or delay_s else "before"
        if copies not in self.COPIES:
            raise ValueError(f"copies={copies!r}: expected one of {', '.join(self.COPIES)}")
        moves = self._moves(loop, peers)
        eng = self.engine
        cur = eng.current()
        events = self._events(timeline)
        events.mark("start", cur)
        events.host("setup", host0)
        c = ctx.plan.chunks_per_rank
        cur.wait_stream(self.side)  # the last launch's copies are done
        self.side.wait_stream(cur)  # this launch's copies follow the last kernel (not this launch's own writes)

        epoch = ctx.begin(_spin_limit(fk.timeout_s, eng.device_type))
        put_own_shard(ctx, shard)
        flag = self._epoch_words(loop, epoch)
        if presignal:
            for g, (dst, src, flags) in moves.items():
                dst.copy_(src)
                flags.fill_(epoch)
        events.host("own writes", host0)

        pending = [] if presignal else [g for g in ctx.plan.arrival if g in moves and g not in withhold]
        failed: list[BaseException] = []

        def arrive():
            """Issue the pending chunk copies, each followed by its flags."""
            take = list(pending)
            pending.clear()
            try:
                with eng.using(self.side):
                    for g in take:
                        if delay_s:
                            time.sleep(delay_s)
                        dst, src, flags = moves[g]
                        dst.copy_(src, non_blocking=True)
                        flags.copy_(flag[: flags.numel()], non_blocking=True)
                        events.mark(g, self.side)
                events.host("copies enqueued", host0)
            except BaseException as exc:  # surfaced by the launching thread
                failed.append(exc)

        if copies == "before":
            arrive()
        # A thread issues the copies beside the launch; on the host engine also "after", since an
        # interpreted launch returns only when the kernel is done.
        beside = None
        if pending and (copies == "beside" or (copies == "after" and not eng.concurrent)):
            beside = threading.Thread(target=arrive, name="syncopy-loopback", daemon=True)
            beside.start()
        events.mark("kernel", cur)
        try:
            fused[grid](**call, **fk._extra(ctx, order, ctx.no_trace), **options)
        finally:
            if beside is not None:
                beside.join()
        events.mark("end", cur)
        events.host("kernel launched", host0)
        if pending:
            arrive()
        if failed:
            raise failed[0]
        if sync:
            eng.synchronize()
            err = ctx.error()
            if err is not None:
                raise SyncopyTimeout(err[0], divmod(ctx.plan.chunk_of_flag(err[1]), c), err[2], fk.timeout_s)
        return ctx

    EPOCH_ROWS = 1024  # launches served by one fill of the pinned epoch table

    def _epoch_words(self, loop: _Loop, epoch: int) -> torch.Tensor:
        """A pinned row of `epoch` values, the source of this launch's flag copies. Rows for the next
        EPOCH_ROWS epochs are filled at once, so a launch allocates no pinned memory (a pinned
        allocation can cost the host more than every copy it feeds); refilling waits for the copies
        still reading the old rows."""
        table = loop.epochs
        if table is None or not table[0] <= epoch < table[0] + self.EPOCH_ROWS:
            if table is not None:
                self.side.synchronize()
            rows = torch.arange(epoch, epoch + self.EPOCH_ROWS, dtype=torch.int32).unsqueeze(1).expand(-1, loop.ctx.plan.widest_chunk)
            table = loop.epochs = (epoch, self.engine.pin(rows.contiguous()))
        return table[1][epoch - table[0]]

    def _events(self, on: bool) -> "_Timeline":
        self.timeline = _Timeline(self.engine) if on else _Timeline.OFF
        return self.timeline

    def timeline_ms(self) -> dict:
        """After a synchronised launch(timeline=True): GPU ms from its start to the kernel's launch
        point, to each chunk's landing (flag raised) and to the kernel's end; and under "host", ms of
        host time from the call to each step (setup, own writes, copies enqueued, kernel launched),
        in the order they happened."""
        return self.timeline.ms()

    @staticmethod
    def _flags(ctx: Context, g: int) -> slice:
        """Chunk g's flags in the signal pad (one per unit it covers)."""
        f = ctx.plan.flags(g)
        return slice(dev.SIG_HEADER + f.start, dev.SIG_HEADER + f.stop)

    def _moves(self, loop: _Loop, peers) -> dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per remote chunk: (its rows in the buffer, the same rows of the peer's pinned shard, its
        flags), views made once per context and peer list (each view costs the host a few us)."""
        if loop.peers is not None and len(loop.peers) == len(peers) and all(a is b for a, b in zip(loop.peers, peers)):
            return loop.moves
        ctx = loop.ctx
        c, rows = ctx.plan.chunks_per_rank, ctx.plan.rows_per_rank
        if len(peers) != self.world:
            raise LaunchError(f"the loopback world has {self.world} ranks but got {len(peers)} peer shards; pass one per rank (any value for rank {self.rank})")
        for r, t in enumerate(peers):
            if r != self.rank and (t is None or tuple(t.shape) != loop.shard_shape):
                got = "None" if t is None else tuple(t.shape)
                raise LaunchError(f"peer shard {r} has shape {got}; every peer's shard must have this rank's shard shape {loop.shard_shape}")
        moves = {}
        for g in range(ctx.n_chunks):
            src = g // c
            if src == self.rank:
                continue
            lo, hi = ctx.plan.bounds(g)
            moves[g] = (ctx.chunk_view(g), peers[src].narrow(ctx.dim, lo - src * rows, hi - lo), ctx.signals[self._flags(ctx, g)])
        loop.peers, loop.moves = list(peers), moves
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
