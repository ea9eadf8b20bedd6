"""The decorator: `syncopy.overlap(schedule)(jit_fn)` makes a multi-GPU operator of a local kernel.

    @syncopy.overlap("ag.yaml")          # or a dict, or a Schedule
    @triton.jit
    def mm(A, B, C, M, N, K, ...): ...   # reads and writes full tensors, knows nothing of ranks

    mm[grid](a_shard, b, c, M, N, K, ..., group=pg)

Equivalent to (the reference, `mm.reference[grid](...)`):

    a = torch.empty(world * a_shard.shape[0], ...); dist.all_gather_into_tensor(a, a_shard)
    local_mm[grid](a, b, c, M, N, K, ...)

but the gather hides inside the kernel: each tile waits only for the chunks it reads, and tiles
run in the order their chunks arrive.
"""
from __future__ import annotations

import inspect
import os
import threading
from pathlib import Path

import torch
import torch.distributed as dist

from typing import TYPE_CHECKING

from syncopy.errors import LaunchError
from syncopy.runtime.state import plan as planning
from syncopy.runtime.transport import backends, splits
from syncopy.runtime.launch import tuning
from syncopy.runtime.state.context import Context
from syncopy.runtime.trace.records import Trace
from syncopy.runtime.transport.link import Faults, Link
from syncopy.schedule import Schedule, load_schedule
from syncopy.schedule.model import PRODUCER_PATTERNS
# The launch's parts live in syncopy/runtime/launch; FusedKernel is their user-facing face (imports flow one way: api -> runtime).
from syncopy.runtime.launch.binding import Binding
from syncopy.runtime.launch.contexts import Contexts, checked_group
from syncopy.runtime.where import ensure_allocator
from syncopy.runtime.launch.order import TileOrder
from syncopy.runtime.pipeline.run import Linking
from syncopy.runtime.launch.sequence import LaunchSequence
from syncopy.runtime.launch.tracing import Tracing

if TYPE_CHECKING:
    from syncopy.passes.transformed import Transformed


def _require_jit(jit_fn) -> None:
    """Decorating a plain function (no @triton.jit, or the decorators swapped) fails here, at
    decoration time, pointing at the function's def line."""
    if callable(getattr(jit_fn, "fn", None)):
        return
    from syncopy.errors import KernelError, SourceLocation

    code = getattr(jit_fn, "__code__", None)
    where = SourceLocation(code.co_filename, code.co_firstlineno, 1) if code is not None else None
    name = getattr(jit_fn, "__name__", None)
    got = f"function '{name}'" if code is not None else f"'{name}'" if name else type(jit_fn).__name__
    raise KernelError(f"@syncopy.overlap needs a @triton.jit kernel: put @triton.jit under @syncopy.overlap (got {got})", where)


def _check_max_rows(max_rows) -> None:
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        raise LaunchError(f"max_rows must be a positive whole number of rows per rank (got {max_rows!r}); e.g. max_rows=4096, "
                          "or leave it out to size buffers by the shapes launched")


#: The longest timeout_s: the transfer threads join after 2 * timeout_s + 5 s, within threading.TIMEOUT_MAX.
MAX_TIMEOUT_S = 1e9


def _check_timeout(timeout_s) -> None:
    """timeout_s is a number of seconds that every wait (host and device) can take, checked at decoration."""
    import math
    import numbers

    ok = isinstance(timeout_s, numbers.Real) and not isinstance(timeout_s, bool) and 0 < timeout_s <= MAX_TIMEOUT_S
    if not ok or math.isnan(timeout_s):
        raise LaunchError(f"timeout_s must be a positive number of seconds, at most {MAX_TIMEOUT_S:g} (got {timeout_s!r}); e.g. timeout_s=60")


