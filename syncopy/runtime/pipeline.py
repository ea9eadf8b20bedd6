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

On CPU ranks the Triton interpreter runs one kernel at a time per process (its program index and its
patches of triton.language are process globals), so `down` starts once `up` has ended and finds the
flags raised; the flags are still the only thing it waits on. On GPUs the flags let `down` run
beside `up`, which needs the launches on two streams (not done yet: both run on the caller's stream).

What a pipeline keeps, per (operators, argument shapes, group) -- its plan, built at the first launch
of a shape: the edges, each operator's linked variant (its own contexts: buffers and signal pads
made once, reused by every launch) and one `LinkSignals` per edge. `max_plans` bounds them.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyError, SyncopyTimeout
from syncopy.runtime.launch import _spin_limit
from syncopy.runtime.streamops import wrap32

_local = threading.local()


def recording():
    """The pipeline whose `with` block this thread is in, or None."""
    return getattr(_local, "pipeline", None)


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
    producer notifies and consumer waits of device.py read). Counters and flags are never reset:
    each launch adds the tiles it expects per chunk to the targets, and the flags carry its epoch."""

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
        self._targets = [0] * n
        self.epoch = 0
        self.tiles_per_chunk: dict[tuple, list[int]] = {}  # per launch shape of the writer (its probe's answer)

    def args(self, direction: str) -> dict:
        from syncopy.passes import link

        ctx, signals = link.params(direction)
        return {ctx: self.ctx, signals: self.signals}

    def begin(self, need: list[int], spin_limit: int) -> int:
        """Launch `epoch + 1`: its epoch and wait bound, its targets (counters go on from the last)."""
        self.epoch += 1
        self.ctx[dev.CTX_EPOCH.value] = wrap32(self.epoch)
        self.ctx[dev.CTX_SPIN_LIMIT.value] = spin_limit
        self.signals[: dev.SIG_HEADER] = 0
        n = self.chunks
        self._targets = [wrap32(t + k) for t, k in zip(self._targets, need)]
        at = dev.SIG_HEADER + 2 * n + 2  # after the flags, the two words and the counters
        self.signals[at : at + n] = torch.tensor(self._targets, dtype=torch.int32)
        # A chunk no tile writes is complete at once (its rows keep what the tensor held).
        for g in (g for g, k in enumerate(need) if k == 0):
            self.signals[dev.SIG_HEADER + g] = wrap32(self.epoch)
        return self.epoch

    def error(self) -> int | None:
        """The chunk a reader's tile gave up waiting for in this launch, or None."""
        flag, _, chunk, _ = (int(x) for x in self.signals[: dev.SIG_HEADER].tolist())
        return chunk if flag else None

    @property
    def nbytes(self) -> int:
        return self.ctx.numel() * 8 + self.signals.numel() * 4


@dataclass
class Plan:
    """What a pipeline runs for one (operators, shapes, group): edges, linked variants, link signals."""

    edges: list[Edge]
    variants: list  # per launch: the FusedKernel that runs it
    links: dict[Edge, LinkSignals]
    graph: object = None  # this rank's instruction graph (runtime/instructions.py), built on first ask

    def link_args(self, index: int) -> dict:
        """The context and signal pad of every link of launch `index` (its syncopy_in_* / syncopy_out_*)."""
        out = {}
        for e, link in self.links.items():
            if e.src == index:
                out.update(link.args("out"))
            if e.dst == index:
                out.update(link.args("in"))
        return out


