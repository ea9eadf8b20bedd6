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

import copy
import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from syncopy.errors import LaunchError
from syncopy.runtime.launch import reference, sequence, tuning
from syncopy.runtime.launch.binding import Binder
from syncopy.runtime.launch.contexts import Contexts
from syncopy.runtime.launch.kernel import Built, Kernel
from syncopy.runtime.launch.order import TileOrders
from syncopy.runtime.launch.tracing import Tracer
from syncopy.runtime.state import plan as planning
from syncopy.runtime.trace.records import Trace
from syncopy.runtime.transport import backends
from syncopy.runtime.transport.link import Faults, Link
from syncopy.schedule import Schedule, load_schedule
from syncopy.schedule.model import PRODUCER_PATTERNS

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


def _bound_as(jit_fn, name: str) -> bool:
    """Whether `name` is the kernel's name in its module: `g = triton.jit(f)` makes kernel g of function f."""
    import sys

    module = sys.modules.get(getattr(jit_fn.fn, "__module__", None) or "")
    return module is not None and getattr(module, name, None) is jit_fn


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


class FusedKernel:
    """A local Triton kernel fused with the communication its schedule describes.

    Launch it like the local kernel, `fused[grid](*args, group=pg)`, passing the communicated argument
    at its per-rank (sharded) size. `fused.reference[grid](...)` runs the unfused equivalent.

    It holds the parts of a launch (syncopy/runtime/launch/): `kernel` (the fused kernel, compiled
    once), `binder` (a launch's arguments by name), `contexts` (buffers, signal pads and backends per
    shape), `orders` (the tile order per launch shape) and `tracer`; a launch is
    `runtime.launch.sequence.launch`, one function calling them in order. What it keeps besides are
    its settings (the options of `syncopy.overlap`) and what the last launch ran with.
    """

    #: The budgets of the contexts kept per group (runtime/launch/contexts.py); None: the environment's, or the default.
    max_contexts: int | None = None
    max_context_bytes: int | None = None

    def __init__(self, kernel, schedule: Schedule, *, backend: str = "auto", timeout_s: float = 60.0,
                 link: Link | None = None, faults: Faults | None = None, trace: bool | str | os.PathLike = False,
                 poison_receive: bool = False, dump_dir: str | Path | None = None,
                 one_shot_max_bytes: int = planning.ONE_SHOT_MAX_BYTES, hardware: str | None = None, workload=None,
                 checked: bool | None = None, _loaded: tuple | None = None, verify_chunks: bool = False,
                 max_rows: int | None = None, strict: bool = False):
        # An autotuned or heuristic kernel: fuse the @triton.jit function under the wrappers, and
        # play their part at each launch (runtime/launch/tuning.py).
        jit_fn, layers = tuning.unwrap(kernel)
        _require_jit(jit_fn)
        _check_timeout(timeout_s)
        _check_max_rows(max_rows)
        self.local = jit_fn
        self.max_rows = max_rows  # buffers provisioned for this many rows per rank, shared by smaller shapes
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
        # A fallback that costs overlap (every chunk waited for, tiles in launch order): refused (strict),
        # or said once as a SyncopyFallbackWarning at the first launch (syncopy/explain.py, report_fallbacks).
        self.strict = strict
        self.signature = _user_signature(jit_fn.fn)
        if schedule.kernel is not None and schedule.kernel != jit_fn.fn.__name__ and not _bound_as(jit_fn, schedule.kernel):
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
        self.loaded = _loaded is not None
        # A pipeline's variant (`linked`): the tensors linked to its neighbours, {"wait": ..., "notify": ...},
        # and at each launch its links' contexts and signal pads (syncopy_in_* / syncopy_out_*).
        self.link_roles: dict = {}
        self.link_args: dict = {}
        self.last_trace: Trace | None = None
        # What the last launch ran with; for `auto` schedules, the planner's choice and its reason.
        self.resolved_chunks_per_rank: int | None = None
        self.resolved_order: str | list[int] | None = None
        self.last_resolution = None  # syncopy.planner.auto.Resolution, for `auto` schedules
        built = None
        if _loaded is not None:  # (probe, what the runtime needs to know): built by `syncopy transform --loadable`
            probe, t = _loaded
            built = Built(t, jit_fn, probe, Path(t.source.path))
        self._make_parts(built)

    def _make_parts(self, built: Built | None = None) -> None:
        """The parts of a launch, each holding its own state (a variant makes its own, see `linked`)."""
        self.kernel = Kernel(self, built)
        self.binder = Binder(self)
        self.contexts = Contexts(self)
        self.orders = TileOrders(self)
        self.tracer = Tracer(self)

    # -- compile --------------------------------------------------------------------------------
    def build(self) -> Transformed:
        """Run the passes (once) and import the generated module."""
        return self.kernel.build().transformed

    @property
    def source(self) -> str:
        """The generated module's text."""
        return self.kernel.build().path.read_text()

    @property
    def fused(self):
        return self.kernel.build().fused

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
            if recording is not None:  # inside `with pipe:` the launch joins the pipeline (runtime/pipeline/)
                return recording.add(self, grid, args, kwargs, group)
            return sequence.launch(self, grid, args, kwargs, group)

        return launch

    # What Triton's wrappers call on the kernel they wrap, so that `@triton.heuristics` may sit above
    # `@syncopy.overlap` too. (`@triton.autotune` belongs below it: timing a fused launch would
    # launch collectives a different number of times on each rank.)
    @property
    def arg_names(self) -> list[str]:
        return list(self.signature.parameters)

    def run(self, *args, grid, warmup=False, group=None, **kwargs):
        if warmup:
            raise LaunchError(f"'{self.local.fn.__name__}': a fused kernel cannot be warmed up alone; launch it")
        return sequence.launch(self, grid, args, kwargs, group)

    @property
    def reference(self):
        """Unfused equivalent: all_gather_into_tensor of the shards, then the local kernel."""
        fk = self

        class _Ref:
            def __getitem__(self, grid):
                def run(*args, group=None, **kwargs):
                    return reference.run(fk, grid, args, kwargs, group)

                return run

        return _Ref()

    def synchronize(self) -> None:
        """Wait for this operator's launches so far and raise the first error among them
        (SyncopyTimeout, naming rank, chunk and epoch). On GPUs a warm launch returns once its work
        is enqueued, like any CUDA op (p2p with one rank per GPU, and a world of one); its errors
        surface at the next launch of the same shape or here. CPU launches return when they are done and raise at once."""
        sequence.synchronize(self)

    def release(self, group=None) -> None:
        """Drop this operator's buffers, signal pads and tile tables: of `group`, or of every group
        (None). Like a launch, every rank of the group calls it at the same point of its launches
        (the next launch of a shape is a first launch again, which is collective). On GPUs it waits
        for the launches still running first."""
        self.contexts.release(group)

    def context_budget(self) -> tuple[int, int]:
        """(contexts, bytes) this operator keeps per process group."""
        return self.contexts.budget()

    # -- pipelines ------------------------------------------------------------------------------
    def linked(self, wait: str | None = None, notify: str | None = None) -> FusedKernel:
        """This operator as a pipeline runs it: its tiles wait for the chunks of `wait` that the
        operator before it announces, and announce the chunks of `notify` they finish (either None).
        A new operator with its own parts (contexts, kernel); the link's context and signal pad come
        in `link_args` at each launch (runtime/pipeline/)."""
        variant = copy.copy(self)
        variant.link_roles = {k: v for k, v in (("wait", wait), ("notify", notify)) if v is not None}
        variant.link_args = {}
        variant.traced_launches, variant.last_trace = [], None
        variant.trace_file = None  # the pipeline writes one trace of all its operators
        variant._make_parts()
        return variant


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
            checked: bool | None = None, verify_chunks: bool = False, max_rows: int | None = None, strict: bool = False):
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
    strict: a fallback that costs overlap (a tile that waits for every chunk, tiles kept in their
    launch order: the analysis did not prove what overlap needs) is refused in one located line at
    the first launch, instead of said once as a `syncopy.SyncopyFallbackWarning`.

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
                           verify_chunks=verify_chunks, max_rows=max_rows, strict=strict)

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
