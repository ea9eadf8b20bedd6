"""The context of one fused operator: buffers, signal pad, tile orders, epoch. Allocated once per
(schedule, group, shard shape, dtype) and reused by every launch; nothing is reset between launches
because signals carry the epoch of the launch that raised them."""
from __future__ import annotations

import itertools
import threading
import time

import torch

from syncopy import device as dev
from syncopy.runtime.state.plan import RankPlan
from syncopy.runtime.streams.streamops import wrap32


#: Launch shapes (grids and scalar arguments) a context remembers the tile order of; the oldest
#: goes first past that (it is probed again if it comes back).
MAX_LAUNCH_SHAPES = 64


class Recent(dict):
    """A dict that keeps its `limit` most recently inserted keys (first in, first out): the same
    sequence of launches drops the same entries on every rank."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def __setitem__(self, key, value) -> None:
        if key not in self and len(self) >= self.limit:
            del self[next(iter(self))]
        super().__setitem__(key, value)


class Arena:
    """One allocation that the main buffer of every context of an operator on one group (one dtype and
    device) is a view of, so that shapes that vary between launches (token counts) reuse it: it is
    made at the size `announced` (max_rows=) or the first launch's, whichever is larger, and grows only
    when a launch needs more than any before. Sharing is sound where a launch's transfers are over
    when it returns, so two shapes never use the buffer at once (the gloo backend, a world of one)."""

    def __init__(self, announced_rows: int = 0):
        self.announced_rows = announced_rows  # rows per rank (along the schedule's dim) to provision for
        self.flat: torch.Tensor | None = None
        self.grown = 0  # allocations made (1 after the first launch when max_rows covers every shape)

    @torch.inference_mode(False)
    def take(self, shape, dtype: torch.dtype, device: torch.device, rows_per_rank: int) -> torch.Tensor:
        """A contiguous tensor of `shape` (a buffer for `rows_per_rank` rows per rank: its size grows
        with them) on the arena's storage, which is grown first if it is too small."""
        n = 1
        for size in shape:
            n *= size
        if self.flat is None or self.flat.numel() < n or self.flat.dtype != dtype or self.flat.device != torch.device(device):
            announced = -(-n * self.announced_rows // max(1, rows_per_rank))  # the same buffer at max_rows per rank
            self.flat = torch.empty(max(n, announced), dtype=dtype, device=device)
            self.grown += 1
        return self.flat[:n].view(shape)


context_ids = itertools.count()  # ids of this process's contexts (a launch takes rank 0's, see Contexts.get)


def _word(t: torch.Tensor, i: int) -> torch.Tensor:
    """Word `i` of `t` as a one-element slice: setting it enqueues a fill, never a blocking copy."""
    return t[i : i + 1]


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """Sorted integers as [lo, hi) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for v in values:
        if runs and runs[-1][1] == v:
            runs[-1] = (runs[-1][0], v + 1)
        else:
            runs.append((v, v + 1))
    return runs


def _gathered(shape: tuple[int, ...], dim: int, world: int) -> list[int]:
    full = list(shape)
    full[dim] *= world
    return full


class Context:
    """Buffers and signals of one fused all-gather operator on one rank."""

    # Ordinary tensors, even when the first launch of a shape runs under torch.inference_mode(): an
    # inference tensor may not be updated in place outside that mode, and a context serves every launch.
    @torch.inference_mode(False)
    def __init__(self, plan: RankPlan, shard_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, dim: int,
                 producer: bool = False, full_shape: tuple[int, ...] | None = None,
                 extras: tuple[tuple[tuple[int, ...], torch.dtype], ...] = (), storage: Arena | None = None):
        self.plan = plan
        self.producer = producer
        self.dim = dim
        full = list(shard_shape)
        full[dim] *= plan.world
        if full_shape is not None:  # all_reduce of rows that do not split evenly: the last part is short
            full = list(full_shape)
        if plan.uneven:  # split sizes given at launch: room for this launch's rows (relayout grows it)
            full[dim] = max(plan.size, 1)
        # With an arena (max_rows=), a view of its one allocation: every shape up to the largest shares it.
        self.buffer = storage.take(full, dtype, device, plan.rows_per_rank) if storage is not None else torch.empty(full, dtype=dtype, device=device)
        self.n_chunks = plan.world * plan.chunks_per_rank
        # One flag per unit: a chunk per unit in the minimal form, several units per chunk with
        # explicit slices (the kernel's chunk ranges count units; RankPlan.flags maps them).
        n = self.n_flags = plan.world * plan.flags_per_rank
        # [error x4 | flags x n | arrived (or sent) | started | producer: counters x n | targets x n
        #  | ready x world (p2p: rank r wrote e when its buffer may take launch e's chunks; producers:
        #    when it has reduced launch e, so its inbox may take launch e+1's partials)
        #  | producer: delivered x world (p2p: rank r wrote e once its partials of launch e are in our inbox)
        #  | producer: gathered x world (p2p all_reduce: rank r wrote e once its reduced rows of launch e are in our buffer)]
        self._ready = dev.SIG_HEADER + n + 2 + (2 * n if producer else 0)
        self._delivered = self._ready + plan.world
        self._gathered = self._delivered + plan.world
        self.signals = torch.zeros(self._delivered + (2 * plan.world if producer else 0), dtype=torch.int32, device=device)
        self.targets = [0] * n
        self.tiles_per_chunk: dict[tuple, list[int]] = Recent(MAX_LAUNCH_SHAPES)  # producer: per launch shape, from the probe
        # The other listed tensors (`tensor: [K, V]`): gathered buffers of their own shapes and dtypes,
        # moved with the main one (a chunk's flag rises once all of them landed).
        self.extras = [torch.empty(_gathered(shape, dim, plan.world), dtype=dt, device=device) for shape, dt in extras]
        self.extra_shards: list[torch.Tensor] = []  # this launch's shards of the extras (set by the launcher)
        # One context block per tensor: the same words, but each its own row stride (names.ctx_of).
        # Uneven all_to_all: the table of chunk starts (device._chunk_of_row) follows the one block.
        table = self.n_chunks if plan.uneven else 0
        self.ctx = torch.zeros(dev.CTX_LEN * (1 + len(extras)) + table, dtype=torch.int64, device=device)
        for i, t in enumerate([self.buffer, *self.extras]):
            block = self.ctx[i * dev.CTX_LEN : (i + 1) * dev.CTX_LEN]
            block[dev.CTX_RANK.value] = plan.rank
            block[dev.CTX_ROWS.value] = plan.rows_per_rank
            block[dev.CTX_CHUNKS.value] = plan.flags_per_rank
            block[dev.CTX_STRIDE_BYTES.value] = t.stride(dim) * t.element_size()
            block[dev.CTX_SIZE.value] = full[dim]
            block[dev.CTX_WORLD.value] = plan.world
        self.epoch = 0
        # Per launch shape (grid and scalar arguments): its tile order table, ranges and execution order.
        self.orders: dict[tuple, tuple[torch.Tensor, list[tuple[int, int]], list[int]]] = Recent(MAX_LAUNCH_SHAPES)
        self.prepared: dict[tuple, bool] = Recent(MAX_LAUNCH_SHAPES)  # launch shapes compiled and met (TileOrders.prepared)
        # (launch shape, the outputs' shapes and strides) whose extents were checked (TileOrders.check_extents_once):
        # an output is no part of the launch shape, and a smaller one under a cached order is checked again.
        self.extents_checked: dict[tuple, bool] = Recent(MAX_LAUNCH_SHAPES)
        self.broken: str | None = None
        # Set by the launcher: the schedule as lowered (auto resolved) and the planner's choice, if any.
        self.schedule = None
        self.resolution = None
        self.lock = threading.Lock()
        self.trace = None  # this launch's trace.records.Trace, when traced
        self.aborted = False  # see begin
        self.no_trace = torch.zeros(1, dtype=torch.int32, device=device)  # the trace argument of untraced launches (never touched)
        self.source: torch.Tensor | None = None  # all_to_all: the input whose blocks go to the peers
        self.kernel_file = ""  # set by the launcher: the user's kernel file, named by checked-mode violations
        self.uid = 0  # set by the launcher: the same on every rank of the group, distinct among its contexts
        self.t0 = 0.0
        self.t0_wall = 0.0
        # The instruction graph the gloo backend runs this context's transfers from, the operator's
        # name in it, and the plan it was built from (uneven all_to_all: a new plan each launch).
        self.graph, self.graph_op, self._graph_of = None, "", None
        if plan.uneven:
            self.relayout(plan)

    def instructions(self):
        """(graph, operator name): the graph this context's transfers run from (runtime/state/instructions.py):
        a pipeline's, once bound (`bind_graph`), else its own, built once per plan."""
        if self.graph is None or self._graph_of is not self.plan:
            from syncopy.runtime.state import instructions

            s = self.schedule
            op = (getattr(s, "kernel", None) or "op") if s is not None else "op"
            self.graph, self.graph_op = instructions.operator(self.plan, op, getattr(s, "tensor", "") or ""), op
            self._graph_of = self.plan
        return self.graph, self.graph_op

    def bind_graph(self, graph, op: str) -> None:
        """Run this context's transfers from `graph`'s nodes of operator `op` (a pipeline's graph)."""
        self.graph, self.graph_op, self._graph_of = graph, op, self.plan

    def transfers(self, *kinds: str) -> list:
        """This context's transfer instructions of `kinds` in its graph's order (Graph.transfers)."""
        graph, op = self.instructions()
        return graph.transfers(op, *kinds)

    def unit_of_row(self, row: int) -> int:
        """The unit (chunk, or explicit-slice unit) holding gathered row `row`, as device._chunk_of_row maps it."""
        if self.plan.uneven:
            return self.plan.chunk_of_row(row)
        rows_per_rank, chunks = self.plan.rows_per_rank, self.plan.flags_per_rank
        src, local = divmod(row, rows_per_rank)
        return src * chunks + ((local + 1) * chunks - 1) // rows_per_rank

    def relayout(self, plan: RankPlan) -> None:
        """Uneven all_to_all: this launch's plan (its split sizes), the receive buffer grown to hold
        what arrives, the received row count and the table of chunk starts the kernel searches. The
        flags stay: a launch's chunk ids are the same (src*C + i), only their rows change."""
        self.plan = plan
        if plan.size > self.buffer.shape[self.dim]:
            shape = list(self.buffer.shape)
            shape[self.dim] = plan.size
            self.buffer = torch.empty(shape, dtype=self.buffer.dtype, device=self.buffer.device)
        self.ctx[dev.CTX_SIZE.value] = plan.size
        self.ctx[dev.CTX_LEN : dev.CTX_LEN + self.n_chunks] = torch.tensor(plan.starts(), dtype=torch.int64)

    def received(self) -> torch.Tensor:
        """What the kernel reads as the communicated tensor: the buffer, or with uneven splits the
        rows this launch receives (the buffer may hold more, from a larger launch before)."""
        return self.buffer.narrow(self.dim, 0, self.plan.size) if self.plan.uneven else self.buffer

    @property
    def nbytes(self) -> int:
        """Bytes this context holds on its device (the buffers, the signal pad and the tile tables)."""
        tables = sum(entry[0].numel() * entry[0].element_size() for entry in self.orders.values())
        buffers = sum(t.numel() * t.element_size() for t in [self.buffer, *self.extras])
        return buffers + self.signals.numel() * 4 + tables

    def word_address(self, index: int, pad: torch.Tensor | None = None) -> int:
        """The address of word `index` of a signal pad: this context's, or a peer's mapped one (p2p),
        for the stream operations that write or wait on it (runtime/streams/streamops.py)."""
        return (self.signals if pad is None else pad).data_ptr() + 4 * index

    def flag_address(self, flag: int, pad: torch.Tensor | None = None) -> int:
        """The address of flag `flag` (a unit's, see RankPlan.flags) in a signal pad."""
        return self.word_address(dev.SIG_HEADER + flag, pad)

    def target_word(self, chunk: int) -> int:
        """Producer: index in the signal pad of the word holding how many tile stores complete
        `chunk` in the coming launch (its counter's target, `set_targets`)."""
        return dev.SIG_HEADER + 2 * self.n_chunks + 2 + chunk

    def ready_word(self, rank: int) -> int:
        """Index in the signal pad of the word `rank` raises when this rank's buffer may take its
        next launch's chunks (runtime/transport/backends/p2p.py)."""
        return self._ready + rank

    def delivered_word(self, rank: int) -> int:
        """Producer: index in the signal pad of the word `rank` raises once its partials of this
        rank's rows for a launch are in this rank's inbox (runtime/transport/backends/p2p.py)."""
        return self._delivered + rank

    def gathered_word(self, rank: int) -> int:
        """all_reduce producer: index in the signal pad of the word `rank` raises once its reduced
        rows of a launch are in this rank's buffer (runtime/transport/backends/p2p.py)."""
        return self._gathered + rank

    def chunk_view(self, chunk: int) -> torch.Tensor:
        lo, hi = self.plan.bounds(chunk)
        return self.buffer.narrow(self.dim, lo, hi - lo)

    def send_view(self, chunk: int, peer: int) -> torch.Tensor:
        """What a send of `chunk` to `peer` carries. all_gather: the chunk itself (ours or relayed).
        all_to_all: the same rows of `source` (this launch's input) in the block meant for `peer`,
        which lands in the peer's receive buffer at block `rank` -- the chunk's own place there."""
        if self.source is None:
            return self.chunk_view(chunk)
        lo, hi = self.plan.send_bounds(chunk, peer)
        return self.source.narrow(self.dim, lo, hi - lo)

    def own_block(self, source: torch.Tensor) -> torch.Tensor:
        """all_to_all: the rows of this launch's input that stay on this rank (its block `rank`)."""
        plan = self.plan
        if plan.uneven:
            return source.narrow(self.dim, sum(plan.send_splits[: plan.rank]), plan.send_splits[plan.rank])
        return source.narrow(self.dim, plan.rank * plan.rows_per_rank, plan.rows_per_rank)

    def tensors(self) -> list[torch.Tensor]:
        """The gathered buffers: the main tensor's, then the other listed tensors'."""
        return [self.buffer, *self.extras]

    def _chunk_views(self, chunk: int) -> list[torch.Tensor]:
        """Chunk `chunk` of every listed tensor's buffer, in list order."""
        lo, hi = self.plan.bounds(chunk)
        return [t.narrow(self.dim, lo, hi - lo) for t in self.tensors()]

    def packed(self, chunk: int) -> torch.Tensor:
        """With several listed tensors: chunk `chunk` of every one of them, as one byte string (what
        travels, so that the chunk lands whole before its flag rises)."""
        return torch.cat([v.contiguous().reshape(-1).view(torch.uint8) for v in self._chunk_views(chunk)])

    def packed_like(self, chunk: int) -> torch.Tensor:
        """An empty tensor of `packed(chunk)`'s size and dtype, without copying anything (where it lands)."""
        return torch.empty(sum(v.numel() * v.element_size() for v in self._chunk_views(chunk)), dtype=torch.uint8)

    def unpack(self, chunk: int, data: torch.Tensor) -> None:
        """Put a received `packed(chunk)` in place in every buffer."""
        at = 0
        for view in self._chunk_views(chunk):
            n = view.numel() * view.element_size()
            view.copy_(data[at : at + n].view(view.dtype).view(view.shape))
            at += n

    def place_local(self, shard: torch.Tensor) -> None:
        """This rank's shards (the main one and the extras) in their slots of the gathered buffers."""
        rows = self.plan.rows_per_rank
        if self.plan.uneven:  # block `rank` of the receive buffer: what this rank sends itself
            self.buffer.narrow(self.dim, sum(self.plan.recv_splits[: self.plan.rank]), shard.shape[self.dim]).copy_(shard)
            return
        for t, s in zip(self.tensors(), [shard, *self.extra_shards]):
            t.narrow(self.dim, self.plan.rank * rows, rows).copy_(s)

    # Every device word a launch writes from the host is written as a one-word slice filled with the
    # value (`_word(t, i).fill_(v)`): on GPUs that is a fill kernel, enqueued on the current stream like
    # the launch's other work, where `t[i] = v` copies a host scalar in and waits for it (a host sync
    # at every launch).
    def begin(self, spin_limit: int) -> int:
        self.epoch += 1
        for at in range(0, dev.CTX_LEN * (1 + len(self.extras)), dev.CTX_LEN):  # each tensor's block (not the chunk table)
            _word(self.ctx, at + dev.CTX_EPOCH.value).fill_(self.word)
            _word(self.ctx, at + dev.CTX_SPIN_LIMIT.value).fill_(spin_limit)
        self.signals[: dev.SIG_HEADER] = 0
        self.aborted = False  # abort_waits: this launch's waits were ended early (a peer's connection closed)
        # The landed (or sent) count starts at -1, "not counted by the host": the GPU backends never
        # count (their copy engines and peers raise the flags), and a traced kernel then counts the
        # flags that are up itself (device._arrived). The host's first count makes it 1.
        _word(self.signals, dev.SIG_HEADER + self.n_flags).fill_(-1)
        _word(self.signals, dev.SIG_HEADER + self.n_flags + 1).fill_(0)
        self.t0 = time.perf_counter()
        self.t0_wall = time.time()
        return self.epoch

    def land(self, chunk: int) -> None:
        """Raise chunk `chunk`'s flags to this epoch (after its data is in place), count it as arrived."""
        with self.lock:
            # Stamp and count first, then raise the flags: a tile released by a flag must see the count,
            # and its start (stamped on the same clock) must never precede the chunk's landing in a trace.
            if self.trace is not None:
                self.trace.arrivals[chunk] = time.perf_counter() - self.t0
            self._count()
            for f in self.plan.flags(chunk):
                self.signals[dev.SIG_HEADER + f : dev.SIG_HEADER + f + 1] = self.word  # a fill, as _word's

    def first_missing(self, prefer: set[int] = frozenset()) -> int | None:
        """The first chunk whose flag is not raised in this launch, one of the ranks `prefer` first
        (None: every chunk landed)."""
        flags = self.signals[dev.SIG_HEADER : dev.SIG_HEADER + self.n_flags].tolist()
        missing = [self.plan.chunk_of_flag(f) for f, w in enumerate(flags) if w != self.word]
        theirs = [g for g in missing if g // self.plan.chunks_per_rank in prefer]
        return (theirs or missing or [None])[0]

    def abort_waits(self, chunk: int) -> None:
        """Stop the kernel's waits of this launch now (the CPU backend, when a peer's connection closed:
        the chunk `chunk` can never come): the error record names this rank, the chunk's first flag
        and the epoch, as a wait that timed out would, and `aborted` says the wait ended early.
        Interpreted waits poll the error word (device._spin_polls); compiled ones do not."""
        with self.lock:
            if int(self.signals[dev.SIG_ERROR.value]) != 0:
                return  # a program recorded its own error first
            self.aborted = True
            flag = self.plan.flags(chunk)[0]
            self.signals[1:4] = torch.tensor([self.plan.rank, flag, self.word], dtype=self.signals.dtype)
            self.signals[0:1] = 1

    def land_all(self) -> None:
        """`land` of every chunk, right after `begin` (a world of one holds them all once its shard is
        in place): each stamped, all counted, then every flag raised, one fill per run of flags."""
        with self.lock:
            if self.trace is not None:
                for g in range(self.n_chunks):
                    self.trace.arrivals[g] = time.perf_counter() - self.t0
            _word(self.signals, dev.SIG_HEADER + self.n_flags).fill_(self.n_chunks)
            flags = sorted({f for g in range(self.n_chunks) for f in self.plan.flags(g)})
            for lo, hi in _runs(flags):
                self.signals[dev.SIG_HEADER + lo : dev.SIG_HEADER + hi] = self.word

    def set_targets(self, tiles_per_chunk: list[int]) -> None:
        """Producer: the counts that complete each chunk in the coming launch (counters never reset).
        On GPUs by stream write-values on the current stream: a host list copied into device words
        would be a blocking copy."""
        self.targets = [wrap32(t + k) for t, k in zip(self.targets, tiles_per_chunk)]
        if not self.signals.is_cuda:
            at = self.target_word(0)
            self.signals[at : at + self.n_chunks] = torch.tensor(self.targets, dtype=torch.int32)
            return
        from syncopy.runtime.streams import streamops

        ops = streamops.cuda_ops()
        stream = ops.handle(torch.cuda.current_stream(self.signals.device))
        for g, target in enumerate(self.targets):
            ops.write32(self.word_address(self.target_word(g)), target, stream)

    def ready(self, chunk: int) -> bool:
        """Producer: has the kernel finished every tile that writes `chunk` in this launch?"""
        return wrap32(int(self.signals[dev.SIG_HEADER + chunk]) - self.word) >= 0

    def count_sent(self) -> None:
        with self.lock:
            self._count()

    def _count(self) -> None:
        """One more chunk landed (or sent), counted by the host (the word starts at -1: see begin)."""
        word = dev.SIG_HEADER + self.n_flags
        self.signals[word] = self.signals[word].clamp(min=0) + 1  # tensor ops: no read back (a GPU world of one counts too)

    def error(self) -> tuple[int, int, int] | None:
        flag, rank, chunk, epoch = (int(x) for x in self.signals[: dev.SIG_HEADER].tolist())
        return (rank, chunk, self.unwrap(epoch)) if flag else None

    @property
    def word(self) -> int:
        """The epoch as the device's int32 words hold it (it wraps after 2^31 launches; device
        waits compare cyclically)."""
        return wrap32(self.epoch)

    def unwrap(self, word: int) -> int:
        """The launch number, the nearest to this one, whose epoch word is `word` (for messages)."""
        return self.epoch + wrap32(word - self.epoch)