class Pipeline:
    """Fused operators launched together, linked by per-chunk signals on the tensors they share.

    Use it as a context manager around the launches (`with pipe: op1[g1](...); op2[g2](...)`): they run
    when the block ends, in the order written, each operator waiting on the device for the rows it
    reads from an earlier one (see the module doc). `link_chunks`: chunks per shared tensor (default:
    the writer's chunks, world x chunks_per_rank). `trace`: True records every operator's `last_trace`;
    a path also writes one Chrome / Perfetto trace of all of them, every rank (rank 0 writes)."""

    def __init__(self, *, link_chunks: int | None = None, trace=False, max_plans: int = 16):
        import os

        self.link_chunks = link_chunks
        self.trace = bool(trace)
        self.trace_file = os.fspath(trace) if isinstance(trace, (str, os.PathLike)) else None
        self.traced_launches: list[list] = []
        self.last_traces: list = []  # trace=True: every operator's Trace of the last launch, on this rank
        self.max_plans = max_plans
        self.plans: dict[tuple, Plan] = {}
        self._variants: dict[tuple, object] = {}  # (id of the user's operator, roles) -> linked variant
        self._recorded: list[Launch] | None = None
        self.launches = 0

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
        """The recorded launches, linked: each edge's epoch and targets, then every operator in order,
        then each edge's error word (a reader that gave up waiting)."""
        from syncopy.runtime.contexts import checked_group

        groups = {id(checked_group(x.group)) for x in launches}
        if len(groups) > 1:
            raise LaunchError("the launches of a pipeline run on different process groups; pass the same group= to every "
                              "launch in the `with` block (a link is between two kernels of one rank)")
        key = self._key(launches)
        plan = self._plan(key, launches)
        epochs = {}
        try:
            for edge, link in plan.links.items():
                writer = launches[edge.src]
                need = self._tiles_per_chunk(plan.variants[edge.src], writer, link)
                timeout = plan.variants[edge.dst].timeout_s
                epochs[edge] = link.begin(need, _spin_limit(timeout, link.ctx.device.type))
            for index, (variant, x) in enumerate(zip(plan.variants, launches)):
                # A linked variant serves every plan of its operator (one compile), so it takes this
                # plan's links at each launch: links given once, when a plan was made, would send a
                # plan reused after another shape's plan was made onto that shape's link, whose
                # counts then overshoot their targets and starve its next launch.
                variant.link_args = plan.link_args(index)
                variant[x.grid](*x.args, group=x.group, **x.kwargs)
            self._raise_if_starved(launches, plan, epochs)
        except BaseException as exc:
            # A launch that stopped part way leaves its links' counts behind their targets: the next
            # launch of these shapes starts from new links (the operators keep their own contexts).
            self.plans.pop(key, None)
            if isinstance(exc, SyncopyError) and epochs:
                # A reader's transfers give up on the chunks it never finished about when its tiles
                # give up on the link, and the transfer's error would hide the link's, which is the cause.
                self._raise_if_starved(launches, plan, epochs, cause=exc)
            raise
        self.launches += 1
        if self.trace:
            self._write_trace(plan, launches[0].group)

    def graph(self):
        """This rank's instruction graph of the last plan launched (runtime/instructions.py), from the
        plans its operators' contexts were lowered to: built once per plan, then the same object."""
        from syncopy.runtime import instructions

        if not self.plans:
            raise LaunchError("the pipeline has not been launched yet; its graph is built from its first launch's plan")
        plan = self.plans[next(reversed(self.plans))]
        if plan.graph is None:
            stages = []
            for v in plan.variants:
                ctx = next(reversed(v._contexts.values()))[0]  # the context of the shape launched last
                stages.append(instructions.Stage(v.local.fn.__name__, ctx.plan, v.schedule.tensor))
            links = [(e.src, e.dst, f"{stages[e.src].op}.{e.src_arg}", link.chunks) for e, link in plan.links.items()]
            first = stages[0].plan
            plan.graph = instructions.pipeline(instructions.Graph(first.rank, first.world), stages, links)
        return plan.graph

    def _plan(self, key: tuple, launches: list[Launch]) -> Plan:
        plan = self.plans.pop(key, None)
        if plan is None:
            edges = infer_edges(launches)
            variants = [self._variant(x.op, i, edges) for i, x in enumerate(launches)]
            links = {e: LinkSignals(launches[e.src].bound[e.src_arg], self._chunks(launches, e)) for e in edges}
            plan = Plan(edges, variants, links)
            while len(self.plans) >= self.max_plans:
                self.plans.pop(next(iter(self.plans)))
        self.plans[key] = plan  # the most recently used last
        return plan

    @staticmethod
    def _key(launches: list[Launch]) -> tuple:
        """What a plan depends on: the operators, every tensor argument's shape, dtype and device, which
        arguments are the same tensor, and the group (its token: ids of destroyed groups come back)."""
        from syncopy.runtime.backends import control

        seen: dict[tuple, int] = {}
        parts = []
        for x in launches:
            for name, t in sorted(x.tensors().items()):
                ident = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))
                parts.append((id(x.op), name, ident[1:], seen.setdefault(ident, len(seen))))
        from syncopy.runtime.contexts import checked_group

        return tuple(parts), control.group_token(checked_group(launches[0].group))

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
        return variant

    def _chunks(self, launches: list[Launch], e: Edge) -> int:
        if self.link_chunks is not None:
            return self.link_chunks
        import torch.distributed as dist

        from syncopy.runtime.contexts import checked_group

        s = launches[e.src].op.schedule
        per_rank = s.chunks_per_rank if isinstance(s.chunks_per_rank, int) else 1
        return per_rank * dist.get_world_size(checked_group(launches[e.src].group))

    def _tiles_per_chunk(self, variant, writer: Launch, link: LinkSignals) -> list[int]:
        """How many of the writer's tiles store into each chunk of the link, from its probe (once per
        launch shape: the grid and the scalar arguments)."""
        key = variant._shape_key(writer.grid, writer.bound)
        need = link.tiles_per_chunk.get(key)
        if need is None:
            need = link.tiles_per_chunk[key] = _probe_writes(variant, writer, link)
        return need

    def _raise_if_starved(self, launches: list[Launch], plan: Plan, epochs: dict, cause: BaseException | None = None) -> None:
        """SyncopyTimeout for the first link a reader's tile gave up waiting on in this launch, if any."""
        import torch.distributed as dist

        from syncopy.runtime.contexts import checked_group

        for edge, epoch in epochs.items():
            link = plan.links[edge]
            chunk = link.error()
            if chunk is None:
                continue
            rank = dist.get_rank(checked_group(launches[edge.dst].group))
            lo, hi = link.bounds[chunk]
            raise SyncopyTimeout(rank, (rank, chunk), epoch, launches[edge.dst].op.timeout_s,
                                 f"it is rows {lo}..{hi - 1} of '{edge.dst_arg}', which {launches[edge.dst].name} waits for and "
                                 f"{launches[edge.src].name} (launch {edge.src + 1} of the pipeline) writes",
                                 f"check that {launches[edge.src].name} writes every row {launches[edge.dst].name} reads, or "
                                 "raise timeout_s") from cause

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


def pipeline(**options) -> Pipeline:
    """A Pipeline (see its docstring); `with syncopy.pipeline() as p:` around the launches."""
    return Pipeline(**options)
