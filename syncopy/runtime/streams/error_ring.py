"""Errors of launches that returned before their kernel ran: read once the kernel is done, off the
launch path (after ProcessGroupNCCL's work objects: a collective enqueues and returns, its failure
surfaces later, never lost).

    host            make_room()   [kernel e enqueued]   record(e): slot = next slot of this ring
    compute stream  [== fused kernel e ==][copy error words -> pinned ring[slot]][event slot]
    host            launch e returns ... next launch / synchronize(): for each event that completed,
                                          oldest first: read its ring slot, raise SyncopyTimeout

The kernel leaves (flag, rank, unit, epoch) in its error words when a wait ran out; the copy
behind it lands in pinned host memory, which the host reads with no CUDA call once the launch's
event is done (cuEventQuery never blocks).

Slots come from the ring's own counter, one per recorded launch, not from the epoch: a ring need
not see every epoch (two receive buffers each see every other one, a pipeline's link only its own
launches), and `epoch % RING` would then use part of the ring and overwrite a launch's words before
they were read. At most RING launches are pending, so the slot a record takes is free.

Room is made before the launch's kernel is enqueued (`make_room`): a launch that finds RING
launches pending waits for the oldest one (that only happens when the host runs RING launches
ahead of the device), and if that one failed it raises then, before anything of this launch is on
the stream. Raised after the kernel instead, the current launch's words would never be copied.
`record` only records: no room is a bug in syncopy's order of calls, never a silent overwrite.

A wait for a launch is bounded (`check(wait=True)`, `make_room`): the kernel's own waits give up
after timeout_s, so a launch that is still not done a `wait_bound` later (control.wait_bound's
rule) never will be, and raises a LaunchError naming it instead of blocking the host for good.

A failed launch's context is not trusted after it: the launches still pending behind it are dropped
unread, and the error says so; an operator's context (LaunchErrors) is marked broken, so that the
operator refuses its later launches saying why (contexts.refuse_broken_context).

A user who launches and then only reads the result (never launching that operator again nor
calling synchronize()) would not hear of the failure: the watchdog thread (runtime/streams/watchdog.py)
looks at every ring's done launches and says so on stderr, or ends the process.
"""
from __future__ import annotations

import collections
import threading
import time

import torch

from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyError, SyncopyTimeout
from syncopy.runtime.streams import streamops
from syncopy.runtime.streams.streamops import ptr


def wait_bound(timeout_s: float | None) -> float:
    """How long a host-side wait may take: for one launch to be done here, and (control.py, which takes
    it from this lower layer) for the other ranks (group creation, the first launch's handshake, the
    launch barriers, joining the transfers): about as long as a launch's bounded waits and transfers
    may take, and never forever."""
    return max(5.0, 2 * timeout_s + 5) if timeout_s is not None else 60.0


