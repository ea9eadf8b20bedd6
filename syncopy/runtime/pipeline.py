r"""Pipelines: fused operators that feed each other through per-chunk signals on the tensors they share.

    mlp = syncopy.pipeline()
    with mlp:                                         # launches inside are recorded, then run linked
        up[grid_up](x_shard, w1, h, ..., group=pg)    # h = act(all_gather(x_shard) @ w1)
        down[grid_down](h, w2, y, ..., group=pg)      # y = reduce_scatter(h @ w2)

Equivalent to the two launches one after the other. The dependency is inferred from the arguments
(after GrCUDA): `h` is the same tensor in both launches, the first kernel stores into it and the
second loads it, so the first becomes a producer of h's rows and the second a consumer. Each tile
of `up` that finishes its rows counts itself against h's chunks (the tile that completes a chunk
raises the chunk's flag to the pipeline's epoch); each tile of `down` waits for the chunks of h it
reads (passes/link.py). Nothing on the host stands between them:

    up tiles    [rows 0..31][rows 32..63]   ...                       (after their chunks of x land)
    h flags           ^ chunk 0  ^ chunk 1
    down tiles          [wait 0][rows 0..31][wait 1][rows 32..63] ... (their partials leave as they finish)

A launch enqueues and returns, like any CUDA op. Each link's per-launch words (error words cleared,
the epoch, the wait bound, counters from zero, the targets: tiles per chunk, found once per launch
shape by the writer's probe) are one batch of stream write-values on the caller's stream
(streamops.write_batch, no host write of a device word); after the operators, the link's error
words are copied into a pinned ring and read once that copy's event is done (LinkErrors, after
runtime/pending.py): at the next launch or `pipe.synchronize()`, raising SyncopyTimeout naming rank,
chunk and epoch. On CPU ranks those copies are done when enqueued, so a starved reader raises as
its launch returns, as before.

Streams. On CPU ranks, from the second launch of a launch shape on, `down` (op 2) runs on a side
thread, started first, beside `up` on the caller's thread (`_beside`; `side_thread=False` keeps
them in order). The Triton interpreter keeps its program index and its patches of triton.language
per process; runtime/interpreter_threads.py makes them safe for one kernel per thread. The two
kernels take turns under the GIL, and `down`'s tiles start as `up`'s tiles raise the chunks they
read (the trace shows it: `syncopy run tp_mlp --world 4 --trace t.json --timeline t.png`). The
reader's launch runs in the group turn the caller's thread holds for both (its transfers and the
writer's are told apart by their contexts' tags). On a GPU, from
the second launch of a launch shape on, `down` (op 2) runs on the pipeline's side stream, forked from the
caller's stream after the links' writes and joined back after it, so its tiles start on `up`'s
first finished chunks:

    caller stream  [link words][== up (op 1) ==========================]      [join][error words -> ring]
    side stream                 [== down (op 2): wait 0 | rows 0.. | wait 1 | rows ..==]
                                        ^ chunk 0's flag raised by up's tiles

A waiting tile holds its SM while it spins, and the block scheduler may place `down`'s tiles
before `up`'s (two streams, no order between them): if they could fill every SM, `up`'s remaining
tiles would never be scheduled and `down` would spin out its bound. So `down` goes beside `up`
only when its CTAs (programs x num_ctas) leave `up` an SM (`place`, `reader_side_limit`): at most
SMs - 1 on the copy-engine backends (some SM then holds no waiting tile of `down`), and, where a
transport keeps R SMs for its kernels (nccl), `up` and `down` together within SMs - R. Otherwise,
and on the first launch of each launch shape (compile, probe, the peers' rendezvous), or in pipelines of more than
two operators, both run in order on the caller's stream (`pipe.placement.why` says which).
`down` is enqueued after `up`, except in a world of one (`_reader_first_ok`): there `down` goes
first and already waits on the device when `up` is enqueued. No launch of a world of one waits on
the host for its kernel any more (its error words are read from a pinned ring at the next launch or
`synchronize()`, runtime/sequence.py), but `down`'s launch takes longer on the host (a fused
loopback launch: 0.31 ms on an H100, benchmarks/results/h100-2026-11-27-s10) than `up`'s kernel
runs at small shapes (tens of microseconds), so enqueued after `up` it would start after `up` ended. The cost: `down`'s waits are bounded, and a host sync
of the whole device before `up` is enqueued, or a driver that put both streams on one hardware
queue (`down`'s copy of its result behind its kernel would then hold `up` back), ends as that
link's SyncopyTimeout, never a hang; tests/unit/test_world1_deferred.py checks that a warm world-1
launch (consumer or producer) reads and writes no device word through a host sync. Either way
`down`'s launch follows its own last launch through the fork (`_forked`), not through the caller's
stream, which may by then hold `up`.
A traced launch reads its tiles' records once both operators are enqueued.

What a pipeline keeps, per (operators, argument shapes, group) -- its plan, built at the first launch
of a shape: the edges, each operator's linked variant (its own contexts: buffers and signal pads
made once, reused by every launch) and one `LinkSignals` per edge. `max_plans` bounds them.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import torch

from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyError, SyncopyTimeout
from syncopy.runtime.launch import _interpreting, _on_device, _spin_limit
from syncopy.runtime import streamops
from syncopy.runtime.pending import ErrorRing
from syncopy.runtime.streamops import ptr

_local = threading.local()


def recording():
    """The pipeline whose `with` block this thread is in, or None."""
    return getattr(_local, "pipeline", None)


def turn_held() -> bool:
    """Is this thread a pipeline's side thread, launching in the group turn its writer's thread holds?"""
    return getattr(_local, "turn_held", False)


@dataclass
class Launch:
    """One recorded launch: the operator, its grid and arguments (bound to the kernel's names)."""

    op: object  # FusedKernel
    grid: object
    args: tuple
    kwargs: dict
    group: object
    bound: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.op.local.fn.__name__

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.bound.items() if isinstance(v, torch.Tensor)}