class FusedKernel(Binding, Contexts, TileOrder, Tracing, LaunchSequence, Linking):
    """A local Triton kernel fused with the communication its schedule describes.

    Launch it like the local kernel, `fused[grid](*args, group=pg)`, passing the communicated argument
    at its per-rank (sharded) size. `fused.reference[grid](...)` runs the unfused equivalent.
    """

    def __init__(self, kernel, schedule: Schedule, *, backend: str = "auto", timeout_s: float = 60.0,
                 link: Link | None = None, faults: Faults | None = None, trace: bool | str | os.PathLike = False,
                 poison_receive: bool = False, dump_dir: str | Path | None = None,
                 one_shot_max_bytes: int = planning.ONE_SHOT_MAX_BYTES, hardware: str | None = None, workload=None,
                 checked: bool | None = None, _loaded: tuple | None = None, verify_chunks: bool = False,
                 max_rows: int | None = None):
        # An autotuned or heuristic kernel: fuse the @triton.jit function under the wrappers, and
        # play their part at each launch (runtime/launch/tuning.py).
        jit_fn, layers = tuning.unwrap(kernel)
        _require_jit(jit_fn)
        _check_timeout(timeout_s)
        _check_max_rows(max_rows)
        self.local = jit_fn
        self.max_rows = max_rows  # buffers provisioned for this many rows per rank, shared by smaller shapes
        self._arenas: dict = {}  # (group token, dtype, device) -> Arena (runtime/state/context.py)
        # A kernel from syncopy.load is the fused one already: no local kernel to time configs on.
        self.tuning = tuning.Tuning(layers, jit_fn.fn.__name__, can_time=_loaded is None) if layers else None
        self.producer = schedule.pattern in PRODUCER_PATTERNS
        self.one_shot_max_bytes = one_shot_max_bytes
        self.schedule = schedule
        self.hardware, self.workload = hardware, workload
        self.backend_name = backend
        self.timeout_s = timeout_s
        self.link, self.faults = link, faults
        # trace=True records `last_trace`; a path also writes every rank's trace there (rank 0, each launch).
        self.trace = bool(trace)
        self.trace_file = os.fspath(trace) if isinstance(trace, (str, os.PathLike)) else None
        self.traced_launches: list[list[Trace]] = []
        self.poison_receive = poison_receive
        self.verify_chunks = verify_chunks  # chunks travel with a checksum, checked as they land (gloo)
        self.dump_dir = dump_dir
        self.checked = checked  # None: $SYNCOPY_CHECKED decides, at the first launch (passes/read_check.py)
        self.signature = _user_signature(jit_fn.fn)
        if schedule.kernel is not None and schedule.kernel != jit_fn.fn.__name__:
            raise LaunchError(
                f"the schedule is for kernel '{schedule.kernel}' but decorates '{jit_fn.fn.__name__}'; "
                "fix `kernel:` or drop it"
            )
        for tensor in schedule.tensors:
            if tensor not in self.signature.parameters:
                raise LaunchError(
                    f"kernel '{jit_fn.fn.__name__}' has no argument '{tensor}' (schedule key tensor); "
                    f"its arguments are {', '.join(self.signature.parameters)}"
                )
        self._built: tuple[Transformed, object, object, Path] | None = None
        self.loaded = _loaded is not None
        if _loaded is not None:  # (probe, what the runtime needs to know): built by `syncopy transform --loadable`
            probe, t = _loaded
            self._built = (t, jit_fn, probe, Path(t.source.path))
        self._positions: dict[tuple, list[str]] = {}  # (positions, keywords) of a launch -> the names of its positions
        self._contexts: dict[tuple, tuple[Context, object]] = {}
        # Threads may share an operator (a template op is one operator per process): launches on one
        # group take turns (see _serialised_launch); the compile step runs once.
        self._build_lock = threading.Lock()
        self._last_stream: dict = {}  # (group token, CUDA device) -> the stream of the last launch there
        self.last_trace: Trace | None = None
        # What the last launch ran with; for `auto` schedules, the planner's choice and its reason.
        self.resolved_chunks_per_rank: int | None = None
        self.resolved_order: str | list[int] | None = None
        self.last_resolution = None  # syncopy.planner.auto.Resolution, for `auto` schedules

    # -- compile --------------------------------------------------------------------------------
    def build(self) -> Transformed:
        """Run the passes (once) and import the generated module."""
        with self._build_lock:
            if self._built is None:
                # The frontend (libcst) only here: a kernel from syncopy.load never builds.
                from syncopy.emit import source as emit
                from syncopy.frontend.source import from_jit
                from syncopy.passes import read_check, transform

                ks = from_jit(self.local)
                if self.link_roles:  # a pipeline's variant: its links' waits and notifies first (passes/link.py)
                    from syncopy.passes import link

                    ks = link.apply(ks, **self.link_roles)
                t = transform(ks, self.schedule)
                if self.checked if self.checked is not None else read_check.enabled_by_env():
                    t = read_check.apply(t)
                fused, probe, path = emit.load(t, self.local.fn.__globals__)
                if self.dump_dir is not None:
                    emit.dump(t, self.dump_dir)
                self._built = (t, fused, probe, path)
        return self._built[0]

    @property
    def source(self) -> str:
        """The generated module's text."""
        self.build()
        return self._built[3].read_text()

    @property
    def fused(self):
        self.build()
        return self._built[1]

    # -- launch ---------------------------------------------------------------------------------
    def backend_for(self, device, group=None) -> str:
        """The backend that moves this operator's chunks for tensors on `device` in `group`: the
        `backend=` name, or for 'auto' gloo on CPU, p2p when the group's ranks share one node, nccl
        otherwise. Collective the first time for 'auto' on CUDA (every rank must call it, as every
        launch does). A persistent kernel sizes its grid with it:
        `syncopy.runtime.streams.occupancy.programs(device, fused.backend_for(device, group))`."""
        group = group if group is not None else dist.group.WORLD
        return backends.backend_for(self.backend_name, torch.device(device).type, group)

    def __getitem__(self, grid):
        def launch(*args, group=None, **kwargs):
            from syncopy.runtime import pipeline

            recording = pipeline.recording()
            if recording is not None:  # inside `with pipe:` the launch joins the pipeline (runtime/pipeline/__init__.py)
                return recording.add(self, grid, args, kwargs, group)
            return self._serialised_launch(grid, args, kwargs, group)

        return launch

    @property
    def reference(self):
        """Unfused equivalent: all_gather_into_tensor of the shards, then the local kernel."""
        fk = self

        class _Ref:
            def __getitem__(self, grid):
                def run(*args, group=None, **kwargs):
                    fk._refuse_grad(args, kwargs)  # the local kernel records no autograd graph either
                    return fk._reference(grid, args, kwargs, group)

                return run

        return _Ref()


    def _reference(self, grid, args, kwargs, group):
        if self.loaded:
            raise LaunchError(f"'{self.local.fn.__name__}' comes from syncopy.load: its file holds the fused kernel only, so there is "
                              "no local kernel to run unfused; decorate the original kernel with syncopy.overlap for .reference")
        group = checked_group(group)
        kwargs = dict(kwargs)
        split = splits.pop(kwargs, self.signature.parameters, self.schedule.pattern, self.local.fn.__name__)
        bound, shard, options = self._bind(args, kwargs)
        ensure_allocator(shard.device)
        if self.producer:
            return self._reference_producer(grid, bound, shard, options, group)
        if self.schedule.pattern == "all_to_all":
            if self.schedule.dim != 0:
                raise LaunchError("the all_to_all reference splits along dim 0; use dim: 0")
            if not self._uneven(split, shard):
                received = torch.empty_like(shard)
                dist.all_to_all_single(received, shard.contiguous(), group=group)
            else:  # uneven: all_to_all_single with the same splits (the counts exchanged and checked the same way)
                world, rank, kernel = dist.get_world_size(group), dist.get_rank(group), self.local.fn.__name__
                send, said, error = splits.local(split, shard, self.schedule.tensor, self.schedule.dim, world, kernel)
                recv = splits.exchange(send, said, error, group, world, rank, kernel)
                received = shard.new_empty((sum(recv), *shard.shape[1:]))
                dist.all_to_all_single(received, shard.contiguous(), list(recv), list(send), group=group)
            call_args = dict(bound)
            call_args[self.schedule.tensor] = received
            self._run_local(grid, call_args, options, group)
            return
        from syncopy.runtime.launch.reference import all_gather_rows

        call_args = dict(bound)
        for name in self.schedule.tensors:  # every listed tensor, gathered along `dim`
            if self.schedule.dim == 0:
                call_args[name] = all_gather_rows(bound[name], group)
            else:
                parts = [torch.empty_like(bound[name]) for _ in range(dist.get_world_size(group))]
                dist.all_gather(parts, bound[name], group=group)
                call_args[name] = torch.cat(parts, dim=self.schedule.dim).contiguous()
        self._run_local(grid, call_args, options, group)


    def _reference_producer(self, grid, bound: dict, out: torch.Tensor, options: dict, group) -> None:
        """all_reduce: the local kernel on this rank's `out` as passed (it may read it: `C += A @ B`),
        then all_reduce, so out = sum over ranks r of kernel(C_r). reduce_scatter: the local kernel
        into a full buffer of zeros, then reduce_scatter_tensor, so unwritten elements sum to 0."""
        world = dist.get_world_size(group)
        call_args = dict(bound)
        if self.schedule.pattern == "all_reduce":
            self._run_local(grid, call_args, options, group)
            dist.all_reduce(out, group=group)
            return
        shape = list(out.shape)
        shape[self.schedule.dim] *= world
        full = torch.zeros(shape, dtype=out.dtype, device=out.device)
        call_args[self.schedule.tensor] = full
        self._run_local(grid, call_args, options, group)
        # gloo has no reduce_scatter: all_reduce and keep this rank's part (same sums).
        dist.all_reduce(full, group=group)
        rows = out.shape[self.schedule.dim]
        out.copy_(full.narrow(self.schedule.dim, dist.get_rank(group) * rows, rows))


