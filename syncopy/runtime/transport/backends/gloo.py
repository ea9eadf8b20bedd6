"""The CPU backend: ranks are processes, transfers are gloo point-to-point ops on a dedicated group,
driven by background threads while the fused kernel runs under the Triton interpreter.

    main thread   |--probe--|--------------- fused kernel (spins on flags) ---------------|
    recv thread        post all irecv; as each lands: copy into place, flag = epoch
    send threads       one per peer: wait for a relayed chunk to land, emulate the link, isend

For CPU tensors the interpreter's "host copy" of an argument is the tensor's own storage, so a
spinning program sees a flag the receive thread writes while the kernel runs.
"""
from __future__ import annotations

import queue
import random
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from syncopy.runtime.transport.backends import checksum, control
from syncopy.runtime.where import switch_threads_often
from syncopy.runtime.transport.backends.control import control_group, mark_broken, transport_text, wait_bound
from syncopy.runtime.state.context import Context
from syncopy.runtime.transport.reduction import sum_in_rank_order
from syncopy.runtime.transport import link as links
from syncopy.runtime.transport.link import Faults, Link

# The gloo group that carries this backend's transfers is the control group itself (a dedicated
# gloo group with the ranks of the user's group; see control.py).
comm_group = control_group


class _Threads:
    """One launch's transfer threads: a receive thread and one send thread per peer, errors kept for
    `join()` to surface on the main thread."""

    def __init__(self, ctx: Context, group, timeout_s: float, link: Link, faults: Faults, seed: int, verify: bool = False):
        self.ctx, self.group, self.timeout_s, self.link, self.faults = ctx, group, timeout_s, link, faults
        self.verify = verify  # chunks travel with a checksum (checksum.py), checked as they land
        self.words: dict[int, int] = {}  # chunk -> the checksum word it arrived with (passed on by relays)
        self.corrupt: list[tuple[int, int, bool]] = []  # (chunk, peer it came from, upstream: built from a corrupt part)
        self.global_ranks = dist.get_process_group_ranks(group)
        self.errors: list[BaseException] = []
        self.gone: dict[int, str] = {}  # peer -> why its connection failed (it died, its host went away, or it gave up)
        self._dropped: str | None = None  # dropped_out(), once asked
        self.unreceived: list[tuple[int, int]] = []  # (peer, chunk): sends the peer never took in time
        self.rng = random.Random(seed + link.seed * 1_000_003)
        self.start_s = link.start_delay(self.rng)  # this launch's sends leave this much late
        self.threads: list[threading.Thread] = []

    def _lost_peer(self, peer: int, exc: BaseException) -> None:
        """A transport error on the pair with `peer`: kept with gloo's own text, without its source
        path and advice. A timeout is no lost peer: it is raised again, for join() to report."""
        if "imeout" in str(exc) or "imed out" in str(exc):
            raise exc
        self.gone.setdefault(peer, transport_text(exc))
        mark_broken(self.group, f"rank {peer}'s connection closed")
        self._peer_lost()

    def _peer_lost(self) -> None:
        """What else a lost peer ends (Transfer: the kernel's waits)."""

    def _complete(self, works: list) -> None:
        """Wait for this thread's sends, (peer, chunk, work) each; the first failure ends the wait."""
        for peer, chunk, w in works:
            try:
                w.wait(timeout=timedelta(seconds=self.timeout_s))
            except RuntimeError as exc:
                self._send_failed(peer, chunk, exc)
                return

    def _send_failed(self, peer: int, chunk: int, exc: BaseException) -> None:
        """A send to `peer` failed: its connection closed, or it never took the chunk in time (it
        did not launch, or launched another shape). gloo closes the pair either way."""
        try:
            self._lost_peer(peer, exc)
        except RuntimeError:
            self.unreceived.append((peer, chunk))
            self._gave_up(f"rank {peer} did not receive chunk {chunk} in time")

    def tag(self, n: int) -> int:
        """Message tag `n` of this context: its id is agreed by the group and differs between contexts,
        so ranks that launch different shapes (a mistake) never match each other's messages -- a
        timeout that says so, where gloo would abort the process on the size mismatch."""
        return (self.ctx.uid % (1 << 14)) << 16 | n

    def _post(self, target: torch.Tensor, peer: int, tag: int):
        """Post a receive from `peer`; None when its connection has already failed."""
        try:
            return dist.irecv(target, src=self.global_ranks[peer], group=self.group, tag=tag)
        except RuntimeError as exc:
            self._lost_peer(peer, exc)
            return None

    def _gave_up(self, why: str, peer: int | None = None) -> None:
        """A wait of this rank timed out (not a connection `peer` closed): the group is broken, and
        peers that find their connection to this rank closed hear that it gave up (control.gave_up)."""
        mark_broken(self.group, why)
        if peer is None or peer not in self.gone:
            control.gave_up(self.group, f"rank {dist.get_rank(self.group)}: {why}")

    def dropped_out(self) -> str:
        """'rank 2 dropped out (Connection reset by peer)', for error messages; '' if none did. A peer
        whose connection closed because its own wait timed out is alive: it is said to have given up;
        where the store cannot tell (it closed with its host), neither is claimed."""
        if not self.gone:
            return ""
        if getattr(self, "_dropped", None) is None:
            gave_up = control.gave_up_ranks(self.group, sorted(self.gone))
            self._dropped = "; ".join(self._why_gone(p, why, gave_up) for p, why in sorted(self.gone.items()))
        return self._dropped

    @staticmethod
    def _why_gone(peer: int, why: str, gave_up: dict[int, str] | None) -> str:
        if gave_up is None:
            return f"rank {peer} closed its connection ({why}): it died, or gave up waiting on its own timeout (its output says which)"
        if peer in gave_up:
            return f"rank {peer} gave up waiting and closed its connection ({gave_up[peer]} within its timeout)"
        return f"rank {peer} dropped out ({why})"

    def _run(self, sends: list):
        """Start `_receive`, and `_send(steps)` for each peer's sends in plan order."""
        by_peer: dict[int, list] = {}
        for step in sends:
            by_peer.setdefault(step.peer, []).append(step)
        self.threads.append(threading.Thread(target=self._guard, args=(self._receive,), daemon=True))
        for steps in by_peer.values():
            self.threads.append(threading.Thread(target=self._guard, args=(self._send, steps), daemon=True))
        for t in self.threads:
            t.start()
        return self

    def _guard(self, fn, *args):
        try:
            # Grad and inference mode are per thread: run in the launch's (runtime/launch/sequence.py, launch),
            # so that this thread may write the caller's tensors made under torch.inference_mode().
            with torch.inference_mode():
                fn(*args)
        except BaseException as exc:  # surfaced by join() on the main thread
            self.errors.append(exc)

    def _start_late(self) -> None:
        if self.start_s > 0:
            threading.Event().wait(self.start_s)

    def join(self) -> None:
        for t in self.threads:
            t.join(wait_bound(self.timeout_s))

    def _receive_target(self, view: torch.Tensor, staged: bool) -> torch.Tensor:
        """Where a chunk for `view` lands: a message buffer with checksums, a staging copy, or `view`."""
        if self.verify:
            return checksum.receive_buffer(view)
        return torch.empty_like(view, memory_format=torch.contiguous_format) if staged else view

    def _unpack(self, chunk: int, peer: int, target: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The data of a landed chunk (checked and its word kept, with checksums)."""
        if not self.verify:
            return target
        word, ok = checksum.check(target)
        self.words[chunk] = word
        if not ok or word & checksum.TAINTED:
            # Kept for the host to raise; the chunk still lands, so the kernel ends now, not at its timeout.
            self.corrupt.append((chunk, peer, ok))
        return checksum.payload(target, like)

    def _message(self, data: torch.Tensor, word: int | None, own: tuple[int, int] | None) -> torch.Tensor:
        """What goes on the wire for contiguous `data`: its bytes and, with checksums, `word` (None:
        compute it). `own`: (this rank, chunk) as `Faults` names its sends (None for a relay), whose
        bytes a `corrupt` fault flips after the checksum was taken, as a link would."""
        if self.verify and word is None:
            word = checksum.crc(data)
        if own is not None:
            data = self.faults.corrupted(*own, data)
        return checksum.pack(data, word) if self.verify else data


class Transfer(_Threads):
    """The threads moving one launch's chunks; `join()` waits for them and reports lost chunks."""

    def __init__(self, ctx: Context, group, timeout_s: float, link: Link, faults: Faults, seed: int, verify: bool = False):
        super().__init__(ctx, group, timeout_s, link, faults, seed, verify)
        self.landed = {g: threading.Event() for g in range(ctx.n_chunks)}
        self.lost: list[int] = []

    def _peer_lost(self) -> None:
        """A peer's connection closed: this launch cannot complete (what it would send or relay never
        comes), so the kernel's waits stop now (Context.abort_waits), naming the first chunk missing,
        instead of running out their timeout."""
        missing = self.ctx.first_missing(prefer=set(self.gone))
        if missing is not None:
            self.ctx.abort_waits(missing)

    def start(self) -> "Transfer":
        return self._run(self.ctx.transfers("send"))  # in the instruction graph's order (runtime/state/instructions.py)

    def _receive(self):
        ctx = self.ctx
        pending = []
        for node in ctx.transfers("recv"):
            view = ctx.chunk_view(node.chunk)
            like = ctx.packed_like(node.chunk) if ctx.extras else view  # several listed tensors: one byte string
            target = self._receive_target(like, bool(ctx.extras) or self.link.reorder or self.link.hold_until_waited
                                          or not view.is_contiguous())
            work = self._post(target, node.peer, self.tag(node.chunk))
            pending.append((node, view, target, work))
        # Chunks are awaited in their planned arrival order and flagged as each lands.
        order = {g: k for k, g in enumerate(ctx.plan.arrival)}
        pending.sort(key=lambda p: order.get(p[0].chunk, 0))
        if self.link.hold_until_waited:
            self._land_when_waited(pending)
            return
        if self.link.reorder:
            self._land_shuffled(pending)
            return
        for node, view, target, work in pending:
            if not self._arrived(node, work):
                return
            self._place(node.chunk, view, target, node.peer)

    def _arrived(self, node, work) -> bool:
        """Wait for one posted receive; False (the chunk recorded as lost) if it never came."""
        if work is None:  # its sender was gone before the launch could post the receive
            self.lost.append(node.chunk)
            self.ctx.abort_waits(node.chunk)
            return False
        try:
            ok = work.wait(timeout=timedelta(seconds=self.timeout_s))
        except RuntimeError as exc:  # a timeout, or the sender's connection closed
            try:
                self._lost_peer(node.peer, exc)
            except RuntimeError:
                pass  # a timeout: the chunk is lost below, as before
            ok = False
        if ok is False:
            self.lost.append(node.chunk)
            self._gave_up(f"chunk {node.chunk} never arrived", node.peer)  # gloo closed the pair that timed out
            return False
        return True

    def _place(self, chunk: int, view: torch.Tensor, target: torch.Tensor, peer: int) -> None:
        extras = self.ctx.extras
        data = self._unpack(chunk, peer, target, self.ctx.packed_like(chunk) if extras else view)
        if extras:
            self.ctx.unpack(chunk, data)
        elif data is not view:
            view.copy_(data)
        self.ctx.land(chunk)
        self.landed[chunk].set()

    def _land_shuffled(self, pending: list) -> None:
        """Link.reorder: chunks land one at a time, each a link delay after the one before on this
        rank's own clock (so even a rank that launches late finds its chunks arriving, not there),
        each picked at random among those that have arrived. A chunk is only held while others
        arrive, so a relay that waits on it is late, never stuck. (gloo's receive works say they
        are complete only once waited on: one waiter thread each tells when its chunk came.)"""
        came: queue.Queue = queue.Queue()
        for p in pending:
            threading.Thread(target=lambda p=p: came.put((p, self._arrived(p[0], p[3]))), daemon=True).start()
        held: list = []
        left = len(pending)
        while left or held:
            if not held:
                (node, view, target, _), ok = came.get()
                left -= 1
                if not ok:
                    return
                held.append((node.chunk, view, target, node.peer))
            threading.Event().wait(self.link.delay(held[0][2].numel() * held[0][2].element_size(), self.rng))
            while left:
                try:
                    (node, view, target, _), ok = came.get_nowait()
                except queue.Empty:
                    break
                left -= 1
                if not ok:
                    return
                held.append((node.chunk, view, target, node.peer))
            self._place(*held.pop(self.rng.randrange(len(held))))

    def _land_when_waited(self, pending: list) -> None:
        """Link.hold_until_waited (link.Hold): each arrived chunk stays out of the receive buffer,
        its flag down, until a program of the kernel was seen polling its flag in this launch (or
        for link.hold_s at most); records which chunks were waited for and which were not."""
        came: queue.Queue = queue.Queue()
        for p in pending:
            threading.Thread(target=lambda p=p: came.put((p, self._arrived(p[0], p[3]))), daemon=True).start()
        ctx, word = self.ctx, self.ctx.word
        record = {"epoch": ctx.epoch, "waited": [], "unwaited": []}
        links.Hold.records.append(record)
        held: list = []  # (chunk, peer, view, target, flag addresses, arrival time)
        left = len(pending)
        while left or held:
            try:
                (node, view, target, _), ok = came.get(timeout=0.001)
                left -= 1
                if not ok:
                    return
                flags = [ctx.flag_address(f) for f in ctx.plan.flags(node.chunk)]
                held.append((node.chunk, node.peer, view, target, flags, time.monotonic()))
            except queue.Empty:
                pass
            for item in list(held):
                chunk, peer, view, target, flags, since = item
                waited = links.Hold.polled(flags, word)
                if waited or time.monotonic() - since > self.link.hold_s:
                    held.remove(item)
                    record["waited" if waited else "unwaited"].append(chunk)
                    self._place(chunk, view, target, peer)
                    links.Hold.forget(flags, word)

    def _send(self, nodes):
        ctx = self.ctx
        c = ctx.plan.chunks_per_rank
        works = []
        self._start_late()
        for node in nodes:
            for dep in node.after:
                if not self.landed[dep].wait(self.timeout_s):
                    return  # what we relay never came: downstream ranks time out and say so
            src, index = divmod(node.chunk, c)
            if src == ctx.plan.rank:
                self.faults.die_if_killed(src, index)
                if (src, index) in self.faults.drop:
                    continue
            view = ctx.send_view(node.chunk, node.peer) if not ctx.extras else ctx.packed(node.chunk)
            data = view if view.is_contiguous() else view.contiguous()
            # A relay passes on the checksum its chunk came with: a first hop's corruption fails every check.
            own = src == ctx.plan.rank
            data = self._message(data, None if own else self.words.get(node.chunk), (src, index) if own else None)
            began = time.perf_counter() - ctx.t0
            wait = self.link.delay(data.numel() * data.element_size(), self.rng)
            if src == ctx.plan.rank:
                wait += self.faults.extra_delay(src, index)
            if wait > 0:
                threading.Event().wait(wait)
            try:
                works.append((node.peer, node.chunk, dist.isend(data, dst=self.global_ranks[node.peer], group=self.group,
                                                                tag=self.tag(node.chunk))))
            except RuntimeError as exc:
                self._send_failed(node.peer, node.chunk, exc)
                return
            if ctx.trace is not None:
                ctx.trace.sends[(node.chunk, node.peer)] = (began, time.perf_counter() - ctx.t0)
        self._complete(works)


class ReduceTransfer(_Threads):
    """The threads of one reduce_scatter / all_reduce launch: as the kernel raises each chunk's flag,
    send this rank's partial (or running sum) of it; receive and add the peers' partials; put reduced
    chunks in the output (and, for all_reduce, pass them on).

    main thread   |--------------- fused kernel: tiles store, count, raise flags ---------------|
    send threads     one per peer: poll the flag of the next chunk in the plan, send it
    recv thread      post every irecv; as partials land: add (rank order), write the output
    """

    POLL_S = 2e-4

    def __init__(self, ctx: Context, out: torch.Tensor, group, timeout_s: float, link: Link, faults: Faults, seed: int,
                 verify: bool = False):
        super().__init__(ctx, group, timeout_s, link, faults, seed, verify)
        self.out = out
        n = ctx.n_chunks
        self.sums: dict[int, torch.Tensor] = {}
        self.summed = {g: threading.Event() for g in range(n)}
        self.final = {g: threading.Event() for g in range(n)}
        self.lost: list[tuple[int, int]] = []  # (chunk, peer whose data never came)
        self.reduced_here = set(ctx.plan.reduced_here)
        self.tainted: set[int] = set()  # chunks with a part that failed its checksum (what we pass on is tainted)

    def out_view(self, chunk: int) -> torch.Tensor:
        plan = self.ctx.plan
        lo, hi = plan.bounds(chunk)
        start = lo - plan.rank * plan.rows_per_rank if plan.pattern == "reduce_scatter" else lo
        return self.out.narrow(self.ctx.dim, start, hi - lo)

    def start(self) -> "ReduceTransfer":
        return self._run(self.ctx.transfers("send"))  # in the instruction graph's order (runtime/state/instructions.py)

    def _tag(self, step) -> int:
        # Unique per (sender, receiver, chunk, half) in one launch: a chunk crosses a link at most
        # once while being reduced and once more as a final value.
        return self.tag(2 * step.chunk + (step.value == "final"))

    def _wait_ready(self, chunk: int) -> None:
        ctx = self.ctx
        deadline = time.monotonic() + self.timeout_s
        while not ctx.ready(chunk):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the kernel never finished chunk {chunk} (rows {ctx.plan.bounds(chunk)}) in {self.timeout_s:g}s")
            time.sleep(self.POLL_S)
        if ctx.trace is not None and chunk not in ctx.trace.ready:
            ctx.trace.ready[chunk] = time.perf_counter() - ctx.t0

    def _word(self, step, data: torch.Tensor) -> int | None:
        """The checksum word of a send (None: none is sent). A final value received is passed on with
        its word; what this rank computed gets a new CRC, tainted if a part of it failed its check."""
        if not self.verify:
            return None
        if step.value == "final" and step.chunk in self.words and step.chunk not in self.reduced_here:
            return self.words[step.chunk]
        return checksum.crc(data) | (checksum.TAINTED if step.chunk in self.tainted else 0)

    def _receive(self):
        ctx, plan = self.ctx, self.ctx.plan
        pending = []
        for step in ctx.transfers("reduce", "recv"):
            view = ctx.chunk_view(step.chunk) if step.kind == "reduce" else self.out_view(step.chunk)
            target = self._receive_target(view, staged=True)
            work = self._post(target, step.peer, self._tag(step))
            pending.append((step, view, target, work))
        parts: dict[int, list] = {}
        for step, view, target, work in pending:
            if work is None:  # its sender was gone before the launch could post the receive
                self.lost.append((step.chunk, step.peer))
                return
            try:
                ok = work.wait(timeout=timedelta(seconds=self.timeout_s))
            except RuntimeError as exc:  # a timeout, or the sender's connection closed
                try:
                    self._lost_peer(step.peer, exc)
                except RuntimeError:
                    pass
                ok = False
            if ok is False:
                self.lost.append((step.chunk, step.peer))
                self._gave_up(f"chunk {step.chunk} never arrived", step.peer)
                return
            found = len(self.corrupt)
            target = self._unpack(step.chunk, step.peer, target, view)
            if len(self.corrupt) > found:
                self.tainted.add(step.chunk)
            if step.kind == "recv":
                self.out_view(step.chunk).copy_(target)
                self._landed(step.chunk)
                continue
            parts.setdefault(step.chunk, []).append((step.peer, target))
            if len(parts[step.chunk]) == plan.contributions(step.chunk):
                self._reduce(step.chunk, parts.pop(step.chunk))

    def _reduce(self, chunk: int, parts: list) -> None:
        """This rank's partial plus the received ones, added in rank order (so every rank that
        reduces a chunk gets bit-identical results)."""
        self._wait_ready(chunk)
        if self.link.record_taken:
            links.Taken.note(self.ctx.epoch, chunk, self.ctx.chunk_view(chunk).clone(), self.ctx.chunk_view(chunk))
        terms = sorted([(self.ctx.plan.rank, self.ctx.chunk_view(chunk)), *parts], key=lambda p: p[0])
        acc = sum_in_rank_order((t for _, t in terms), terms[0][1].dtype).to(terms[0][1].dtype)
        self.sums[chunk] = acc
        self.summed[chunk].set()
        if chunk in self.reduced_here:
            self.out_view(chunk).copy_(acc)
            self._landed(chunk)

    def _landed(self, chunk: int) -> None:
        ctx = self.ctx
        if ctx.trace is not None:
            ctx.trace.arrivals[chunk] = time.perf_counter() - ctx.t0
        self.final[chunk].set()

    def _send(self, steps):
        ctx = self.ctx
        works = []
        self._start_late()
        for step in steps:
            g = step.chunk
            if step.value == "partial":
                self._wait_ready(g)
                # Its rows as they are when its flag rises, as a GPU's copy engine reads them then:
                # taken after the link's delay instead, a chunk announced before its last store would
                # leave complete, and an early announcement would go unseen.
                data = ctx.chunk_view(g).clone(memory_format=torch.contiguous_format)
                if self.link.record_taken:
                    links.Taken.note(ctx.epoch, g, data, ctx.chunk_view(g))
            else:
                event = self.summed[g] if step.value == "sum" else self.final[g]
                if not event.wait(self.timeout_s):
                    return  # what we pass on never came: the receive side reports it
                data = self.sums[g] if step.value == "sum" else self.out_view(g)
            self.faults.die_if_killed(ctx.plan.rank, g)  # as with drop, (rank, chunk) names a send of this rank
            if (ctx.plan.rank, g) in self.faults.drop:
                continue
            data = data if data.is_contiguous() else data.contiguous()
            data = self._message(data, self._word(step, data), (ctx.plan.rank, g))
            began = time.perf_counter() - ctx.t0
            wait = self.link.delay(data.numel() * data.element_size(), self.rng) + self.faults.extra_delay(ctx.plan.rank, g)
            if wait > 0:
                threading.Event().wait(wait)
            try:
                works.append((step.peer, g, dist.isend(data, dst=self.global_ranks[step.peer], group=self.group, tag=self._tag(step))))
            except RuntimeError as exc:
                self._send_failed(step.peer, g, exc)
                return
            if step.value == "partial":
                ctx.count_sent()
            if ctx.trace is not None:
                handed = time.perf_counter() - ctx.t0
                ctx.trace.sent.setdefault(g, handed)
                ctx.trace.sends[(g, step.peer)] = (began, handed)
        self._complete(works)


class GlooBackend:
    name = "gloo"
    # The interpreter runs programs for x in grid0: for y in grid1: for z in grid2 (z fastest).
    z_fastest = True

    #: Chunks travel with a CRC-32, checked as they land (verify_chunks=True; set by the launch's context).
    verify_chunks = False

    def __init__(self, group, timeout_s: float, link: Link | None, faults: Faults | None):
        self.group = comm_group(group, timeout_s)
        self.timeout_s = timeout_s
        self.link = link or links.default
        self.faults = faults or Faults()
        switch_threads_often()  # the receive threads raise flags beside a spinning interpreted kernel

    def check_grid(self, programs: int, persistent: bool, kernel: str, device, ctas_per_program: int = 1) -> None:
        """Every grid runs here: the interpreter runs programs one after another."""

    def local(self, ctx: Context, shard: torch.Tensor) -> None:
        """Put this rank's shard in its slot of the gathered buffer and flag its chunks."""
        rank, c = ctx.plan.rank, ctx.plan.chunks_per_rank
        # all_to_all: our input's block `rank` is ours to keep; all_gather: the whole shard.
        mine = ctx.own_block(shard) if ctx.source is not None else shard
        ctx.place_local(mine)
        for i in range(c):
            ctx.land(rank * c + i)
        # Uneven splits: a peer's empty chunks never travel; their flags rise now (a tile whose rows
        # span them waits for them too).
        if ctx.plan.uneven:
            for g in range(ctx.n_chunks):
                if g // c != rank and ctx.plan.empty(g):
                    ctx.land(g)

    def start_reduce(self, ctx: Context, out: torch.Tensor, epoch: int) -> ReduceTransfer:
        """Producer patterns: reduce the kernel's partials into `out` as chunks are finished."""
        return ReduceTransfer(ctx, out, self.group, self.timeout_s, self.link, self.faults, seed=epoch * 7919 + ctx.plan.rank,
                              verify=self.verify_chunks).start()

    def start(self, ctx: Context, epoch: int) -> Transfer:
        return Transfer(ctx, self.group, self.timeout_s, self.link, self.faults, seed=epoch * 7919 + ctx.plan.rank,
                        verify=self.verify_chunks).start()