@dataclass(frozen=True)
class Edge:
    """Launch `src` stores into its argument `src_arg`, which launch `dst` reads as `dst_arg`."""

    src: int
    src_arg: str
    dst: int
    dst_arg: str


class Linking:
    """How an operator takes part in a pipeline (FusedKernel mixes this in): its linked variants."""

    #: A pipeline's variant: {"wait": tensor, "notify": tensor}, the tensors linked to its neighbours.
    link_roles: dict = {}

    def linked(self, wait: str | None = None, notify: str | None = None):
        """This operator as a pipeline runs it: its tiles wait for the chunks of `wait` that the
        operator before it announces, and announce the chunks of `notify` they finish (either None).
        A new operator with its own contexts; the link's context and signal pad come in `link_args`."""
        import copy

        variant = copy.copy(self)
        variant.link_roles = {k: v for k, v in (("wait", wait), ("notify", notify)) if v is not None}
        variant.link_args = {}
        variant._built = None
        variant._positions, variant._contexts, variant._last_stream, variant._arenas = {}, {}, {}, {}
        variant._build_lock = threading.Lock()
        variant.traced_launches, variant.last_trace = [], None
        variant.trace_file = None  # the pipeline writes one trace of all its operators
        variant._link_probe = None
        return variant

    def link_probe(self):
        """The probe that counts this variant's tiles per chunk of the tensor it announces: the
        reduce_scatter probe of the user's kernel on that tensor (its store-address slice, built once)."""
        with self._build_lock:
            if getattr(self, "_link_probe", None) is None:
                from syncopy.emit import source as emit
                from syncopy.frontend.source import from_jit
                from syncopy.passes import transform
                from syncopy.schedule import from_dict

                writes = from_dict({"pattern": "reduce_scatter", "kernel": self.local.fn.__name__, "tensor": self.link_roles["notify"],
                                    "dim": 0, "chunks_per_rank": 1, "order": "ring"})
                t = transform(from_jit(self.local), writes)
                self._link_probe = emit.load(t, self.local.fn.__globals__)[1]
        return self._link_probe


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same tensor (not merely overlapping storage): what a link may stand for."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            and a.device == b.device)


def infer_edges(launches: list[Launch]) -> list[Edge]:
    """The tensors the launches share, each as an edge from its latest earlier user to its reader.

    Every pair of launches that pass the same tensor is an edge, except where that tensor is the
    communicated one of either operator (its rows come and go with chunks of their own: refused, see
    `_check_edge`). Whether the first kernel stores into it and the second loads it is the link
    pass's to find (it names what is missing)."""
    edges = []
    for j, later in enumerate(launches):
        for dst_arg, t in later.tensors().items():
            for i in range(j - 1, -1, -1):
                src_arg = next((n for n, u in launches[i].tensors().items() if _same(u, t)), None)
                if src_arg is not None:
                    edges.append(Edge(i, src_arg, j, dst_arg))
                    break
    for e in edges:
        _check_edge(launches, e)
    _check_roles(launches, edges)
    return edges


def _check_edge(launches: list[Launch], e: Edge) -> None:
    for index, arg in ((e.src, e.src_arg), (e.dst, e.dst_arg)):
        op = launches[index].op
        if arg in op.schedule.tensors:
            raise LaunchError(f"launch {index + 1} of the pipeline ({launches[index].name}) communicates '{arg}', which launch "
                              f"{e.src + 1 if index == e.dst else e.dst + 1} also takes; a pipeline links tensors that stay "
                              "on their rank: pass a separate tensor to one of them, or launch them outside the pipeline")