class ErrorRing:
    """Error words copied behind launches into a pinned ring, and read once each copy is done (see
    the module doc); `failed(words, epoch)` raises for a launch whose words say it failed."""

    RING = 64
    timeout_s: float | None = None  # the kernel's waits give up after it: a launch's wait is bounded by wait_bound(timeout_s)
    refuses = False  # does the ring's owner refuse later launches once one failed (what the error says of them)

    def __init__(self, ops, pin, words: int):
        self.ops, self.words = ops, words  # `words`: the address of the device's error words
        self.ring = pin(torch.zeros(self.RING, dev.SIG_HEADER, dtype=torch.int32))
        # Made once: each slot's address (for the copy) and a NumPy view of it (read with no torch
        # call: a tensor index and .tolist() per launch cost microseconds on the launch path).
        self.slots = [ptr(self.ring[i]) for i in range(self.RING)]
        self.rows = self.ring.numpy()
        self.done = [ops.event() for _ in range(self.RING)]  # per slot: the launch and its error copy are done
        self._free = streamops.free_with(self, ops, self.done)
        self._next = 0  # launches recorded so far: the next one's slot is _next % RING
        self.pending: collections.deque[tuple[int, int]] = collections.deque()  # (epoch, slot), oldest first
        self.lock = threading.Lock()  # `pending`, between the launching thread and the watchdog's
        from syncopy.runtime.streams import watchdog

        watchdog.watch(self)

    def close(self) -> None:
        """Let the ring go (its context is evicted or released, its launches read): the watchdog stops
        looking at it and its events are freed. Launches still unread are dropped unread."""
        from syncopy.runtime.streams import watchdog

        watchdog.unwatch(self)
        with self.lock:
            self.pending.clear()
        self._free()  # empties self.done

    def make_room(self) -> None:
        """Before a launch's kernel is enqueued: if RING launches are pending, wait (bounded) for the
        oldest and raise its failure, if it failed; after this `record` has a free slot."""
        over = len(self.pending) - self.RING + 1
        if over > 0:
            self.check(wait=True, upto=over)

    def record(self, epoch: int, stream) -> None:
        """Behind the launch's kernel on `stream` (a handle of `ops`): its error words to the ring's
        next slot. `make_room` was called before the kernel."""
        if len(self.pending) >= self.RING:
            raise LaunchError(f"launch {epoch} found its error ring full ({self.RING} launches unread): syncopy's internal order "
                              "was broken (room is made before a launch's kernel, ErrorRing.make_room); please report this as an issue")
        slot = self._next % self.RING
        self._next += 1
        self.ops.copy(self.slots[slot], self.words, 4 * dev.SIG_HEADER, stream)
        self.ops.record(self.done[slot], stream)
        with self.lock:
            self.pending.append((epoch, slot))

    def check(self, wait: bool = False, upto: int | None = None, bound_s: float | None = None) -> None:
        """Read the error words of the launches that are done (with `wait`: all of them, or the
        oldest `upto`), oldest first; raise the first failure. With `wait`, each launch is waited for
        at most `bound_s` (default: wait_bound(timeout_s)) once it is the oldest: past that it never
        finished, a LaunchError naming it."""
        checked = 0
        while self.pending and (upto is None or checked < upto):
            epoch, slot = self.pending[0]
            if not self.ops.done(self.done[slot]):
                if not wait:
                    return
                self._wait(epoch, slot, wait_bound(self.timeout_s) if bound_s is None else bound_s)
            with self.lock:
                self.pending.popleft()
                words = self.rows[slot].tolist() if self.rows[slot][0] else None
                later = [e for e, _ in self.pending] if words is not None else []
                if words is not None:
                    self.pending.clear()  # later launches of a failed context are not trusted either
            checked += 1
            if words is not None:
                self._raise_failed(words, epoch, later)

    def _wait(self, epoch: int, slot: int, bound_s: float) -> None:
        end = time.monotonic() + bound_s
        while not self.ops.done(self.done[slot]):
            if time.monotonic() > end:
                self.never_finished(epoch, bound_s)
            time.sleep(20e-6)

    def _raise_failed(self, words: list[int], epoch: int, later: list[int]) -> None:
        """`failed`, saying what became of the launches still pending behind the failed one."""
        try:
            self.failed(words, epoch)
        except SyncopyError as exc:
            self.broke(exc)
            if later:
                exc.message += self._after_failure(later)
                exc.args = (exc.render(),)
            raise

    def _after_failure(self, later: list[int]) -> str:
        """What the error adds when launches were pending behind the failed one (`later`, their epochs)."""
        which = f"epoch {later[0]}" if len(later) == 1 else f"epochs {later[0]}..{later[-1]}"
        many = len(later) > 1
        said = f"; the {len(later)} later launch{'es' if many else ''} still pending ({which}) {'were' if many else 'was'} dropped unread"
        if self.refuses:
            return said + ", and this operator refuses its later launches (a failed context is not trusted)"
        return said + " (a failed context is not trusted)"

    def never_finished(self, epoch: int, bound_s: float) -> None:
        """A launch still not done `bound_s` after the host began waiting for it."""
        raise LaunchError(f"launch {epoch} was not done {bound_s:g}s after syncopy began waiting for it, though its kernel's "
                          "waits are bounded: the device is stuck behind it (a kernel or copy on its stream that never ends); "
                          "find what else runs on that stream")

    def broke(self, exc: SyncopyError) -> None:
        """A launch failed (`exc`): what the ring's owner no longer trusts (LaunchErrors: its context)."""

    def first_failure(self) -> tuple[int, BaseException] | None:
        """(epoch, error) of the oldest done launch that failed, still unraised; None if the done ones
        did not fail. Consumes nothing: what the watchdog sees still raises at the next check()."""
        with self.lock:
            for epoch, slot in self.pending:
                if not self.ops.done(self.done[slot]):
                    return None
                row = self.rows[slot]
                if row[0]:
                    words = row.tolist()
                    break
            else:
                return None
        try:
            self.failed(words, epoch)
        except BaseException as exc:
            return epoch, exc
        return None

    def failed(self, words: list[int], epoch: int) -> None:
        raise NotImplementedError


class LaunchErrors(ErrorRing):
    """The pending launches of one context: a failed one is a SyncopyTimeout naming rank, chunk and
    epoch (or checked mode's read violation), and the context is marked broken (`ctx.broken`): the
    operator refuses its later launches saying why. `refuses=False` for an owner that takes later
    launches anyway (the loopback and thread worlds, test harnesses that relaunch after a failure)."""

    refuses = True

    def __init__(self, ctx, ops, pin, timeout_s: float, refuses: bool = True):
        super().__init__(ops, pin, ctx.word_address(dev.SIG_ERROR.value))
        self.ctx, self.timeout_s, self.refuses = ctx, timeout_s, refuses

    def failed(self, words: list[int], epoch: int) -> None:
        flag, rank, unit, at = words
        violation = _read_check().violation(self.ctx, [flag, rank, unit, at], self.ctx.kernel_file)
        if violation is not None:
            raise violation
        plan = self.ctx.plan
        raise SyncopyTimeout(rank, divmod(plan.chunk_of_flag(unit), plan.chunks_per_rank), self.ctx.unwrap(at), self.timeout_s)

    def broke(self, exc: SyncopyError) -> None:
        if self.refuses:
            self.ctx.broken = self.ctx.broken or f"{type(exc).__name__}: {exc}"

    def never_finished(self, epoch: int, bound_s: float) -> None:
        exc = LaunchError(f"rank {self.ctx.plan.rank}: launch {epoch} was not done {bound_s:g}s after syncopy began waiting "
                          f"for it, though its kernel's waits give up after timeout_s={self.timeout_s:g}s: the device is stuck "
                          "behind it (a kernel or copy on its stream that never ends); find what else runs on that stream, "
                          "then re-create the process group")
        self.broke(exc)
        raise exc


def _read_check():
    """Checked mode's reports (passes/read_check.py, which needs libcst), imported only when a checked kernel reports."""
    from syncopy.passes import read_check

    return read_check
