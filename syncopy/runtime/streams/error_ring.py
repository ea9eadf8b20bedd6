"""Errors of launches that returned before their kernel ran: read once the kernel is done, off the
launch path (after ProcessGroupNCCL's work objects: a collective enqueues and returns, its failure
surfaces later, never lost).

    compute stream  [== fused kernel e ==][copy error words -> pinned ring[e % RING]][event e]
    host            launch e returns ... next launch / synchronize(): for each event that completed,
                                          oldest first: read its ring slot, raise SyncopyTimeout

The kernel leaves (flag, rank, unit, epoch) in its error words when a wait ran out; the copy
behind it lands in pinned host memory, which the host reads with no CUDA call once the launch's
event is done (cuEventQuery never blocks). A launch that finds RING launches still pending waits
for the oldest one: that only happens when the host runs RING launches ahead of the device.

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
from syncopy.errors import SyncopyTimeout
from syncopy.runtime.streams import streamops
from syncopy.runtime.streams.streamops import ptr


class ErrorRing:
    """Error words copied behind launches into a pinned ring, and read once each copy is done (see
    the module doc); `failed(words, epoch)` raises for a launch whose words say it failed."""

    RING = 64

    def __init__(self, ops, pin, words: int):
        self.ops, self.words = ops, words  # `words`: the address of the device's error words
        self.ring = pin(torch.zeros(self.RING, dev.SIG_HEADER, dtype=torch.int32))
        # Made once: each slot's address (for the copy) and a NumPy view of it (read with no torch
        # call: a tensor index and .tolist() per launch cost microseconds on the launch path).
        self.slots = [ptr(self.ring[i]) for i in range(self.RING)]
        self.rows = self.ring.numpy()
        self.done = [ops.event() for _ in range(self.RING)]  # per slot: the launch and its error copy are done
        self._free = streamops.free_with(self, ops, self.done)
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

    def record(self, epoch: int, stream) -> None:
        """Behind the launch's kernel on `stream` (a handle of `ops`): its error words to the ring."""
        if len(self.pending) >= self.RING:
            self.check(wait=True, upto=1)  # the oldest launch's slot is about to be reused
        slot = epoch % self.RING
        self.ops.copy(self.slots[slot], self.words, 4 * dev.SIG_HEADER, stream)
        self.ops.record(self.done[slot], stream)
        with self.lock:
            self.pending.append((epoch, slot))

    def check(self, wait: bool = False, upto: int | None = None) -> None:
        """Read the error words of the launches that are done (with `wait`: all of them, or the
        oldest `upto`), oldest first; raise the first failure."""
        checked = 0
        while self.pending and (upto is None or checked < upto):
            epoch, slot = self.pending[0]
            while not self.ops.done(self.done[slot]):
                if not wait:
                    return
                time.sleep(20e-6)
            with self.lock:
                self.pending.popleft()
                words = self.rows[slot].tolist() if self.rows[slot][0] else None
                if words is not None:
                    self.pending.clear()  # later launches of a failed context are not trusted either
            checked += 1
            if words is not None:
                self.failed(words, epoch)

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
    epoch (or checked mode's read violation)."""

    def __init__(self, ctx, ops, pin, timeout_s: float):
        super().__init__(ops, pin, ctx.word_address(dev.SIG_ERROR.value))
        self.ctx, self.timeout_s = ctx, timeout_s

    def failed(self, words: list[int], epoch: int) -> None:
        flag, rank, unit, at = words
        violation = _read_check().violation(self.ctx, [flag, rank, unit, at], self.ctx.kernel_file)
        if violation is not None:
            raise violation
        plan = self.ctx.plan
        raise SyncopyTimeout(rank, divmod(plan.chunk_of_flag(unit), plan.chunks_per_rank), self.ctx.unwrap(at), self.timeout_s)


def _read_check():
    """Checked mode's reports (passes/read_check.py, which needs libcst), imported only when a checked kernel reports."""
    from syncopy.passes import read_check

    return read_check