def _check_roles(launches: list[Launch], edges: list[Edge]) -> None:
    """One link in and one link out per operator so far: each is one context and signal pad in the kernel."""
    for index, launch in enumerate(launches):
        for role, mine in (("reads", [e for e in edges if e.dst == index]), ("writes", [e for e in edges if e.src == index])):
            args = sorted({e.dst_arg if role == "reads" else e.src_arg for e in mine})
            if len(args) > 1:
                raise LaunchError(f"launch {index + 1} of the pipeline ({launch.name}) {role} {len(args)} tensors that other "
                                  f"launches share ({', '.join(args)}); a pipeline links one tensor in and one out per "
                                  "operator so far: split the launches into two pipelines")
    for e in edges:
        consumers = {x.dst for x in edges if (x.src, x.src_arg) == (e.src, e.src_arg)}
        if len(consumers) > 1:
            raise LaunchError(f"'{e.src_arg}' of launch {e.src + 1} ({launches[e.src].name}) feeds {len(consumers)} later launches; "
                              "a pipeline links a tensor to one reader so far: give each reader its own copy, or split the pipeline")


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
    """A link's launches whose error words are not read yet (runtime/pending.py's ring):

        caller stream  [begin][op 1 ... op 2, joined][error words -> pinned ring[e % RING]][event e]
        host           launch e returns ... next launch / synchronize(): each done event, oldest first:
                                            read its ring slot (no CUDA call), raise SyncopyTimeout

    On CPU ranks the copy and the event are done when enqueued, so a launch's error is read as it returns."""

    def __init__(self, link: LinkSignals):
        super().__init__(link.ops, (lambda t: t.pin_memory()) if link.signals.is_cuda else (lambda t: t), ptr(link.signals))
        self.link = link

    def failed(self, words: list[int], epoch: int) -> None:
        _, _, chunk, _ = words
        raise self.link.reader.timeout(self.link, chunk, epoch)


@dataclass
class Plan:
    """What a pipeline runs for one (operators, shapes, group): edges, linked variants, link signals."""

    edges: list[Edge]
    variants: list  # per launch: the FusedKernel that runs it
    links: dict[Edge, LinkSignals]
    graph: object = None  # this rank's instruction graph (runtime/instructions.py), built on first ask
    placements: dict = field(default_factory=dict)  # per launch shapes of the operators: their Placement (None: seen once)

    def link_args(self, index: int) -> dict:
        """The context and signal pad of every link of launch `index` (its syncopy_in_* / syncopy_out_*)."""
        return link_args(self.links, index)


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


@dataclass(frozen=True)
class Placement:
    """Where a launch of the pipeline runs its operators (see the module doc, "Streams").

    side: the reader (op 2) runs on the pipeline's side stream, beside the writer (op 1) on the
    caller's; reader_first: the reader is enqueued before the writer; why: one line, the reason."""

    side: bool
    reader_first: bool
    why: str


IN_ORDER = "in order on the caller's stream"


SIDE_THREAD = ("op 2 on a side thread, started first, beside op 1 on the caller's thread (two interpreted kernels "
               "take turns under the GIL)")


def place(*, cuda: bool, interpreted: bool, warm: bool, chain: bool, reader_ctas: int, writer_ctas: int, sms: int,
          reserved: int, reader_first_ok: bool, threads: bool = False) -> Placement:
    """The rule of the module doc: the reader beside the writer only where its waiting tiles can never
    hold every SM the writer's tiles (or an SM transport's kernels) still need; on CPU ranks, beside it
    on a side thread where the interpreter can run two kernels at once (`threads`)."""
    if not warm:
        return Placement(False, False, f"{IN_ORDER}: the first launch of these shapes compiles, probes and meets the peers")
    if not chain:
        return Placement(False, False, f"{IN_ORDER}: only a pipeline of two linked operators runs them side by side so far")
    if not cuda and interpreted and threads:
        return Placement(True, True, SIDE_THREAD)
    if not cuda or interpreted:
        return Placement(False, False, f"{IN_ORDER}: the interpreter runs one kernel at a time per process")
    limit = reader_side_limit(sms, reserved, writer_ctas)
    if reader_ctas > limit:
        # Fallback: the reader's spinning tiles could fill the GPU before the writer's last tiles start.
        return Placement(False, False, f"{IN_ORDER}: op 2 launches {reader_ctas} CTAs and at most {limit} may wait beside op 1 "
                                       f"on {sms} SMs ({reserved} kept for transfers); make it a persistent kernel of at most "
                                       f"{limit} programs to run it beside op 1")
    if reader_first_ok:
        return Placement(True, True, "op 2 on the side stream, enqueued first; op 1 on the caller's stream")
    return Placement(True, False, "op 2 on the side stream, enqueued after op 1; op 1 on the caller's stream")


def reader_side_limit(sms: int, reserved: int, writer_ctas: int) -> int:
    """The most CTAs the reader may launch beside the writer. Copy-engine transports (nothing
    reserved): all but one SM, so some SM holds no waiting reader tile and the writer's tiles always
    find room. SM transports (nccl keeps `reserved` SMs): writer and reader together within the SMs
    not reserved, as one fused kernel is held (occupancy.check_grid), so the transfers' kernels find theirs."""
    if reserved:
        return sms - reserved - writer_ctas
    return sms - 1


