"""Launches whose epoch advances on the device, so that a CUDA graph of one launch can be replayed.

A warm loopback launch writes the epoch word, its own flags and each chunk's flag with values the
host picks (`cuStreamWriteValue32(addr, e)`). Captured in a CUDA graph, those values are frozen:
every replay would write the epoch of the captured launch, a flag left at e by replay 1 would
let replay 2's tiles through before their chunks land, and the error words of one replay would
be overwritten by the next unseen. In device-epoch mode nothing on the launch path carries a
host-chosen epoch:

    compute  [own rows][advance: epoch += 1, own flags = epoch, error words -> stash, zeroed][epoch -> mirror]
                                                                                    |   [== fused kernel ==]
    side                                   [chunk g][write-value: barrier][mirror -> flag g] [chunk h] ...

- `advance_epoch`, a one-program kernel on the compute stream, steps the epoch word the fused
  kernel reads (ctx[CTX_EPOCH]) and raises this rank's own flags to it (the own rows were copied
  just before it on the same stream). It runs before the fused kernel, never beside it, so it
  cannot be starved of SMs by tiles that spin.
- Each remote chunk's flag is raised by a 4-byte copy from `mirror`, a pinned host word that a
  D2H copy fills with the new epoch before the side stream starts. Host-to-device copies are done
  by the copy engine: a flag raised by a kernel (or by a device-to-device copy, which CUDA may run
  as a kernel) could wait forever for an SM while every SM holds a tile that waits for that flag.
  The copy comes behind a stream write-value to a scratch word, whose memory barrier makes the
  chunk's bytes visible before the flag (runtime/streams/streamops.py: a copy after a copy is not
  documented to be seen in order by a kernel polling concurrently).
- Errors: the kernel's error words (flag, rank, unit, epoch) are moved into `stash` by the next
  launch's advance if the stash is still empty, then zeroed: every launch waits for its own
  chunks again, and the first failure is kept until `synchronize()` reads the stash and the last
  launch's own words (a host sync, off the launch path) and raises SyncopyTimeout naming rank,
  chunk and epoch.

Why not flags alternating by epoch parity: a graph of one launch replays one parity, so the
graph would have to hold two launches (and a replay would be two launches), and producer
counters would still need device-side targets. A device epoch keeps the one-word-per-chunk
protocol of every other launch, and one replay is one launch.

On the CPU engine a `HostGraph` records the launch's stream operations and kernel launches with
their arguments and replays them as recorded: frozen values, as in a CUDA graph.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from syncopy import device as dev

STASH_WORDS = dev.SIG_HEADER  # a copy of the error words: [flag, rank, unit, epoch]
SCRATCH = STASH_WORDS  # after the stash: the word the barrier write-values write (nobody reads it)


@triton.jit
def advance_epoch(ctx, signals, words, own_lo, OWN: tl.constexpr, OWN_POW2: tl.constexpr):
    """epoch += 1 (int32, wrapping as the host's words do); the last launch's error words to the
    stash if it is empty, then zeroed; this rank's OWN flags from own_lo raised to the new epoch."""
    epoch = tl.load(ctx + dev.CTX_EPOCH).to(tl.int32) + 1
    tl.store(ctx + dev.CTX_EPOCH, epoch.to(tl.int64) & 0xFFFFFFFF)  # the low half, as the host writes it
    err = tl.load(signals + dev.SIG_ERROR)
    kept = tl.load(words)
    if (err != 0) & (kept == 0):
        tl.store(words + 1, tl.load(signals + dev.SIG_ERROR + 1))
        tl.store(words + 2, tl.load(signals + dev.SIG_ERROR + 2))
        tl.store(words + 3, tl.load(signals + dev.SIG_ERROR + 3))
        tl.store(words, err)
    offs = tl.arange(0, 4)
    tl.store(signals + dev.SIG_ERROR + offs, tl.zeros([4], dtype=tl.int32))
    own = tl.arange(0, OWN_POW2)
    tl.store(signals + dev.SIG_BASE + own_lo + own, tl.full([OWN_POW2], 0, tl.int32) + epoch, mask=own < OWN)


class DeviceEpoch:
    """What one context needs to advance its epoch on the device: the stash and scratch words (on
    the context's device), the pinned mirror of the epoch the chunk flags are copied from, and the
    range of this rank's own flags."""

    @torch.inference_mode(False)  # ordinary tensors, as the context's: written in any mode later
    def __init__(self, ctx, pin, own_lo: int, own_count: int):
        self.ctx = ctx
        self.words = torch.zeros(STASH_WORDS + 1, dtype=torch.int32, device=ctx.buffer.device)
        self.mirror = pin(torch.zeros(1, dtype=torch.int32))
        self.mirror_address = self.mirror.data_ptr()
        self.scratch_address = self.words.data_ptr() + 4 * SCRATCH
        self.own_lo, self.own_count = own_lo, own_count
        self._own_pow2 = triton.next_power_of_2(max(own_count, 1))

    def advance(self) -> None:
        """Enqueue the advance on the current stream (see module doc)."""
        advance_epoch[(1,)](self.ctx.ctx, self.ctx.signals, self.words, self.own_lo, OWN=self.own_count, OWN_POW2=self._own_pow2)

    def warm(self) -> None:
        """Compile and load the advance kernel for this context's arguments, on scratch copies of
        its words (the same dtypes, alignment and own-flag range: the same specialisation)."""
        ctx, signals = torch.zeros_like(self.ctx.ctx), torch.zeros_like(self.ctx.signals)
        advance_epoch[(1,)](ctx, signals, torch.zeros_like(self.words), self.own_lo, OWN=self.own_count, OWN_POW2=self._own_pow2)

    def first_error(self) -> tuple[int, int, int] | None:
        """(rank, unit, epoch word) of the first failed launch since the last call, and clear it;
        the device must be idle (after a synchronize)."""
        stash = self.words[:STASH_WORDS].tolist()
        live = self.ctx.signals[: dev.SIG_HEADER].tolist()
        self.words[:STASH_WORDS] = 0
        self.ctx.signals[: dev.SIG_HEADER] = 0
        for flag, rank, unit, epoch in (stash, live):
            if flag:
                return rank, unit, epoch
        return None

    def epoch_word(self) -> int:
        """The epoch word the device holds now (the device must be idle)."""
        return int(self.ctx.ctx[dev.CTX_EPOCH.value]) & 0xFFFFFFFF


class HostGraph:
    """A CPU stand-in for a CUDA graph: while recording, the loopback world's stream operations
    and kernel launches are kept (with their arguments, as a capture freezes them) instead of run;
    `replay()` runs them again in the recorded order."""

    def __init__(self):
        self.steps: list = []
        self.recording = True

    def replay(self) -> None:
        for step in self.steps:
            step()


class RecordingOps:
    """`ops` (a HostOps) whose stream operations go into `graph` instead of running."""

    _PASS = ("handle", "event", "done", "batch", "device_type", "deadline_s")

    def __init__(self, ops, graph: HostGraph):
        self._ops, self._graph = ops, graph

    def __getattr__(self, name):
        real = getattr(self._ops, name)
        if name in self._PASS or not callable(real):
            return real

        def record(*args):
            self._graph.steps.append(functools.partial(real, *args))

        return record
