"""A pipeline's launches run linked: the plan of one (operators, shapes, group), each operator's linked
variant, the links' words enqueued before the operators, the reader beside the writer where the
placement allows, the links' errors read after (see the package's docstring for the orderings)."""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import torch

from syncopy.errors import LaunchError, SyncopyError, SyncopyTimeout
from syncopy.runtime.where import interpreting, on_device, spin_limit
from syncopy.runtime.launch.order import grid3
from syncopy.runtime.launch.turns import held_turn
from syncopy.runtime.pipeline.edges import Edge, Launch, infer_edges, structure, writer_chunks
from syncopy.runtime.pipeline.links import LinkSignals, Reader, link_args
from syncopy.runtime.pipeline.placement import IN_ORDER, Placement, place

_recording = threading.local()


def recording():
    """The pipeline whose `with` block this thread is in, or None."""
    return getattr(_recording, "pipeline", None)


@dataclass
class Plan:
    """What a pipeline runs for one (operators, shapes, group): edges, linked variants, link signals."""

    edges: list[Edge]
    variants: list  # per launch: the FusedKernel that runs it
    links: dict[Edge, LinkSignals]
    graph: object = None  # this rank's instruction graph (runtime/state/instructions.py), built on first ask
    placements: dict = field(default_factory=dict)  # per launch shapes of the operators: their Placement (None: seen once)

    def link_args(self, index: int) -> dict:
        """The context and signal pad of every link of launch `index` (its syncopy_in_* / syncopy_out_*)."""
        return link_args(self.links, index)



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
        _recording.pipeline = self
        return self

    def __exit__(self, kind, value, tb):
        recorded, self._recorded = self._recorded, None
        _recording.pipeline = None
        if kind is None and recorded:
            self.run(recorded)
        return False

    def add(self, op, grid, args, kwargs, group) -> None:
        """Record a launch made inside the `with` block (FusedKernel.__getitem__ calls this)."""
        bound = op.binder.bind(tuple(args), dict(kwargs)).arguments
        self._recorded.append(Launch(op, grid, tuple(args), dict(kwargs), group, bound))
        return None

    # -- running ------------------------------------------------------------------------------------
    def run(self, launches: list[Launch]) -> None:
        """The recorded launches, linked: each edge's epoch and targets (one stream operation), every
        operator (see the module doc for which stream and in which order), then each edge's error
        words copied behind them, read once done (CPU ranks: at once; GPUs: at the next launch or
        `synchronize()`)."""
        from syncopy.runtime.launch.contexts import checked_group

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
            for link in plan.links.values():
                link.errors.make_room()  # before the kernels: an older launch's starved reader raises now
            self.placement = self._placement(plan, launches, device)
            with on_device(device):
                caller = torch.cuda.current_stream(device) if device is not None else None
                for edge, link in plan.links.items():
                    need = self._tiles_per_chunk(plan.variants[edge.src], launches[edge.src], link)
                    timeout = plan.variants[edge.dst].timeout_s
                    epochs[edge] = link.begin(need, spin_limit(timeout, link.ctx.device.type), link.ops.handle(caller))
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
        thread holds for both (runtime/launch/sequence.py, launch); then the side thread is joined and its
        error, if any, raised (the writer's first: a reader starves of a writer that failed). Both
        contexts are made (`_side_thread_refused`): neither launch talks to the peers but by its
        tagged transfers. A writer that fails before its kernel raises once the reader's waits ran out."""
        from syncopy.runtime.transport.backends import control
        from syncopy.runtime.launch.contexts import checked_group

        self._returned = set()
        for index in (0, 1):
            plan.variants[index].link_args = plan.link_args(index)
        failed: list[BaseException] = []
        # Grad and inference mode are per thread: the reader launches in the caller's (a custom op's
        # forward runs with grad off; a new thread would start with it on).
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

        def reader():
            try:
                x = launches[1]
                # in this order: inference_mode(False) turns grad on
                with held_turn(), torch.inference_mode(inference), torch.set_grad_enabled(grad):
                    plan.variants[1][x.grid](*x.args, group=x.group, **x.kwargs)
            except BaseException as exc:  # raised on the caller's thread below
                failed.append(exc)

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
        key = tuple(v.orders.shape_key(x.grid, x.bound) for v, x in zip(plan.variants, launches))
        # Warm: these launch shapes ran before. A new grid compiles (and meets the peers) in its
        # operator's launch, which must not happen while the other operator already spins.
        warm = key in plan.placements
        if device is None or interpreting() or not warm or not chain:
            plan.placements.setdefault(key, None)
            threads = False
            if device is None and interpreting() and warm and chain:
                refused = self._side_thread_refused(plan, launches)
                if refused is not None:
                    return Placement(False, False, f"{IN_ORDER}: {refused}")
                threads = True
            return place(cuda=device is not None, interpreted=interpreting(), warm=warm, chain=chain,
                         reader_ctas=0, writer_ctas=0, sms=0, reserved=0, reader_first_ok=False, threads=threads)
        placement = plan.placements[key]
        if placement is None:
            from syncopy.runtime.streams import hardware_queues, occupancy

            backends = [_backend_of(v) for v in plan.variants]
            reserved = max(occupancy.reserved_sms(b.name) if b is not None else 0 for b in backends)
            writer_ctas, reader_ctas = (_ctas(v, x) for v, x in zip(plan.variants, launches))
            placement = plan.placements[key] = place(
                cuda=True, interpreted=False, warm=True, chain=True, reader_ctas=reader_ctas, writer_ctas=writer_ctas,
                sms=occupancy.sm_count(device), reserved=reserved,
                reader_first_ok=_reader_first_ok(plan.variants[1], backends[1]), single_queue=hardware_queues.single_queue())
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
            if not variant.contexts.touch(x.args, x.kwargs, x.group):
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
        """This rank's instruction graph of the last plan launched (runtime/state/instructions.py), from the
        plans its operators' contexts were lowered to: built once per plan (at the end of its first
        launch), then the same object; on CPU ranks the operators' transfers run from it."""
        if not self.plans:
            raise LaunchError("the pipeline has not been launched yet; its graph is built from its first launch's plan")
        return self._graph(self.plans[next(reversed(self.plans))])

    @staticmethod
    def _graph(plan: Plan):
        from syncopy.runtime.state import instructions

        if plan.graph is None:
            stages, contexts = [], []
            names = [v.local.fn.__name__ for v in plan.variants]
            for i, v in enumerate(plan.variants):
                ctx = next(reversed(v.contexts.table.values()))[0]  # the context of the shape launched last: this plan's
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

        from syncopy.runtime.launch.contexts import checked_group

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
        from syncopy.runtime.transport.backends import control
        from syncopy.runtime.launch.contexts import checked_group

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
            variant.tracer.finish = self._trace_finisher(variant.tracer.finish)
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

        from syncopy.runtime.launch.contexts import checked_group

        return writer_chunks(launches[e.src], dist.get_world_size(checked_group(launches[e.src].group)))

    def _tiles_per_chunk(self, variant, writer: Launch, link: LinkSignals) -> list[int]:
        """How many of the writer's tiles store into each chunk of the link, from its probe (once per
        launch shape: the grid and the scalar arguments)."""
        key = variant.orders.shape_key(writer.grid, writer.bound)
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

        from syncopy.runtime.trace import chrome_trace
        from syncopy.runtime.transport.backends import control
        from syncopy.runtime.launch.contexts import checked_group

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
    probe = variant.kernel.link_probe()
    g0, g1, g2 = grid3(writer.grid, writer.bound)
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



def _interpreter_threads() -> bool:
    """Can this process run two interpreted kernels at once (runtime/pipeline/interpreter_threads.py)?"""
    from syncopy.runtime.pipeline import interpreter_threads

    return interpreter_threads.enable()


def _cuda_device(launches: list[Launch]):
    """The GPU of the launches' first CUDA tensor (None for CPU launches)."""
    return next((t.device for x in launches for t in x.tensors().values() if t.is_cuda), None)


def _backend_of(variant):
    """The backend of the variant's last launched context (None: a world of one, no transfers)."""
    return next(reversed(variant.contexts.table.values()))[1] if variant.contexts.table else None


def _ctas(variant, x: Launch) -> int:
    """CTAs a launch can hold at once: its programs times num_ctas (a cluster on sm_90)."""
    g0, g1, g2 = grid3(x.grid, x.bound)
    return g0 * g1 * g2 * int(x.kwargs.get("num_ctas") or 1)


def _reader_first_ok(variant, backend) -> bool:
    """May the reader be enqueued before the writer? Where the writer's launch returns at once (the
    deferred backends) the reader follows it within microseconds anyway, and a stream wait the
    reader's launch puts behind its kernel (p2p's delivered words) must not sit ahead of the writer's
    kernel in a hardware queue two streams may share (runtime/worlds/threads.py: such a wait blocked an H200
    for good). A world of one is the case that needs it: the reader's launch (a producer) takes longer on the
    host than a small writer kernel runs (module doc), and it enqueues only fills, write-values, its
    kernel and a copy of its result, no host sync (sequence.py). Not in checked mode, whose launch
    reads its report words after the kernel. Never with one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1):
    `place` runs both in order there, before asking this (placement.py's module doc)."""
    return backend is None and bool(variant.producer) and not (variant.kernel.built is not None and variant.kernel.built.transformed.checked)


def _forked(variant, x: Launch, side) -> None:
    """The reader's launch on the side stream follows its last launch through the fork alone.

    A launch from another stream than its operator's last one makes its stream wait for that one
    (sequence.follow_last_launch): at the first launch beside the writer that is the caller's
    stream, which holds the writer once it is enqueued first, so the reader would wait for all of it.
    The fork already put the side stream after everything the caller's stream held before this
    launch (the reader's own last launch too)."""
    from syncopy.runtime.transport.backends import control
    from syncopy.runtime.launch.contexts import checked_group

    variant.contexts.last_stream[(control.group_token(checked_group(x.group)), _cuda_device([x]))] = side


def _clock_starts(trace_buf: torch.Tensor) -> list[int]:
    """The raw start clock of every tile that ran (device.trace_clocks: microseconds modulo 2^31;
    %globaltimer's on GPUs, one clock for every kernel of the device)."""
    from syncopy.runtime.trace.records import TRACE_WORDS

    flat = trace_buf.tolist()
    return [flat[TRACE_WORDS * s + 3] for s in range(len(flat) // TRACE_WORDS) if flat[TRACE_WORDS * s] > 0]


def pipeline(**options) -> Pipeline:
    """A Pipeline (see its docstring); `with syncopy.pipeline() as p:` around the launches."""
    return Pipeline(**options)