class Pipeline:
    """Fused operators launched together, linked by per-chunk signals on the tensors they share.

    Use it as a context manager around the launches (`with pipe: op1[g1](...); op2[g2](...)`): they run
    when the block ends, in the order written, each operator waiting on the device for the rows it
    reads from an earlier one (see the module doc). `link_chunks`: chunks per shared tensor (default:
    the writer's chunks, world x chunks_per_rank). `trace`: True records every operator's `last_trace`;
    a path also writes one Chrome / Perfetto trace of all of them, every rank (rank 0 writes)."""

    def __init__(self, *, link_chunks: int | None = None, trace=False, max_plans: int = 16, side_thread: bool = True):
        import os

        self.link_chunks = link_chunks
        self.trace = bool(trace)
        self.trace_file = os.fspath(trace) if isinstance(trace, (str, os.PathLike)) else None
        self.traced_launches: list[list] = []
        self.last_traces: list = []  # trace=True: every operator's Trace of the last launch, on this rank
        self.max_plans = max_plans
        self.side_thread = side_thread  # CPU ranks: op 2 on a side thread beside op 1 from a shape's second launch
        self.plans: dict[tuple, Plan] = {}
        self._variants: dict[tuple, object] = {}  # (id of the user's operator, roles) -> linked variant
        self._recorded: list[Launch] | None = None
        self.launches = 0
        self.placement: Placement | None = None  # where the last launch ran its operators, and why
        self._side: dict = {}  # device -> the side stream the reader runs on (made at first use)
        self._deferred_traces: list | None = None  # while operators are enqueued side by side
        self._returned: set[int] = set()  # the launches of the current run whose operator returned

    # -- recording ----------------------------------------------------------------------------------
    def __enter__(self):
        if recording() is not None:
            raise LaunchError("a pipeline's `with` block is already open on this thread; launch the operators of one "
                              "pipeline at a time (nested pipelines are not supported)")
        self._recorded = []
        _local.pipeline = self
        return self

    def __exit__(self, kind, value, tb):
        recorded, self._recorded = self._recorded, None
        _local.pipeline = None
        if kind is None and recorded:
            self.run(recorded)
        return False

    def add(self, op, grid, args, kwargs, group) -> None:
        """Record a launch made inside the `with` block (FusedKernel.__getitem__ calls this)."""
        bound, _, _ = op._bind(tuple(args), dict(kwargs))
        self._recorded.append(Launch(op, grid, tuple(args), dict(kwargs), group, bound))
        return None

    # -- running ------------------------------------------------------------------------------------
    def run(self, launches: list[Launch]) -> None:
        """The recorded launches, linked: each edge's epoch and targets (one stream operation), every
        operator (see the module doc for which stream and in which order), then each edge's error
        words copied behind them, read once done (CPU ranks: at once; GPUs: at the next launch or
        `synchronize()`)."""
        from syncopy.runtime.contexts import checked_group

        groups = {id(checked_group(x.group)) for x in launches}
        if len(groups) > 1:
            raise LaunchError("the launches of a pipeline run on different process groups; pass the same group= to every "
                              "launch in the `with` block (a link is between two kernels of one rank)")
        self._check_links()  # earlier launches' starved readers, of those done by now
        key = self._key(launches)
        plan = self._plan(key, launches)
        epochs, launched = {}, False
        device = _cuda_device(launches)
        try:
            self.placement = self._placement(plan, launches, device)
            with _on_device(device):
                caller = torch.cuda.current_stream(device) if device is not None else None
                for edge, link in plan.links.items():
                    need = self._tiles_per_chunk(plan.variants[edge.src], launches[edge.src], link)
                    timeout = plan.variants[edge.dst].timeout_s
                    epochs[edge] = link.begin(need, _spin_limit(timeout, link.ctx.device.type), link.ops.handle(caller))
                self._enqueue(plan, launches, self.placement, caller)
                for edge, link in plan.links.items():
                    link.errors.record(epochs[edge], link.ops.handle(caller))
            launched = True
            self._check_links(key)  # CPU ranks: this launch's, done when enqueued
        except BaseException as exc:
            # A launch that stopped part way may leave its operators' contexts mid-epoch: the next
            # launch of these shapes starts from a new plan (the operators keep their own contexts).
            self.plans.pop(key, None)
            if isinstance(exc, SyncopyError) and epochs and not launched:
                # A reader's transfers give up on the chunks it never finished about when its tiles
                # give up on the link, and the transfer's error would hide the link's, which is the cause.
                self._raise_if_starved_now(plan, epochs, cause=exc)
            raise
        self.launches += 1
        if plan.graph is None:
            self._graph(plan)  # from the next launch on, the operators' transfers run from it (gloo)
        if self.trace:
            self._write_trace(plan, launches[0].group)

    def _enqueue(self, plan: Plan, launches: list[Launch], placement: Placement, caller) -> None:
        """Every operator's launch, on the caller's stream in order, or (placement.side) the reader on
        the side stream, forked from the caller's after the links' writes and joined back after it
        (CPU ranks: on a side thread, `_beside`)."""
        if placement.side and caller is None:
            return self._beside(plan, launches)
        side = self._side_stream(caller) if placement.side else None
        if side is not None:
            side.wait_stream(caller)  # fork: the reader sees its inputs and the links' new epoch
            _forked(plan.variants[1], launches[1], side)
            self._deferred_traces = []
        order = [1, 0] if placement.reader_first else range(len(launches))
        self._returned = set()  # the launches whose operator returned (a writer that did not raised nothing)
        try:
            for index in order:
                variant, x = plan.variants[index], launches[index]
                # A linked variant serves every plan of its operator (one compile), so it takes this
                # plan's links at each launch: links given once, when a plan was made, would send a
                # plan reused after another shape's plan was made onto that shape's link.
                variant.link_args = plan.link_args(index)
                with torch.cuda.stream(side) if side is not None and index == 1 else contextlib.nullcontext():
                    variant[x.grid](*x.args, group=x.group, **x.kwargs)
                self._returned.add(index)
        finally:
            if side is not None:
                caller.wait_stream(side)  # join: the caller's later work sees the outputs in stream order
            stashed, self._deferred_traces = self._deferred_traces, None
        for finish in stashed or ():
            finish()  # traced launches read their tiles' records once both operators are enqueued

    def _beside(self, plan: Plan, launches: list[Launch]) -> None:
        """CPU ranks: the reader's launch on a side thread, started first (its tiles wait for the link's
        chunks as they would on the device), the writer's on this thread, in the group's turn this
        thread holds for both (FusedKernel._serialised_launch); then the side thread is joined and its
        error, if any, raised (the writer's first: a reader starves of a writer that failed). Both
        contexts are made (`_side_thread_refused`): neither launch talks to the peers but by its
        tagged transfers. A writer that fails before its kernel raises once the reader's waits ran out."""
        from syncopy.runtime.backends import control
        from syncopy.runtime.contexts import checked_group

        self._returned = set()
        for index in (0, 1):
            plan.variants[index].link_args = plan.link_args(index)
        failed: list[BaseException] = []
        # Grad and inference mode are per thread: the reader launches in the caller's (a custom op's
        # forward runs with grad off; a new thread would start with it on).
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

        def reader():
            _local.turn_held = True
            try:
                x = launches[1]
                with torch.inference_mode(inference), torch.set_grad_enabled(grad):  # in this order: inference_mode(False) turns grad on
                    plan.variants[1][x.grid](*x.args, group=x.group, **x.kwargs)
            except BaseException as exc:  # raised on the caller's thread below
                failed.append(exc)
            finally:
                _local.turn_held = False

        with control.group_lock(checked_group(launches[0].group)):
            side = threading.Thread(target=reader, name="syncopy-pipeline-reader", daemon=True)
            side.start()
            try:
                x = launches[0]
                plan.variants[0][x.grid](*x.args, group=x.group, **x.kwargs)
                self._returned.add(0)
            finally:
                # The reader's waits and its transfers are bounded (a writer that failed before its
                # kernel leaves it waiting that long); past that, a thread that never returns is a
                # one-line error, never a hang.
                bound = control.wait_bound(plan.variants[1].timeout_s) * 2
                side.join(bound)
        if side.is_alive():
            raise LaunchError(f"the launch of {launches[1].name} on the pipeline's side thread did not return within {bound:g}s "
                              "(its waits are bounded: this is a bug to report); run the pipeline with side_thread=False")
        if failed:
            raise failed[0]
        self._returned.add(1)

    def _side_stream(self, caller):
        stream = self._side.get(caller.device)
        if stream is None:
            stream = self._side[caller.device] = torch.cuda.Stream(device=caller.device)
        return stream

    def _placement(self, plan: Plan, launches: list[Launch], device) -> Placement:
        """`place` for this launch, decided once per launch shapes of the operators (a warm plan's)."""
        chain = len(launches) == 2 and [(e.src, e.dst) for e in plan.edges] == [(0, 1)]
        key = tuple(v._shape_key(x.grid, x.bound) for v, x in zip(plan.variants, launches))
        # Warm: these launch shapes ran before. A new grid compiles (and meets the peers) in its
        # operator's launch, which must not happen while the other operator already spins.
        warm = key in plan.placements
        if device is None or _interpreting() or not warm or not chain:
            plan.placements.setdefault(key, None)
            threads = False
            if device is None and _interpreting() and warm and chain:
                refused = self._side_thread_refused(plan, launches)
                if refused is not None:
                    return Placement(False, False, f"{IN_ORDER}: {refused}")
                threads = True
            return place(cuda=device is not None, interpreted=_interpreting(), warm=warm, chain=chain,
                         reader_ctas=0, writer_ctas=0, sms=0, reserved=0, reader_first_ok=False, threads=threads)
        placement = plan.placements[key]
        if placement is None:
            from syncopy.runtime import occupancy

            backends = [_backend_of(v) for v in plan.variants]
            reserved = max(occupancy.reserved_sms(b.name) if b is not None else 0 for b in backends)
            writer_ctas, reader_ctas = (_ctas(v, x) for v, x in zip(plan.variants, launches))
            placement = plan.placements[key] = place(
                cuda=True, interpreted=False, warm=True, chain=True, reader_ctas=reader_ctas, writer_ctas=writer_ctas,
                sms=occupancy.sm_count(device), reserved=reserved,
                reader_first_ok=_reader_first_ok(plan.variants[1], backends[1]))
        return placement

    def _side_thread_refused(self, plan: Plan, launches: list[Launch]) -> str | None:
        """Why a warm chain on CPU ranks may not run its reader on a side thread (None: it may). Both
        operators must find their contexts made (and are now the most recently used, so that neither
        is evicted before it runs): a first launch of a context meets the peers over the group, in the
        group's turn the caller's thread holds, and an all_to_all exchanges its split sizes at every
        launch; neither may happen from two threads at once."""
        if not self.side_thread:
            return "side_thread=False"
        for variant, x in zip(plan.variants, launches):
            if variant.schedule.pattern == "all_to_all":
                return f"{x.name} is an all_to_all, which exchanges its split sizes with the peers at every launch"
            if not variant._touch_context(x.args, x.kwargs, x.group):
                return f"{x.name} makes its context for these shapes at this launch (it meets the peers)"
        if not _interpreter_threads():
            return "this Triton's interpreter cannot run two kernels at once in a process"
        return None

    def _check_links(self, only: tuple | None = None) -> None:
        """Raise the first starved reader among the launches whose error words are in (every plan's,
        or plan `only`'s), of those done by now; a plan whose link starved is dropped."""
        for key, plan in list(self.plans.items()):
            if only is None or key == only:
                self._check_plan(key, plan, wait=False)

    def _check_plan(self, key: tuple, plan: Plan, wait: bool) -> None:
        try:
            for link in plan.links.values():
                link.errors.check(wait=wait)
        except SyncopyTimeout:
            self.plans.pop(key, None)  # its next launch starts from new links
            raise

    def synchronize(self) -> None:
        """Wait for this pipeline's launches so far and raise the first error among them: a reader
        that gave up waiting on a link (SyncopyTimeout naming rank, chunk and epoch), then each
        operator's own (FusedKernel.synchronize). On GPUs a warm launch returns once its work is
        enqueued; its errors surface at the next launch or here. CPU launches raise as they return."""
        for key, plan in list(self.plans.items()):
            self._check_plan(key, plan, wait=True)
        seen = set()
        for plan in list(self.plans.values()):
            for v in plan.variants:
                if id(v) not in seen:
                    seen.add(id(v))
                    v.synchronize()

    def graph(self):
        """This rank's instruction graph of the last plan launched (runtime/instructions.py), from the
        plans its operators' contexts were lowered to: built once per plan (at the end of its first
        launch), then the same object; on CPU ranks the operators' transfers run from it."""
        if not self.plans:
            raise LaunchError("the pipeline has not been launched yet; its graph is built from its first launch's plan")
        return self._graph(self.plans[next(reversed(self.plans))])

    @staticmethod
    def _graph(plan: Plan):
        from syncopy.runtime import instructions

        if plan.graph is None:
            stages, contexts = [], []
            names = [v.local.fn.__name__ for v in plan.variants]
            for i, v in enumerate(plan.variants):
                ctx = next(reversed(v._contexts.values()))[0]  # the context of the shape launched last: this plan's
                contexts.append(ctx)
                # The operator's name in the graph is what its context's transfers are picked by: two
                # launches of one kernel (or two kernels of one name) get "name#2", "name#3", ...
                label = names[i] if names.count(names[i]) == 1 else f"{names[i]}#{names[:i + 1].count(names[i])}"
                stages.append(instructions.Stage(label, ctx.plan, v.schedule.tensor))
            links = [(e.src, e.dst, f"{stages[e.src].op}.{e.src_arg}", link.chunks) for e, link in plan.links.items()]
            first = stages[0].plan
            plan.graph = instructions.pipeline(instructions.Graph(first.rank, first.world), stages, links)
            for ctx, stage in zip(contexts, stages):
                ctx.bind_graph(plan.graph, stage.op)
        return plan.graph

    def _plan(self, key: tuple, launches: list[Launch]) -> Plan:
        import torch.distributed as dist

        from syncopy.runtime.contexts import checked_group

        plan = self.plans.pop(key, None)
        if plan is None:
            edges = infer_edges(launches)
            variants = [self._variant(x.op, i, edges) for i, x in enumerate(launches)]
            links = {e: LinkSignals(launches[e.src].bound[e.src_arg], self._chunks(launches, e)) for e in edges}
            rank = dist.get_rank(checked_group(launches[0].group))
            for e, link in links.items():
                link.reader = Reader(rank, e.dst_arg, launches[e.dst].name, launches[e.src].name, e.src,
                                     launches[e.dst].op.timeout_s)
            plan = Plan(edges, variants, links)
            while len(self.plans) >= self.max_plans:
                oldest = next(iter(self.plans))
                self._check_plan(oldest, self.plans[oldest], wait=True)  # its errors are not lost with it
                self.plans.pop(oldest, None)
        self.plans[key] = plan  # the most recently used last
        return plan

    @staticmethod
    def _key(launches: list[Launch]) -> tuple:
        """What a plan depends on: the operators, every tensor argument's shape, dtype and device, which
        arguments are the same tensor, and the group (its token: ids of destroyed groups come back)."""
        from syncopy.runtime.backends import control
        from syncopy.runtime.contexts import checked_group

        return structure(launches), control.group_token(checked_group(launches[0].group))

    def _variant(self, op, index: int, edges: list[Edge]):
        wait = next((e.dst_arg for e in edges if e.dst == index), None)
        notify = next((e.src_arg for e in edges if e.src == index), None)
        if wait is None and notify is None:
            return op
        key = (id(op), wait, notify)
        variant = self._variants.get(key)
        if variant is None:
            variant = self._variants[key] = op.linked(wait=wait, notify=notify)
            variant.trace = variant.trace or self.trace
            variant._pipeline_op = op  # keeps the user's operator (and so its id) alive with the variant
            variant._finish_trace = self._trace_finisher(variant._finish_trace)
        return variant

    def _trace_finisher(self, finish):
        """A linked variant's `_finish_trace`: put off while the pipeline enqueues its operators side by
        side (reading the tiles' records waits for the kernel, and the reader's kernel waits for the
        writer's, maybe not enqueued yet), and keeping the tiles' raw device start clocks."""
        def finish_trace(trace, trace_buf, *rest, **kwargs):
            def run():
                finish(trace, trace_buf, *rest, **kwargs)
                trace.clock_starts = _clock_starts(trace_buf)

            if self._deferred_traces is not None:
                self._deferred_traces.append(run)
            else:
                run()
        return finish_trace

    def _chunks(self, launches: list[Launch], e: Edge) -> int:
        if self.link_chunks is not None:
            return self.link_chunks
        import torch.distributed as dist

        from syncopy.runtime.contexts import checked_group

        return writer_chunks(launches[e.src], dist.get_world_size(checked_group(launches[e.src].group)))

    def _tiles_per_chunk(self, variant, writer: Launch, link: LinkSignals) -> list[int]:
        """How many of the writer's tiles store into each chunk of the link, from its probe (once per
        launch shape: the grid and the scalar arguments)."""
        key = variant._shape_key(writer.grid, writer.bound)
        need = link.tiles_per_chunk.get(key)
        if need is None:
            need = link.tiles_per_chunk[key] = _probe_writes(variant, writer, link)
        return need

    def _raise_if_starved_now(self, plan: Plan, epochs: dict, cause: BaseException) -> None:
        """SyncopyTimeout for the first link a reader's tile gave up waiting on, read from the device
        now (the error path of a launch that raised: a sync on GPUs is fine there), if any."""
        for edge, epoch in epochs.items():
            link = plan.links[edge]
            link.errors.check(wait=True)  # an earlier launch's starved reader first
            if edge.src not in self._returned:
                continue  # its writer never launched: the reader starved of that, the error raised says why
            chunk = link.read_error_now()
            if chunk is not None:
                raise link.reader.timeout(link, chunk, epoch, cause)

    def _write_trace(self, plan: Plan, group) -> None:
        """Every operator's trace of this launch, every rank's, gathered by rank 0 (as one operator's are)."""
        import torch.distributed as dist

        from syncopy.runtime import chrome_trace
        from syncopy.runtime.backends import control
        from syncopy.runtime.contexts import checked_group

        traces = [v.last_trace for v in plan.variants if v.last_trace is not None]
        self.last_traces = traces
        if self.trace_file is None:
            return
        timeout = min(v.timeout_s for v in plan.variants)
        cg = control.control_group(checked_group(group), timeout)
        first = dist.get_global_rank(cg, 0)
        gathered = [None] * dist.get_world_size(cg) if dist.get_rank() == first else None
        dist.gather_object(traces, gathered, dst=first, group=cg)
        if gathered is not None:
            # One entry per operator: a list of every rank's trace of it, in launch order.
            per_op = [[rank_traces[i] for rank_traces in gathered] for i in range(len(traces))]
            self.traced_launches = [*self.traced_launches, *per_op][-32 * max(1, len(traces)):]
            chrome_trace.write(self.trace_file, self.traced_launches)


