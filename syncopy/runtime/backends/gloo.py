"""The CPU backend: ranks are processes, transfers are gloo point-to-point ops on a dedicated group,
driven by background threads while the fused kernel runs under the Triton interpreter.

    main thread   |--probe--|--------------- fused kernel (spins on flags) ---------------|
    recv thread        post all irecv; as each lands: copy into place, flag = epoch
    send threads       one per peer: wait for a relayed chunk to land, emulate the link, isend

For CPU tensors the interpreter's "host copy" of an argument is the tensor's own storage, so a
spinning program sees a flag the receive thread writes while the kernel runs.
"""
from __future__ import annotations

import random
import sys
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from syncopy.runtime.context import Context
from syncopy.runtime.link import Faults, Link

_groups: dict[tuple, object] = {}


def comm_group(group) -> object:
    """A dedicated gloo group with the ranks of `group`, so our transfers never interleave with the
    user's collectives. Created on first use (collectively, like every launch)."""
    ranks = tuple(dist.get_process_group_ranks(group))
    # Keyed by the user's group object (kept alive in the value so its id is not reused): a group
    # re-created after a timeout gets a fresh transport on every rank, not the broken one.
    key = (id(group), ranks)
    if key not in _groups:
        _groups[key] = (group, dist.new_group(ranks=list(ranks), backend="gloo"))
    return _groups[key][1]


class Transfer:
    """The threads moving one launch's chunks; `join()` waits for them and reports lost chunks."""

    def __init__(self, ctx: Context, group, timeout_s: float, link: Link, faults: Faults, seed: int):
        self.ctx, self.group, self.timeout_s, self.link, self.faults = ctx, group, timeout_s, link, faults
        self.global_ranks = dist.get_process_group_ranks(group)
        self.landed = {g: threading.Event() for g in range(ctx.n_chunks)}
        self.lost: list[int] = []
        self.errors: list[BaseException] = []
        self.rng = random.Random(seed)
        self.threads: list[threading.Thread] = []

    def start(self) -> "Transfer":
        plan = self.ctx.plan
        self.threads.append(threading.Thread(target=self._guard, args=(self._receive,), daemon=True))
        by_peer: dict[int, list] = {}
        for node in plan.sends():
            by_peer.setdefault(node.peer, []).append(node)
        for peer, nodes in by_peer.items():
            self.threads.append(threading.Thread(target=self._guard, args=(self._send, nodes), daemon=True))
        for t in self.threads:
            t.start()
        return self

    def _guard(self, fn, *args):
        try:
            fn(*args)
        except BaseException as exc:  # surfaced by join() on the main thread
            self.errors.append(exc)

    def _receive(self):
        ctx = self.ctx
        pending = []
        for node in ctx.plan.recvs():
            view = ctx.chunk_view(node.chunk)
            target = view if view.is_contiguous() else torch.empty_like(view, memory_format=torch.contiguous_format)
            work = dist.irecv(target, src=self.global_ranks[node.peer], group=self.group, tag=node.chunk)
            pending.append((node, view, target, work))
        # Chunks are awaited in their planned arrival order and flagged as each lands.
        order = {g: k for k, g in enumerate(ctx.plan.arrival)}
        for node, view, target, work in sorted(pending, key=lambda p: order.get(p[0].chunk, 0)):
            try:
                ok = work.wait(timeout=timedelta(seconds=self.timeout_s))
            except RuntimeError:
                ok = False
            if ok is False:
                self.lost.append(node.chunk)
                return
            if target is not view:
                view.copy_(target)
            ctx.land(node.chunk)
            self.landed[node.chunk].set()

    def _send(self, nodes):
        ctx = self.ctx
        c = ctx.plan.chunks_per_rank
        works = []
        for node in nodes:
            for dep in node.after:
                if not self.landed[dep].wait(self.timeout_s):
                    return  # what we relay never came: downstream ranks time out and say so
            src, index = divmod(node.chunk, c)
            if src == ctx.plan.rank and (src, index) in self.faults.drop:
                continue
            view = ctx.chunk_view(node.chunk)
            data = view if view.is_contiguous() else view.contiguous()
            wait = self.link.delay(data.numel() * data.element_size(), self.rng)
            if src == ctx.plan.rank:
                wait += self.faults.extra_delay(src, index)
            if wait > 0:
                threading.Event().wait(wait)
            works.append(dist.isend(data, dst=self.global_ranks[node.peer], group=self.group, tag=node.chunk))
        for w in works:
            w.wait(timeout=timedelta(seconds=self.timeout_s))

    def join(self) -> None:
        for t in self.threads:
            t.join(self.timeout_s * 2 + 5)


class GlooBackend:
    name = "gloo"
    # The interpreter runs programs for x in grid0: for y in grid1: for z in grid2 (z fastest).
    z_fastest = True

    def __init__(self, group, timeout_s: float, link: Link | None, faults: Faults | None):
        self.group = comm_group(group)
        self.timeout_s = timeout_s
        self.link = link or Link()
        self.faults = faults or Faults()
        # A spinning interpreter thread holds the GIL between switches; switch often so the
        # receive thread raises flags promptly.
        if sys.getswitchinterval() > 0.001:
            sys.setswitchinterval(0.001)

    def local(self, ctx: Context, shard: torch.Tensor) -> None:
        """Put this rank's shard in its slot of the gathered buffer and flag its chunks."""
        rank, c, rows = ctx.plan.rank, ctx.plan.chunks_per_rank, ctx.plan.rows_per_rank
        ctx.buffer.narrow(ctx.dim, rank * rows, rows).copy_(shard)
        for i in range(c):
            ctx.land(rank * c + i)

    def start(self, ctx: Context, epoch: int) -> Transfer:
        return Transfer(ctx, self.group, self.timeout_s, self.link, self.faults, seed=epoch * 7919 + ctx.plan.rank).start()
