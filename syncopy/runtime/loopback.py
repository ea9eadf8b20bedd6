"""One-GPU loopback world: one device plays rank `rank` of a `world`-rank all-gather.

Peers' shards live in pinned host memory and "arrive" by copy-engine copies on a side stream; each
chunk's flag is raised by a second copy (of the epoch, from pinned memory) on the same stream, so
stream order puts the data before the flag and communication uses no SMs:

    compute stream  |== fused kernel: tiles spin on flags, compute as chunks land ==|
    side stream        [chunk 0][flag 0]  (host waits delay_s)  [chunk 1][flag 1] ...

Host-side pacing (`delay_s` between chunks) emulates a slower link without occupying an SM.
"""
from __future__ import annotations

import time

import torch

from syncopy import device as dev
from syncopy.api import FusedKernel, _ensure_allocator, _spin_limit
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime import plan as planning
from syncopy.runtime.context import Context


class LoopbackWorld:
    """Drive a FusedKernel on one GPU with emulated peers (see module docstring)."""

    def __init__(self, fused: FusedKernel, world: int, rank: int = 0):
        if not torch.cuda.is_available():
            raise LaunchError("the loopback world needs a CUDA device")
        self.fk, self.world, self.rank = fused, world, rank
        self.side = torch.cuda.Stream(priority=-1)
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
               presignal: bool = False, sync: bool = True, withhold: frozenset = frozenset()) -> Context:
        """Launch the fused kernel with `peers[r]` (pinned host shards, None for this rank) arriving."""
        fk = self.fk
        fk.build()
        _, fused, _, _ = fk._built
        bound, shard, options = fk._bind(args, dict(kwargs))
        _ensure_allocator(shard.device)
        ctx = self._context(shard, bound)
        call = dict(bound)
        call[fk.schedule.tensor] = ctx.buffer
        order, _, _ = fk._order(ctx, grid, call, None)
        epoch = ctx.begin(_spin_limit(fk.timeout_s, "cuda"))
        c = ctx.plan.chunks_per_rank
        rows = ctx.plan.rows_per_rank
        ctx.buffer.narrow(ctx.dim, self.rank * rows, rows).copy_(shard)
        widest = max(len(ctx.plan.flags(g)) for g in range(ctx.n_chunks))
        flag = torch.full((widest,), epoch, dtype=torch.int32).pin_memory()
        remote = [g for g in range(ctx.n_chunks) if g // c != self.rank]
        for g in range(self.rank * c, (self.rank + 1) * c):
            ctx.signals[self._flags(ctx, g)] = epoch
        if presignal:
            for g in remote:
                self._copy_chunk(ctx, peers, g, c)
                ctx.signals[self._flags(ctx, g)] = epoch
        torch.cuda.current_stream().wait_stream(self.side)
        dummy = torch.zeros(1, dtype=torch.int32, device=shard.device)
        fused[grid](**call, **fk._extra(ctx, order, dummy), **options)
        if not presignal:
            with torch.cuda.stream(self.side):
                for g in ctx.plan.arrival:
                    if g in withhold:
                        continue
                    if delay_s:
                        time.sleep(delay_s)
                    self._copy_chunk(ctx, peers, g, c)
                    flags = self._flags(ctx, g)
                    ctx.signals[flags].copy_(flag[: flags.stop - flags.start], non_blocking=True)
        if sync:
            torch.cuda.synchronize()
            err = ctx.error()
            if err is not None:
                raise SyncopyTimeout(err[0], divmod(ctx.plan.chunk_of_flag(err[1]), c), err[2], fk.timeout_s)
        ctx._keep = flag  # pinned source must outlive the async copy
        return ctx

    @staticmethod
    def _flags(ctx: Context, g: int) -> slice:
        """Chunk g's flags in the signal pad (one per unit it covers)."""
        f = ctx.plan.flags(g)
        return slice(dev.SIG_HEADER + f.start, dev.SIG_HEADER + f.stop)

    @staticmethod
    def _copy_chunk(ctx: Context, peers, g: int, c: int) -> None:
        src, _ = divmod(g, c)
        lo, hi = ctx.plan.bounds(g)
        base = src * ctx.plan.rows_per_rank
        ctx.buffer.narrow(ctx.dim, lo, hi - lo).copy_(peers[src].narrow(ctx.dim, lo - base, hi - lo), non_blocking=True)