def _probe_writes(variant, writer: Launch, link: LinkSignals) -> list[int]:
    """Tiles per chunk of the link's tensor that the writer's grid stores into, counted by running the
    writer's store-address slice (the reduce_scatter probe of the same kernel) against the link's context."""
    probe = variant.link_probe()
    g0, g1, g2 = variant._grid(writer.grid, writer.bound)
    n = g0 * g1 * g2
    out = torch.full((2 * n,), -1, dtype=torch.int32, device=link.ctx.device)
    dummy = torch.zeros(1, dtype=torch.int32, device=link.ctx.device)
    args = {k: v for k, v in writer.bound.items()}
    probe[writer.grid](**args, syncopy_ctx=link.ctx, syncopy_signals=dummy, syncopy_order=dummy, syncopy_trace=dummy,
                       SYNCOPY_TRACE=False, SYNCOPY_TABLE=False, syncopy_probe_out=out)
    flat = out.tolist()
    need = [0] * link.chunks
    for i in range(n):
        lo, hi = flat[2 * i], flat[2 * i + 1]
        for g in range(max(lo, 0), hi + 1):
            need[g] += 1
    return need


def writer_chunks(writer: Launch, world: int) -> int:
    """A link's chunks by default: its writer's, world x chunks_per_rank (1 a rank where the planner picks)."""
    s = writer.op.schedule
    return (s.chunks_per_rank if isinstance(s.chunks_per_rank, int) else 1) * world


