"""One edge on one rank: the context and signal pad the writer's tiles count chunks into and the reader's
tiles wait on, its per-launch words, and the ring its error words are read from."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from syncopy import device as dev
from syncopy.errors import SyncopyTimeout
from syncopy.runtime.streams import streamops
from syncopy.runtime.streams.error_ring import ErrorRing
from syncopy.runtime.streams.streamops import ptr


class LinkSignals:
    """The context and signal pad of one edge on one rank, made once and reused by every launch.

    The shared tensor's rows (dim 0) are cut into `chunks` chunks, as one rank's shard of a world of
    one: [error x4 | flags x n | two unused words | counters x n | targets x n] (the layout the
    producer notifies and consumer waits of device.py read). Flags are never reset (they carry the
    epoch); each launch starts the counters at zero and sets the targets to the tiles it expects
    per chunk, all in one stream operation (`begin`)."""

    @torch.inference_mode(False)
    def __init__(self, tensor: torch.Tensor, chunks: int):
        from syncopy.schedule.chunks import chunk_bounds

        rows = tensor.shape[0]
        self.chunks = max(1, min(chunks, rows))
        self.bounds = chunk_bounds(rows, self.chunks)
        device = tensor.device
        self.ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64, device=device)
        for word, value in ((dev.CTX_RANK, 0), (dev.CTX_ROWS, rows), (dev.CTX_CHUNKS, self.chunks), (dev.CTX_WORLD, 1),
                            (dev.CTX_STRIDE_BYTES, tensor.stride(0) * tensor.element_size()), (dev.CTX_SIZE, rows)):
            self.ctx[word.value] = value
        n = self.chunks
        self.signals = torch.zeros(dev.SIG_HEADER + 3 * n + 2, dtype=torch.int32, device=device)
        self.ops = streamops.cuda_ops() if device.type == "cuda" else streamops.HostOps()
        self.epoch = 0
        self.tiles_per_chunk: dict[tuple, list[int]] = {}  # per launch shape of the writer (its probe's answer)
        self._starts: dict[tuple, streamops.WriteBatch] = {}  # per (tiles per chunk, spin limit): begin's writes
        self.errors = LinkErrors(self)
        self.reader: Reader | None = None  # who waits on this link, for its error (Pipeline._plan sets it)

    def args(self, direction: str) -> dict:
        from syncopy.passes import link

        ctx, signals = link.params(direction)
        return {ctx: self.ctx, signals: self.signals}

    def begin(self, need: list[int], spin_limit: int, stream) -> int:
        """Launch `epoch + 1`, enqueued on `stream` (a handle of `self.ops`) as one batch of
        write-values, no host sync: error words cleared, the epoch, the wait bound, counters from
        zero, the targets, and the flag of every chunk no tile writes (complete at once: its rows
        keep what the tensor held)."""
        self.epoch += 1
        self.ops.write_batch(self._start_writes(need, spin_limit), self.epoch, stream)
        return self.epoch

    def _start_writes(self, need: list[int], spin_limit: int) -> streamops.WriteBatch:
        key = (tuple(need), spin_limit)
        batch = self._starts.get(key)
        if batch is None:
            n, sig, ctx = self.chunks, ptr(self.signals), ptr(self.ctx)
            counters, targets = sig + 4 * (dev.SIG_HEADER + n + 2), sig + 4 * (dev.SIG_HEADER + 2 * n + 2)
            limit = ctx + 8 * dev.CTX_SPIN_LIMIT.value  # an int64: both halves (little-endian)
            writes = [(sig + 4 * i, 0) for i in range(dev.SIG_HEADER)]
            writes += [(ctx + 8 * dev.CTX_EPOCH.value, None), (limit, spin_limit & 0xFFFFFFFF), (limit + 4, spin_limit >> 32)]
            writes += [(counters + 4 * g, 0) for g in range(n)] + [(targets + 4 * g, k) for g, k in enumerate(need)]
            writes += [(sig + 4 * (dev.SIG_HEADER + g), None) for g, k in enumerate(need) if k == 0]
            batch = self._starts[key] = self.ops.batch(writes)
        return batch

    def read_error_now(self) -> int | None:
        """The chunk a reader's tile gave up waiting for in the last launch, or None: a host read of
        the device words (a sync on GPUs), only on the error path of a launch that raised."""
        flag, _, chunk, _ = (int(x) for x in self.signals[: dev.SIG_HEADER].tolist())
        return chunk if flag else None

    @property
    def nbytes(self) -> int:
        return self.ctx.numel() * 8 + self.signals.numel() * 4


@dataclass(frozen=True)
class Reader:
    """What a link's error names: the rank, the reader and the writer of the linked tensor."""

    rank: int
    tensor: str  # the reader's name for it
    reader: str
    writer: str
    writer_index: int
    timeout_s: float

    def timeout(self, link: LinkSignals, chunk: int, epoch: int, cause: BaseException | None = None) -> SyncopyTimeout:
        lo, hi = link.bounds[chunk]
        exc = SyncopyTimeout(self.rank, (self.rank, chunk), epoch, self.timeout_s,
                             f"it is rows {lo}..{hi - 1} of '{self.tensor}', which {self.reader} waits for and "
                             f"{self.writer} (launch {self.writer_index + 1} of the pipeline) writes",
                             f"check that {self.writer} writes every row {self.reader} reads, or raise timeout_s")
        exc.__cause__ = cause
        return exc


class LinkErrors(ErrorRing):
    """A link's launches whose error words are not read yet (runtime/streams/error_ring.py's ring):

        caller stream  [begin][op 1 ... op 2, joined][error words -> pinned ring[next slot]][event]
        host           launch e returns ... next launch / synchronize(): each done event, oldest first:
                                            read its ring slot (no CUDA call), raise SyncopyTimeout

    On CPU ranks the copy and the event are done when enqueued, so a launch's error is read as it returns."""

    def __init__(self, link: LinkSignals):
        super().__init__(link.ops, (lambda t: t.pin_memory()) if link.signals.is_cuda else (lambda t: t), ptr(link.signals))
        self.link = link

    def failed(self, words: list[int], epoch: int) -> None:
        _, _, chunk, _ = words
        raise self.link.reader.timeout(self.link, chunk, epoch)



def link_args(links: dict, index: int) -> dict:
    """The kernel arguments of launch `index` for `links` (Edge -> LinkSignals): the context and signal
    pad of each link it writes (syncopy_out_*) and reads (syncopy_in_*)."""
    out = {}
    for e, link in links.items():
        if e.src == index:
            out.update(link.args("out"))
        if e.dst == index:
            out.update(link.args("in"))
    return out