def _user_signature(fn) -> inspect.Signature:
    """The kernel's parameters as its launches pass them: a fused kernel's own (syncopy.load) less the
    ones syncopy adds (names starting with syncopy_ are reserved for those, passes/signature.py)."""
    sig = inspect.signature(fn)
    return sig.replace(parameters=[p for p in sig.parameters.values() if not p.name.lower().startswith("syncopy_")])


def load(path: str | Path, schedule, **options) -> FusedKernel:
    """The launchable operator of a file `syncopy transform KERNEL.py --schedule S.yaml --loadable -o
    path` wrote: the same object `syncopy.overlap(schedule)` makes of the original kernel (launch it
    the same way), without the frontend (libcst need not be installed). `schedule` must be the one
    the file was transformed with, and this syncopy the version that wrote it (one-line errors
    otherwise). `options`: those of syncopy.overlap but chunks_per_rank and order (part of the
    schedule) and checked (fixed when the file was written). An autotuned kernel takes its config
    as under the interpreter, also on GPUs ($SYNCOPY_AUTOTUNE_CONFIG, default the first): the
    file has no local kernel to time configs on. `.reference` needs the original kernel."""
    from syncopy.runtime.launch import loaded

    _check_timeout(options.get("timeout_s", 60.0))
    sched = load_schedule(schedule)
    kernel, probe, t = loaded.open_file(path, sched)
    return FusedKernel(kernel, sched, _loaded=(probe, t), **options)