def structure(launches: list[Launch]) -> tuple:
    """The launches' operators, every tensor argument's shape, strides, dtype and device, and which
    arguments are the same tensor (not which tensors: a plan serves new data of the same layout)."""
    seen: dict[tuple, int] = {}
    parts = []
    for x in launches:
        for name, t in sorted(x.tensors().items()):
            ident = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))
            parts.append((id(x.op), name, ident[1:], seen.setdefault(ident, len(seen))))
    return tuple(parts)


def _interpreter_threads() -> bool:
    """Can this process run two interpreted kernels at once (runtime/interpreter_threads.py)?"""
    from syncopy.runtime import interpreter_threads

    return interpreter_threads.enable()


def _cuda_device(launches: list[Launch]):
    """The GPU of the launches' first CUDA tensor (None for CPU launches)."""
    return next((t.device for x in launches for t in x.tensors().values() if t.is_cuda), None)


def _backend_of(variant):
    """The backend of the variant's last launched context (None: a world of one, no transfers)."""
    return next(reversed(variant._contexts.values()))[1] if variant._contexts else None


def _ctas(variant, x: Launch) -> int:
    """CTAs a launch can hold at once: its programs times num_ctas (a cluster on sm_90)."""
    g0, g1, g2 = variant._grid(x.grid, x.bound)
    return g0 * g1 * g2 * int(x.kwargs.get("num_ctas") or 1)