def overlap(schedule, *, chunks_per_rank: int | str | None = None, order: str | list[int] | None = None,
            hardware: str | None = None, workload=None, backend: str = "auto", timeout_s: float = 60.0,
            link: Link | None = None, faults: Faults | None = None, trace: bool | str | os.PathLike = False, poison_receive: bool = False,
            dump_dir: str | Path | None = None, one_shot_max_bytes: int = planning.ONE_SHOT_MAX_BYTES,
            checked: bool | None = None, verify_chunks: bool = False, max_rows: int | None = None):
    """Decorator factory: `overlap(schedule)(jit_fn) -> FusedKernel`.

    schedule: a path to a YAML/JSON file, a dict, or a `Schedule`.
    chunks_per_rank, order: override the schedule's keys (same values, "auto" included).
    hardware: the planner's profile for `auto` (a name or a YAML path; default $SYNCOPY_HARDWARE,
    else cpu-gloo on CPU and the GPU's own profile on CUDA). workload: what the planner takes the
    kernel for (a template name, an (M, N, K) tuple or a Workload; see syncopy.planner.auto).
    backend: 'auto' (gloo for CPU tensors; for CUDA tensors p2p when every rank runs on one node, nccl
    otherwise), 'gloo', 'p2p' (copy-engine puts through CUDA IPC) or 'nccl' (NCCL send/recv; grids
    are capped to leave SMs to NCCL, see syncopy.runtime.streams.occupancy). timeout_s (seconds, above 0, at most 1e9) bounds every wait
    (SyncopyTimeout). link/faults: emulated link and injected faults (gloo; p2p drops chunks too). trace: record arrivals and tile
    starts in `fused.last_trace`; a file name also writes a Chrome / Perfetto trace of every rank there after each launch
    (rank 0 writes it; it keeps the last 32 launches). poison_receive: fill the receive buffer with NaN before each launch.
    one_shot_max_bytes: an all_reduce of at most this many bytes is one-shot (every rank adds all
    partials) instead of reduce-scatter + all-gather.
    checked: every read of the communicated tensor checks that its chunks arrived, every producer
    store that its chunk was not announced yet; a violation raises SyncopyReadError naming the
    kernel's line, rank, chunk and epoch (default: $SYNCOPY_CHECKED=1 turns it on).
    verify_chunks: each chunk travels with a CRC-32 of its bytes, checked as it lands; a mismatch raises
    SyncopyCorruptChunk naming the chunk, its source rank and the epoch (gloo backend, CPU worlds).
    max_rows: rows per rank (of the communicated tensor, along `dim`) to provision the big buffer for:
    launches whose shapes vary (token counts) share one buffer made at that size, grown only when a
    launch needs more (gloo backend, CPU worlds; on GPUs each shape keeps its own buffer for now).

    all_gather: pass the communicated argument as this rank's shard; the kernel sees the gathered
    tensor. reduce_scatter: pass it as this rank's shard of the result (rows / world); the kernel
    writes its full partial result, into a partial that starts at zero, and the argument receives
    the sum over ranks of this rank's rows. all_reduce: pass it at full size; the kernel sees it as
    passed (so `C += A @ B` works), and it receives the sum over ranks of what the kernel made of
    each rank's C. With poison_receive, producers poison the output once the kernel's partial holds
    what it needs from it.
    """
    _check_timeout(timeout_s)
    sched = _override(load_schedule(schedule), chunks_per_rank=chunks_per_rank, order=order)

    def wrap(jit_fn) -> FusedKernel:
        return FusedKernel(jit_fn, sched, backend=backend, timeout_s=timeout_s, link=link, faults=faults,
                           trace=trace, poison_receive=poison_receive, dump_dir=dump_dir, hardware=hardware,
                           workload=workload, one_shot_max_bytes=one_shot_max_bytes, checked=checked,
                           verify_chunks=verify_chunks, max_rows=max_rows)

    return wrap


def _override(schedule: Schedule, **keys) -> Schedule:
    """`schedule` with the given keys replaced (None: keep), validated like the schedule itself."""
    from syncopy.errors import ScheduleError, ScheduleLocation
    from syncopy.schedule import from_dict

    update = {k: v for k, v in keys.items() if v is not None}
    if not update:
        return schedule
    try:
        return from_dict({**schedule.model_dump(exclude_none=True), **update})
    except ScheduleError as exc:
        # Point at the argument the value came from, not at the schedule file.
        raise ScheduleError(exc.message, ScheduleLocation("syncopy.overlap", exc.location.key if exc.location else "")) from None