def _reader_first_ok(variant, backend) -> bool:
    """May the reader be enqueued before the writer? Where the writer's launch returns at once (the
    deferred backends) the reader follows it within microseconds anyway, and a stream wait the
    reader's launch puts behind its kernel (p2p's delivered words) must not sit ahead of the writer's
    kernel in a hardware queue two streams may share (runtime/threads.py: such a wait blocked an H200
    for good). A world of one is the case that needs it: the reader's launch (a producer) takes longer on the
    host than a small writer kernel runs (module doc), and it enqueues only fills, write-values, its
    kernel and a copy of its result, no host sync (sequence.py). Not in checked mode, whose launch
    reads its report words after the kernel."""
    return backend is None and bool(variant.producer) and not (variant._built is not None and variant._built[0].checked)


def _forked(variant, x: Launch, side) -> None:
    """The reader's launch on the side stream follows its last launch through the fork alone.

    A launch from another stream than its operator's last one makes its stream wait for that one
    (LaunchSequence._follow_last_launch): at the first launch beside the writer that is the caller's
    stream, which holds the writer once it is enqueued first, so the reader would wait for all of it.
    The fork already put the side stream after everything the caller's stream held before this
    launch (the reader's own last launch too)."""
    from syncopy.runtime.backends import control
    from syncopy.runtime.contexts import checked_group

    variant._last_stream[(control.group_token(checked_group(x.group)), _cuda_device([x]))] = side


def _clock_starts(trace_buf: torch.Tensor) -> list[int]:
    """The raw start clock of every tile that ran (device.trace_clocks: microseconds modulo 2^31;
    %globaltimer's on GPUs, one clock for every kernel of the device)."""
    from syncopy.runtime.tracing import TRACE_WORDS

    flat = trace_buf.tolist()
    return [flat[TRACE_WORDS * s + 3] for s in range(len(flat) // TRACE_WORDS) if flat[TRACE_WORDS * s] > 0]


def pipeline(**options) -> Pipeline:
    """A Pipeline (see its docstring); `with syncopy.pipeline() as p:` around the launches."""
    return Pipeline(**options)
