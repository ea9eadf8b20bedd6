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
import time
from pathlib import Path

import torch
import torch.distributed as dist

from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.frontend.source import from_jit
from syncopy.passes import Transformed, read_check, transform
from syncopy.runtime import plan as planning
from syncopy.runtime import backends
from syncopy.runtime.backends import control
from syncopy.runtime.context import Context, Trace, context_ids
from syncopy.runtime.link import Faults, Link
from syncopy.schedule import Schedule, load_schedule
from syncopy.schedule.model import AUTO, PRODUCER_PATTERNS

_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "warmup"}
_poll_cost_s: float | None = None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


#: Cost of one block-wide acquire poll on a GPU (H200, 132 programs polling: 182-198 ns,
#: benchmarks/gpu_bench.py poll_cost); turns timeout_s into a poll budget.
GPU_POLL_S = 200e-9


def _spin_limit(timeout_s: float, device_type: str) -> int:
    """The bound of every wait in a launch (ctx CTX_SPIN_LIMIT), as a number of polls: timeout_s
    over the cost of one poll -- measured once per process under the interpreter, GPU_POLL_S when
    compiled (see device.py for why waits count polls rather than read %globaltimer)."""
    global _poll_cost_s
    if not _interpreting():
        return max(1, int(timeout_s / GPU_POLL_S))
    if _poll_cost_s is None:
        _poll_cost_s = _measure_poll_cost()
    return max(100, int(timeout_s / _poll_cost_s))


def _ensure_allocator(device) -> None:
    """Kernels that make tensor descriptors need `triton.set_allocator`; set one if the program has not."""
    from syncopy.runtime.persistent import ensure_allocator

    ensure_allocator(device)


def _measure_poll_cost() -> float:
    import triton
    import triton.language as tl

    ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64)
    ctx[dev.CTX_EPOCH.value] = 1
    polls = 200
    ctx[dev.CTX_SPIN_LIMIT.value] = polls
    signals = torch.zeros(dev.SIG_HEADER + 1, dtype=torch.int32)

    @triton.jit
    def _spin(signals, ctx):
        first = tl.load(signals + dev.SIG_BASE)  # chunk 0, as a tensor like the kernels' ranges
        dev.wait_chunks(signals, ctx, first, first)

    t = time.perf_counter()
    _spin[(1,)](signals, ctx)
    return max((time.perf_counter() - t) / polls, 1e-7)


def slot_tiles(order: torch.Tensor, n_tiles: int) -> list[int]:
    """The tile each execution slot runs, read back from an order table (see `FusedKernel._order`)."""
    return order[dev.SLOT_WORDS * n_tiles:].tolist()


def slot_records(order: torch.Tensor, n_tiles: int) -> list[tuple[int, ...]]:
    """Per slot the record the kernel reads: (pid0, pid1, pid2, first chunk, last chunk)."""
    flat = order[: dev.SLOT_WORDS * n_tiles].tolist()
    return [tuple(flat[k : k + dev.SLOT_WORDS]) for k in range(0, len(flat), dev.SLOT_WORDS)]


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


#: The longest timeout_s: the transfer threads join after 2 * timeout_s + 5 s, within threading.TIMEOUT_MAX.
MAX_TIMEOUT_S = 1e9


def _check_timeout(timeout_s) -> None:
    """timeout_s is a number of seconds that every wait (host and device) can take, checked at decoration."""
    import math
    import numbers

    ok = isinstance(timeout_s, numbers.Real) and not isinstance(timeout_s, bool) and 0 < timeout_s <= MAX_TIMEOUT_S
    if not ok or math.isnan(timeout_s):
        raise LaunchError(f"timeout_s must be a positive number of seconds, at most {MAX_TIMEOUT_S:g} (got {timeout_s!r}); e.g. timeout_s=60")


def checked_group(group):
    """The process group a launch runs on (None: the default group), refused unless this rank is in it."""
    if not dist.is_initialized():
        raise LaunchError("torch.distributed is not initialised; call dist.init_process_group (gloo on CPU) before launching")
    if group is None:
        return dist.group.WORLD
    if group is dist.GroupMember.NON_GROUP_MEMBER:
        # What dist.new_group(ranks) returns on the ranks it leaves out; its ranks are not known here.
        raise LaunchError(f"rank {dist.get_rank()} is not a member of the group passed as group= (dist.new_group returned "
                          "GroupMember.NON_GROUP_MEMBER on this rank); launch on a group that contains this rank, or skip "
                          "the launch on this rank")
    if not isinstance(group, dist.ProcessGroup):
        raise LaunchError(f"group= must be a process group (from dist.new_group) or None for the default group, got "
                          f"{type(group).__name__}")
    if dist.get_rank(group) < 0:
        ranks = dist.get_process_group_ranks(group)
        raise LaunchError(f"rank {dist.get_rank()} is not a member of the group passed as group= (ranks "
                          f"{', '.join(map(str, ranks))}); launch on a group that contains this rank, or skip the launch on this rank")
    return group


class FusedKernel:
    """A local Triton kernel fused with the communication its schedule describes.

    Launch it like the local kernel, `fused[grid](*args, group=pg)`, passing the communicated argument
    at its per-rank (sharded) size. `fused.reference[grid](...)` runs the unfused equivalent.
    """

    def __init__(self, jit_fn, schedule: Schedule, *, backend: str = "auto", timeout_s: float = 60.0,
                 link: Link | None = None, faults: Faults | None = None, trace: bool = False,
                 poison_receive: bool = False, dump_dir: str | Path | None = None,
                 one_shot_max_bytes: int = planning.ONE_SHOT_MAX_BYTES, hardware: str | None = None, workload=None,
                 checked: bool | None = None):
        _require_jit(jit_fn)
        _check_timeout(timeout_s)
        self.local = jit_fn
        self.producer = schedule.pattern in PRODUCER_PATTERNS
        self.one_shot_max_bytes = one_shot_max_bytes
        self.schedule = schedule
        self.hardware, self.workload = hardware, workload
        self.backend_name = backend
        self.timeout_s = timeout_s
        self.link, self.faults = link, faults
        self.trace = trace
        self.poison_receive = poison_receive
        self.dump_dir = dump_dir
        self.checked = checked  # None: $SYNCOPY_CHECKED decides, at the first launch (passes/read_check.py)
        self.signature = inspect.signature(jit_fn.fn)
        if schedule.kernel is not None and schedule.kernel != jit_fn.fn.__name__:
            raise LaunchError(
                f"the schedule is for kernel '{schedule.kernel}' but decorates '{jit_fn.fn.__name__}'; "
                "fix `kernel:` or drop it"
            )
        if schedule.tensor not in self.signature.parameters:
            raise LaunchError(
                f"kernel '{jit_fn.fn.__name__}' has no argument '{schedule.tensor}' (schedule key tensor); "
                f"its arguments are {', '.join(self.signature.parameters)}"
            )
        self._built: tuple[Transformed, object, object, Path] | None = None
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
                from syncopy.emit import source as emit

                t = transform(from_jit(self.local), self.schedule)
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
        `syncopy.runtime.occupancy.programs(device, fused.backend_for(device, group))`."""
        group = group if group is not None else dist.group.WORLD
        return backends.backend_for(self.backend_name, torch.device(device).type, group)

    def __getitem__(self, grid):
        return lambda *args, group=None, **kwargs: self._serialised_launch(grid, args, kwargs, group)

    def _serialised_launch(self, grid, args, kwargs, group):
        """`_launch`, one at a time per group on this rank, in the mode syncopy's tensor work runs in.

        Threads: a launch reuses the context's buffers and signal pad and steps its epoch, and a
        first launch talks to the peers over the group's control group, so two launches on one group
        must not interleave on a rank; a second thread waits here for the first launch to return
        (launches on other groups go on meanwhile). Which thread goes first is up to the threads: as
        with torch.distributed collectives, every rank of the group must launch in the same order
        (the n-th launch of a rank meets the n-th launch of each peer); taking turns per group, not
        per operator, makes ranks that disagree on the order of two operators wait and time out
        (naming the rank) instead of pairing one operator's data with the other's. On CUDA, a launch
        from a thread with another current stream first makes that stream wait for the last
        launch's (device-side, no host wait).

        Modes: syncopy's own tensor work (buffers, flags, copies, on this thread and on the transfer
        threads) runs under torch.inference_mode(), whatever the caller's mode: it records no autograd
        anyway, and in that mode it may update in place both the caller's tensors (inference tensors
        under the caller's inference_mode) and its own (made once, reused in any later mode)."""
        self._refuse_grad(args, kwargs)
        group = checked_group(group)
        device = _cuda_device(args, kwargs)
        with control.group_lock(group), torch.inference_mode(), _on_device(device):
            self._follow_last_launch(control.group_token(group), device)
            return self._launch(grid, args, kwargs, group)

    def _refuse_grad(self, args, kwargs) -> None:
        """A launch records no autograd graph: refuse inputs that require grad (with grad enabled),
        rather than return a result whose gradients would silently be missing."""
        if not torch.is_grad_enabled():
            return
        for key, value in [*zip(self.signature.parameters, args), *kwargs.items()]:
            if isinstance(value, torch.Tensor) and value.requires_grad:
                raise LaunchError(f"launch of '{self.local.fn.__name__}': argument '{key}' requires grad, but fused operators are "
                                  f"not differentiable yet (its gradient would be lost); pass {key}.detach(), or launch under "
                                  "torch.no_grad() or torch.inference_mode()")

    def _follow_last_launch(self, token: int, device) -> None:
        """On CUDA, this launch's stream waits for the last launch's on the group when they differ
        (threads have their own current streams; both launches use the same buffers)."""
        if device is None:
            return
        stream, last = torch.cuda.current_stream(device), self._last_stream.get((token, device))
        if last is not None and last != stream:
            stream.wait_stream(last)
        self._last_stream[(token, device)] = stream

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

    def _bind(self, args, kwargs):
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _LAUNCH_OPTIONS}
        arguments = self._arguments(args, kwargs)
        shard = arguments.get(self.schedule.tensor)
        if not isinstance(shard, torch.Tensor):
            raise LaunchError(f"argument '{self.schedule.tensor}' must be this rank's shard as a tensor, got {type(shard).__name__}")
        if shard.device.type not in ("cpu", "cuda"):
            raise LaunchError(
                f"'{self.schedule.tensor}' is on a {shard.device.type} device, which syncopy cannot launch on; pass CPU tensors "
                "(gloo backend) or CUDA tensors (p2p or nccl backend)"
            )
        if self.schedule.dim >= shard.dim():
            raise LaunchError(
                f"schedule dim {self.schedule.dim} but '{self.schedule.tensor}' has {shard.dim()} dimensions; set `dim:` below {shard.dim()}"
            )
        if not shard.is_contiguous():
            raise LaunchError(f"'{self.schedule.tensor}' must be contiguous; pass {self.schedule.tensor}.contiguous()")
        return arguments, shard, options

    def _arguments(self, args: tuple, kwargs: dict) -> dict:
        """The launch's arguments by name. How a call's positions map to names is bound (and its
        argument list checked) once per (number of positions, keywords); launch after launch only
        the values change, and each is still checked to be something a kernel takes."""
        key = (len(args), tuple(kwargs))
        names = self._positions.get(key)
        if names is None:
            try:
                bound = self.signature.bind_partial(*args, **kwargs)
            except TypeError as exc:
                raise LaunchError(f"launch of '{self.local.fn.__name__}': {exc}; pass the local kernel's arguments") from None
            self._check_arguments(bound.arguments)
            plain = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in list(self.signature.parameters.values())[:len(args)])
            if plain:
                self._positions[key] = list(self.signature.parameters)[:len(args)]
            return bound.arguments
        arguments = dict(zip(names, args))
        arguments.update(kwargs)
        for name, value in arguments.items():
            if not isinstance(value, torch.Tensor):
                self._check_value(name, value)
        return arguments

    def _check_arguments(self, arguments: dict) -> None:
        """Every argument the local kernel needs is there (constexprs with defaults may be left out),
        and each is something a Triton kernel takes: a tensor, or a hashable scalar (not a list)."""
        name = self.local.fn.__name__
        if inspect.isfunction(self.local.fn):  # an autotuner's configs supply some arguments: let Triton check those
            missing = [p.name for p in self.signature.parameters.values()
                       if p.default is inspect.Parameter.empty and p.name not in arguments
                       and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
            if missing:
                listed = ", ".join(f"'{m}'" for m in missing)
                raise LaunchError(f"launch of '{name}': missing argument{'s' if len(missing) > 1 else ''} {listed}; "
                                  "pass every argument the local kernel takes")
        for key, value in arguments.items():
            if not isinstance(value, torch.Tensor):
                self._check_value(key, value)

    def _check_value(self, key: str, value) -> None:
        try:
            hash(value)
        except TypeError:
            raise LaunchError(f"launch of '{self.local.fn.__name__}': argument '{key}' is a {type(value).__name__}, which a Triton "
                              "kernel cannot take; pass a torch tensor (or a number, for a scalar argument)") from None

    def _context(self, shard: torch.Tensor, group, args: dict) -> tuple[Context, object]:
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        # The group by its token, never by id(): a destroyed group's id may come back with another group.
        # The device with its index: a context's buffers and signal pad live on one GPU.
        key = (control.group_token(group), tuple(shard.shape), shard.dtype, shard.device)
        if key in self._contexts:
            return self._contexts[key]
        # A world of one moves nothing: its "backend" is the local copy in _launch.
        backend = None
        # `auto` is resolved by rank 0 alone and travels with the shape check below, so that every
        # rank lowers the same plan even where their environments (SYNCOPY_HARDWARE, GPU names) differ.
        # A failure is carried as text, so that every rank raises it instead of rank 0 alone.
        choice = self._resolve(shard, world, args) if self.schedule.planned and rank == 0 else None
        # Every rank must bring the same shard shape: check once, collectively, and fail everywhere.
        # It carries an id for the context: rank 0's is taken, so the ranks agree on it (gloo tags).
        mine = (tuple(shard.shape), str(shard.dtype), self.schedule.key(), choice, next(context_ids))
        theirs: list = [mine]
        if world > 1:
            # The first launch of a shape is collective: a rank that never comes is named, in bounded time.
            what = f"the first launch of {self.local.fn.__name__} with '{self.schedule.tensor}' of shape {list(shard.shape)}"
            try:
                name = self.backend_for(shard.device, group)
                backend = backends.select(name, shard.device.type)(group, self.timeout_s, self.link, self.faults)
                control.join(group, self.timeout_s, what)
                theirs = [None] * world
                dist.all_gather_object(theirs, mine, group=backend.group)
            except RuntimeError:  # gloo or the store gave up: a rank is missing (LaunchErrors pass through)
                raise LaunchError(f"rank {rank}: not every rank of the group reached {what} within "
                                  f"{control.wait_bound(self.timeout_s):g}s; {control.JOIN_FIX}") from None
        for r, other in enumerate(theirs):
            if other[2] != mine[2]:
                raise LaunchError(_schedule_difference(r, other[2], rank, mine[2]))
            if other[:2] != mine[:2]:
                raise LaunchError(self._shard_difference(r, other, rank, mine))
        ctx = self._make_context(shard, rank, world, theirs[0][3])
        ctx.uid = theirs[0][4]
        self._contexts[key] = (ctx, backend)
        return ctx, backend

    def _make_context(self, shard: torch.Tensor, rank: int, world: int, choice) -> Context:
        """The context of `shard`'s shape for rank `rank` of `world`, lowered with the planner's
        `choice` (None: the schedule as written)."""
        schedule, resolution = self._lowered(choice)
        rows = shard.shape[self.schedule.dim]
        if self.producer:
            ctx = self._producer_context(shard, rank, world, schedule)
        elif self.schedule.pattern == "all_to_all":
            if rows % world:
                raise LaunchError(
                    f"all_to_all sends {world} equal blocks of '{self.schedule.tensor}' along dim {self.schedule.dim}, but it "
                    f"has {rows} rows; give every rank a multiple of {world} rows (pad the token blocks)"
                )
            p = planning.all_to_all(schedule, rank, world, rows // world)
            block = list(shard.shape)
            block[self.schedule.dim] //= world
            ctx = Context(p, tuple(block), shard.dtype, shard.device, self.schedule.dim)
        else:
            p = planning.all_gather(schedule, rank, world, rows)
            ctx = Context(p, tuple(shard.shape), shard.dtype, shard.device, self.schedule.dim)
        ctx.schedule, ctx.resolution = schedule, resolution
        ctx.kernel_file = self._built[0].source.path  # where checked-mode violations point
        return ctx

    def _shard_difference(self, r: int, other: tuple, rank: int, mine: tuple) -> str:
        """What differs between two ranks' shards, and what to change."""
        t, pattern = self.schedule.tensor, self.schedule.pattern
        (theirs_shape, theirs_dtype), (my_shape, my_dtype) = other[:2], mine[:2]
        if theirs_shape == my_shape:
            return (f"rank {r} passed '{t}' as {theirs_dtype} but rank {rank} passed {my_dtype} (both {list(my_shape)}); "
                    f"{pattern} needs the same dtype on every rank: cast every rank's '{t}' to one dtype")
        dims = [d for d, (a, b) in enumerate(zip(theirs_shape, my_shape)) if a != b] if len(theirs_shape) == len(my_shape) else []
        what = f"size along dim {dims[0]}" if len(dims) == 1 else "shape"
        fix = " (pad the last shard)" if dims == [self.schedule.dim] else ""
        return (f"rank {r} passed '{t}' with shape {list(theirs_shape)} {theirs_dtype} but rank {rank} passed {list(my_shape)} "
                f"{my_dtype}; {pattern} needs the same {what} on every rank{fix}")

    def _lowered(self, choice) -> tuple[Schedule, object]:
        """The schedule to lower, with `choice` (a `_resolve` answer, or None) applied, and the Resolution."""
        if not self.schedule.planned:
            return self.schedule, None
        status, resolution = choice
        if status == "error":
            raise LaunchError(resolution)
        return self.schedule.model_copy(update={"chunks_per_rank": resolution.chunks_per_rank, "order": resolution.order}), resolution

    def _resolve(self, shard: torch.Tensor, world: int, args: dict) -> tuple[str, object]:
        """("ok", Resolution) with the planner's chunk count and order for this launch, or ("error", text)."""
        from syncopy.planner import auto

        what = " and ".join(k for k in ("chunks_per_rank", "order") if getattr(self.schedule, k) == AUTO)
        try:
            device_name = torch.cuda.get_device_name(shard.device) if shard.device.type == "cuda" else None
            hardware = auto.hardware_name(self.hardware, shard.device.type, device_name)
            others = [tuple(v.shape) for k, v in args.items() if isinstance(v, torch.Tensor) and k != self.schedule.tensor]
            resolution = auto.resolve(
                self.schedule.pattern, self.schedule.chunks_per_rank, self.schedule.order, world=world,
                shard_shape=tuple(shard.shape), dim=self.schedule.dim, dtype=str(shard.dtype), others=others,
                hardware=hardware, workload=self.workload, link=self.link if shard.device.type == "cpu" else None)
        except Exception as exc:  # every rank must hear of it, not only rank 0 (see _context)
            detail = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            return "error", f"{what} is auto but the planner cannot plan this launch: {detail}"
        return "ok", resolution

    def _producer_context(self, out: torch.Tensor, rank: int, world: int, schedule: Schedule) -> Context:
        """reduce_scatter: `out` is this rank's shard of the result, the kernel writes the full
        partial into our buffer. all_reduce: `out` is the full result, split into world parts."""
        dim = self.schedule.dim
        shape = list(out.shape)
        full = None
        if self.schedule.pattern == "all_reduce":
            # Rank d owns rows [d*S, (d+1)*S) with S = ceil(rows / world); the last part may be short.
            full = tuple(shape)
            shape[dim] = -(-shape[dim] // world)
        nbytes = out.numel() * out.element_size() * (world if self.schedule.pattern == "reduce_scatter" else 1)
        size = full[dim] if full is not None else shape[dim] * world
        p = planning.reduce(schedule, rank, world, shape[dim], nbytes, self.one_shot_max_bytes, size=size)
        return Context(p, tuple(shape), out.dtype, out.device, dim, producer=True, full_shape=full)

    def _extra(self, ctx: Context, order: torch.Tensor, trace_buf: torch.Tensor, table: bool | None = None) -> dict:
        if table is None:
            table = self._built is not None and self._built[2] is not None
        return {"syncopy_ctx": ctx.ctx, "syncopy_signals": ctx.signals, "syncopy_order": order,
                "syncopy_trace": trace_buf, "SYNCOPY_TRACE": self.trace, "SYNCOPY_TABLE": table}

    def _order(self, ctx: Context, grid, args: dict, backend) -> tuple[torch.Tensor, list, list]:
        """Tile order for this launch shape: probe each program's chunk range, sort by arrival."""
        t, fused, probe, _ = self._built
        z_fastest = getattr(backend, "z_fastest", False) if backend is not None else _interpreting()
        if t.persistent is not None:
            # Tiles come from the kernel's own loop: the table is per tile id (runtime/persistent.py).
            from syncopy.runtime import persistent

            return persistent.order(self, ctx, grid, args, sequential=z_fastest)
        key = self._shape_key(grid, args)
        dims = key[0]
        n = dims[0] * dims[1] * dims[2]
        # A producer whose write rows come from loaded data is probed at every launch (on GPUs the
        # probe's answer is read back: a host sync that only such kernels pay).
        if key in ctx.orders and not t.fresh_probe:
            return ctx.orders[key]
        ranges: list[tuple[int, int]] = [(0, -1)] * n
        written = None
        if probe is not None:
            ranges, written = self._probe(ctx, grid, args, probe, n)
        if self.producer:
            # A probe program that ended before recording (a return the address slice kept) writes nothing.
            ranges = [(lo, hi) if 0 <= lo <= hi else (0, -1) for lo, hi in ranges]
        tiles = planning.tile_order(ranges, ctx.plan.position(), producer=self.producer)
        if self.producer:
            self._check_coverage(ctx, ranges, args, written)
            ctx.tiles_per_chunk[key] = self._tiles_per_chunk(ctx, ranges)
        # The table is indexed by hardware linear id; place tiles so that the backend's execution
        # order (z fastest under the interpreter, x fastest on GPUs) runs them in sorted order.
        g0, g1, g2 = dims
        if z_fastest:
            slots = [x + g0 * (y + g1 * z) for x in range(g0) for y in range(g1) for z in range(g2)]
        else:
            slots = list(range(n))
        table = [0] * n
        for s, tile in zip(slots, tiles):
            table[s] = tile
        # [(pid0, pid1, pid2, first, last) per slot | tile per slot]: device.slot_entry reads the first part.
        records = []
        for tile in table:
            records += [tile % g0, (tile // g0) % g1, tile // (g0 * g1), *ranges[tile]]
        order = torch.tensor(records + table, dtype=torch.int32, device=ctx.buffer.device)
        ctx.orders[key] = (order, ranges, [table[s] for s in slots])
        return ctx.orders[key]

    def _probe(self, ctx: Context, grid, args: dict, probe, n: int) -> tuple[list[tuple[int, int]], int | None]:
        """Each program's chunk range, from the probe kernel, and the rows the grid touches (None
        where unknown). Along dim 0 the probe runs with a ctx in which every row is its own chunk and
        the buffer has no end, so it reports rows, past the buffer too (the kernel clamps them to
        its last chunk); _check_rows refuses those, and the rows map to chunks here the way
        device._chunk_of_row maps them."""
        out = torch.full((2 * n,), -1, dtype=torch.int32, device=ctx.buffer.device)
        dummy = torch.zeros(1, dtype=torch.int32, device=ctx.buffer.device)
        extra = self._extra(ctx, dummy, dummy, table=False)
        by_rows = self._probe_rows(ctx, extra)
        probe[grid](**args, **extra, syncopy_probe_out=out)
        flat = out.tolist()
        ranges = [(flat[2 * i], flat[2 * i + 1]) for i in range(n)]
        if not by_rows:
            return ranges, None
        written = max((hi for lo, hi in ranges if 0 <= lo <= hi), default=-1) + 1
        self._check_rows(ctx, written, args)
        # Empty ranges (hi < lo) and programs that stored nothing (-1, -1) stay as the probe left them.
        return [(_chunk_of_row(ctx, lo), _chunk_of_row(ctx, hi)) if 0 <= lo <= hi else (lo, hi) for lo, hi in ranges], written

    def _probe_rows(self, ctx: Context, extra: dict) -> bool:
        """Make the probe report rows instead of chunks (see _probe), where rows can be told: along
        dim 0 (elsewhere a row is an offset modulo the size). `extra` is the probe's launch arguments."""
        if self.schedule.dim != 0 or ctx.plan.rows_per_rank <= 0:
            return False
        # A bound that left out a mask changing with the loop (infer._corners) may reach past the
        # buffer where the kernel reads nothing: only its chunks, clamped to the buffer, say anything.
        if any(a.clamped for g in self._built[0].binding.groups for a in g.accesses):
            return False
        extra["syncopy_ctx"] = ctx.ctx.clone()
        extra["syncopy_ctx"][dev.CTX_CHUNKS.value] = ctx.plan.rows_per_rank
        extra["syncopy_ctx"][dev.CTX_SIZE.value] = 2**31 - 1  # probe_store keeps int32
        return True

    def _check_rows(self, ctx: Context, written: int, args: dict) -> None:
        """Refuse a grid that touches rows past the communicated buffer, before any transfer starts:
        a consumer would read past the gathered tensor, a producer write past its buffer."""
        size = ctx.buffer.shape[ctx.dim]
        if written <= size:
            return
        tensor, per_rank, world, pattern = self.schedule.tensor, ctx.plan.rows_per_rank, ctx.plan.world, self.schedule.pattern
        if pattern == "reduce_scatter":
            if written % world:
                fix = (f", which {world} ranks cannot share evenly; write a multiple of {world} rows and give '{tensor}' "
                       f"that number / {world}")
            else:
                fix = f" = {written // world} per rank x {world}; give '{tensor}' {written // world} rows"
            raise LaunchError(f"'{tensor}' receives {per_rank} rows per rank, but the kernel writes {written} rows{fix}")
        if pattern == "all_reduce":
            raise LaunchError(f"the kernel writes rows up to {written - 1} of '{tensor}' but '{tensor}' has {size} rows; "
                              f"all_reduce takes the full result: give '{tensor}' {written} rows")
        what, whose = ("gathered", "per rank") if pattern == "all_gather" else ("received", "from each rank")
        count = [k for k, v in args.items() if type(v) is int and v == written]
        fix = (f"pass {count[0]} = {size}, the {what} rows" if len(count) == 1
               else f"launch with the {what} row count, {size}, and a grid that reads no further")
        raise LaunchError(f"the grid reads rows up to {written - 1} of '{tensor}' but the {what} '{tensor}' has {size} rows "
                          f"({per_rank} {whose} x {world} ranks); {fix}")

    def _shape_key(self, grid, args: dict) -> tuple:
        """What a tile order depends on: the grid and the scalar arguments (tensor shapes are part of the
        context's key already)."""
        scalars = tuple((k, v) for k, v in sorted(args.items()) if not isinstance(v, torch.Tensor))
        return self._grid(grid, args), scalars

    def _check_coverage(self, ctx: Context, ranges: list[tuple[int, int]], args: dict, written: int | None = None) -> None:
        """A grid may leave chunks unwritten, as the local kernel may leave rows of its output: those
        chunks keep the partial's initial contents (_init_partial) and are announced at launch start.
        Refused only where the output is evidently the wrong size (_should_blame_output_rows)."""
        missing = [g for g in range(ctx.n_chunks) if not ctx.plan.empty(g) and not any(lo <= g <= hi for lo, hi in ranges)]
        if missing and self._should_blame_output_rows(ctx, args, written):
            lo, hi = ctx.plan.bounds(missing[0])
            tensor, world, size = self.schedule.tensor, ctx.plan.world, ctx.buffer.shape[ctx.dim]
            raise LaunchError(
                f"'{tensor}' has {ctx.plan.rows_per_rank} rows, but reduce_scatter gives each rank its rows of the result "
                f"(rows / world) and the kernel writes {written} rows: give '{tensor}' {written // world} rows "
                f"({written} / {world} ranks); as passed, '{tensor}' needs a grid that writes all {size} rows, and no "
                f"program writes rows {lo}..{hi - 1} (chunk {missing[0]})"
            )

    def _should_blame_output_rows(self, ctx: Context, args: dict, written: int | None) -> bool:
        # reduce_scatter only: its output is this rank's part, the usual mistake is passing the whole result.
        # The probe saw where the writes end (dim 0), and they split evenly over the ranks.
        # A row-count argument equals the rows written: the grid covers the kernel's rows, so the output is wrong.
        # None equals the rows of the full partial: a kernel told the true row count that writes fewer
        # (a partial grid, a bound like `rows < MW`) means it, and its other rows stay zero.
        # Rows that come from loaded data (fresh_probe) say nothing of the output's size.
        size = ctx.buffer.shape[ctx.dim]
        return (self.schedule.pattern == "reduce_scatter" and not self._built[0].fresh_probe
                and written is not None and 0 < written < size
                and written % ctx.plan.world == 0
                and any(type(v) is int and v == written for v in args.values())
                and not any(type(v) is int and v == size for v in args.values()))

    @staticmethod
    def _tiles_per_chunk(ctx: Context, ranges: list[tuple[int, int]]) -> list[int]:
        need = [0] * ctx.n_chunks
        for lo, hi in ranges:
            for g in range(max(lo, 0), hi + 1):
                need[g] += 1
        return need

    @staticmethod
    def _grid(grid, args) -> tuple[int, int, int]:
        g = grid(args) if callable(grid) else grid
        g = tuple(int(x) for x in g)
        return (g + (1, 1, 1))[:3]

    def _launch(self, grid, args, kwargs, group):
        group = checked_group(group)
        self.build()
        t, fused, probe, _ = self._built
        bound, shard, options = self._bind(args, dict(kwargs))
        _ensure_allocator(shard.device)
        ctx, backend = self._context(shard, group, bound)
        self.resolved_chunks_per_rank, self.resolved_order = ctx.schedule.chunks_per_rank, ctx.schedule.order
        self.last_resolution = ctx.resolution
        if ctx.broken:
            raise LaunchError(f"this operator's transfers broke in an earlier launch ({ctx.broken}); re-create the process group")
        if self.producer:
            return self._launch_producer(grid, bound, shard, options, ctx, backend)
        call_args = dict(bound)
        call_args[self.schedule.tensor] = ctx.buffer
        if backend is not None:
            g0, g1, g2 = self._grid(grid, call_args)
            # Each program is num_ctas CTAs (a cluster on sm_90): what could hold SMs is their product.
            backend.check_grid(g0 * g1 * g2, t.persistent is not None, self.local.fn.__name__, shard.device,
                               int(options.get("num_ctas") or 1))
        order, ranges, exec_order = self._order(ctx, grid, call_args, backend)
        if _deferred(backend):
            backend.check()  # earlier launches that are done: their errors surface here
        epoch = ctx.begin(_spin_limit(self.timeout_s, shard.device.type))
        trace, trace_buf = self._new_trace(ctx, epoch, len(ranges))
        if self.poison_receive and ctx.buffer.is_floating_point():
            ctx.buffer.fill_(float("nan"))
        if backend is None:
            ctx.buffer.copy_(shard)
            for g in range(ctx.n_chunks):
                ctx.land(g)
            transfer = None
        else:
            if self.schedule.pattern == "all_to_all":
                ctx.source = shard
            backend.local(ctx, shard)
            transfer = backend.start(ctx, epoch)
        k0 = time.perf_counter() - ctx.t0
        try:
            fused[grid](**call_args, **self._extra(ctx, order, trace_buf), **options)
        finally:
            k1 = time.perf_counter() - ctx.t0
            if transfer is not None:
                transfer.join()
        if getattr(transfer, "deferred", False):
            # Enqueued, like any CUDA op: the error words are read once the kernel is done (the
            # next launch, synchronize(), or now if it already is; a traced launch waits for it).
            backend.finish(ctx, epoch)
            backend.check(wait=trace is not None)
            if trace is not None:
                self._finish_trace(trace, trace_buf, order, ranges, exec_order, (k0, k1), persistent=t.persistent is not None)
            return None
        if transfer is not None and transfer.errors:
            ctx.broken = repr(transfer.errors[0])
            raise LaunchError(f"rank {ctx.plan.rank}: transfer failed: {transfer.errors[0]}")
        if t.checked:
            read_check.raise_if_violated(ctx, t.source.path)
        err = ctx.error()
        c = ctx.plan.chunks_per_rank
        gone = _dropped_out(transfer)
        if err is not None:
            rank, flag, e = err
            chunk = ctx.plan.chunk_of_flag(flag)  # the kernel waits per unit; name the chunk
            ctx.broken = f"chunk {chunk} timed out"
            raise SyncopyTimeout(rank, divmod(chunk, c), e, self.timeout_s, gone, _advice(gone))
        if transfer is not None and transfer.lost:
            ctx.broken = f"chunk {transfer.lost[0]} lost"
            raise SyncopyTimeout(ctx.plan.rank, divmod(transfer.lost[0], c), epoch, self.timeout_s, _and("the transfer never completed", gone),
                                 _advice(gone))
        _raise_if_dropped_out(ctx, epoch, gone, transfer)
        if trace is not None:
            self._finish_trace(trace, trace_buf, order, ranges, exec_order, (k0, k1), persistent=t.persistent is not None)
        return None

    def synchronize(self) -> None:
        """Wait for this operator's launches so far and raise the first error among them
        (SyncopyTimeout, naming rank, chunk and epoch). On GPUs a warm launch returns once its work
        is enqueued, like any CUDA op (p2p with one rank per GPU); its errors surface at the next
        launch of the same shape or here. CPU launches return when they are done and raise at once."""
        for _, backend in list(self._contexts.values()):
            if _deferred(backend):
                backend.check(wait=True)

    def _new_trace(self, ctx: Context, epoch: int, n_tiles: int) -> tuple[Trace | None, torch.Tensor]:
        """This launch's Trace (None without trace=True) and the buffer its tiles record starts in."""
        trace = None
        if self.trace:
            trace = Trace(ctx.plan.rank, epoch, {g: ctx.plan.bounds(g) for g in range(ctx.n_chunks)}, total_chunks=ctx.n_chunks,
                          producer=self.producer, started_at=ctx.t0_wall,
                          planned=ctx.resolution.describe() if ctx.resolution is not None else "")
        ctx.trace = trace
        if trace is not None:
            return trace, torch.zeros(2 * n_tiles, dtype=torch.int32, device=ctx.buffer.device)
        return None, ctx.no_trace

    def _finish_trace(self, trace: Trace, trace_buf: torch.Tensor, order: torch.Tensor, ranges: list, exec_order: list,
                      kernel_s: tuple[float, float], persistent: bool = False) -> None:
        """Tile starts from the kernel's records (slot -> tile through the order table), then publish."""
        n_tiles = len(ranges)
        flat = trace_buf.tolist()
        by_slot = list(range(n_tiles)) if persistent else slot_tiles(order, n_tiles)
        trace.tile_ranges = ranges
        trace.tile_order = exec_order
        trace.tile_starts = sorted(
            ((by_slot[s], flat[2 * s] - 1, flat[2 * s + 1]) for s in range(n_tiles) if flat[2 * s] > 0), key=lambda x: x[1]
        )
        trace.kernel_s = kernel_s
        self.last_trace = trace

    def _launch_producer(self, grid, bound: dict, out: torch.Tensor, options: dict, ctx: Context, backend):
        """reduce_scatter / all_reduce: the kernel writes its full partial result into our buffer and
        announces chunks; the transfer threads reduce them into `out` while later tiles compute.

        The kernel runs as the reference runs it: on a partial that starts as the user's `out`
        (all_reduce) or as zeros (reduce_scatter), so atomics, read-modify-write epilogues and
        elements no tile writes give what `fused.reference` gives."""
        _, fused, _, _ = self._built
        call_args = dict(bound)
        call_args[self.schedule.tensor] = ctx.buffer
        order, ranges, exec_order = self._order(ctx, grid, call_args, backend)
        need = ctx.tiles_per_chunk[self._shape_key(grid, call_args)]
        ctx.set_targets(need)
        epoch = ctx.begin(_spin_limit(self.timeout_s, out.device.type))
        trace, trace_buf = self._new_trace(ctx, epoch, len(ranges))
        self._init_partial(ctx, out)
        if self.poison_receive and out.is_floating_point():
            out.fill_(float("nan"))  # after _init_partial read it: only the reduction may write `out` now
        _announce_unwritten(ctx, need)
        transfer = backend.start_reduce(ctx, out, epoch) if backend is not None else None
        k0 = time.perf_counter() - ctx.t0
        try:
            fused[grid](**call_args, **self._extra(ctx, order, trace_buf), **options)
        finally:
            k1 = time.perf_counter() - ctx.t0
            if transfer is not None:
                transfer.join()
        if transfer is None:
            out.copy_(ctx.buffer)  # a world of one: the partial is the result
        else:
            if transfer.errors:
                ctx.broken = repr(transfer.errors[0])
                raise LaunchError(f"rank {ctx.plan.rank}: transfer failed: {transfer.errors[0]}")
            gone = _dropped_out(transfer)
            if transfer.lost:
                chunk, peer = transfer.lost[0]
                ctx.broken = f"chunk {chunk} lost"
                raise SyncopyTimeout(ctx.plan.rank, divmod(chunk, ctx.plan.chunks_per_rank), epoch, self.timeout_s,
                                     _and(f"its partial sum from rank {peer} never came", gone), _advice(gone))
            unfinished = [g for g in ctx.plan.owned if not transfer.final[g].is_set()]
            if unfinished:
                ctx.broken = f"chunk {unfinished[0]} never reduced"
                raise SyncopyTimeout(ctx.plan.rank, divmod(unfinished[0], ctx.plan.chunks_per_rank), epoch, self.timeout_s,
                                     _and("it was never reduced", gone), _advice(gone))
            _raise_if_dropped_out(ctx, epoch, gone, transfer)
        if self._built[0].checked:
            read_check.raise_if_violated(ctx, self._built[0].source.path)  # on GPUs a host sync: checked mode only
        if trace is not None:
            self._finish_trace(trace, trace_buf, order, ranges, exec_order, (k0, k1))
        return None

    def _init_partial(self, ctx: Context, out: torch.Tensor) -> None:
        """What the kernel's partial holds before its first store, as in the reference: all_reduce,
        this rank's `out` (the kernel sees the user's C, e.g. for `C += A @ B`); reduce_scatter,
        zeros (a partial the kernel adds into, or leaves unwritten, starts at zero). Enqueued on the
        current stream, the kernel's, so on GPUs it is a stream-ordered memset or copy, no host sync.
        Done at every launch: the kernel's own stores are not proven to cover every element."""
        if self.schedule.pattern == "all_reduce":
            ctx.buffer.copy_(out)
        else:
            ctx.buffer.zero_()

    def _reference(self, grid, args, kwargs, group):
        group = checked_group(group)
        bound, shard, options = self._bind(args, dict(kwargs))
        _ensure_allocator(shard.device)
        if self.producer:
            return self._reference_producer(grid, bound, shard, options, group)
        if self.schedule.pattern == "all_to_all":
            received = torch.empty_like(shard)
            if self.schedule.dim != 0:
                raise LaunchError("the all_to_all reference splits along dim 0; use dim: 0")
            dist.all_to_all_single(received, shard.contiguous(), group=group)
            call_args = dict(bound)
            call_args[self.schedule.tensor] = received
            self.local[grid](**call_args, **options)
            return
        if self.schedule.dim == 0:
            from syncopy.templates import all_gather_rows

            gathered = all_gather_rows(shard, group)
        else:
            parts = [torch.empty_like(shard) for _ in range(dist.get_world_size(group))]
            dist.all_gather(parts, shard, group=group)
            gathered = torch.cat(parts, dim=self.schedule.dim).contiguous()
        call_args = dict(bound)
        call_args[self.schedule.tensor] = gathered
        self.local[grid](**call_args, **options)


    def _reference_producer(self, grid, bound: dict, out: torch.Tensor, options: dict, group) -> None:
        """all_reduce: the local kernel on this rank's `out` as passed (it may read it: `C += A @ B`),
        then all_reduce, so out = sum over ranks r of kernel(C_r). reduce_scatter: the local kernel
        into a full buffer of zeros, then reduce_scatter_tensor, so unwritten elements sum to 0."""
        world = dist.get_world_size(group)
        call_args = dict(bound)
        if self.schedule.pattern == "all_reduce":
            self.local[grid](**call_args, **options)
            dist.all_reduce(out, group=group)
            return
        shape = list(out.shape)
        shape[self.schedule.dim] *= world
        full = torch.zeros(shape, dtype=out.dtype, device=out.device)
        call_args[self.schedule.tensor] = full
        self.local[grid](**call_args, **options)
        # gloo has no reduce_scatter: all_reduce and keep this rank's part (same sums).
        dist.all_reduce(full, group=group)
        rows = out.shape[self.schedule.dim]
        out.copy_(full.narrow(self.schedule.dim, dist.get_rank(group) * rows, rows))


def _announce_unwritten(ctx: Context, tiles_per_chunk: list[int]) -> None:
    """Chunks no tile writes in this launch are final at once (they hold the partial's initial
    contents): raise their flags now, after _init_partial, so no transfer waits for a tile."""
    for g, count in enumerate(tiles_per_chunk):
        if count == 0:
            ctx.signals[dev.SIG_HEADER + g] = ctx.word


def _chunk_of_row(ctx: Context, row: int) -> int:
    """The unit (chunk, or explicit-slice unit) holding gathered row `row`, as device._chunk_of_row maps it."""
    rows_per_rank, chunks = ctx.plan.rows_per_rank, ctx.plan.flags_per_rank
    src, local = divmod(row, rows_per_rank)
    return src * chunks + ((local + 1) * chunks - 1) // rows_per_rank


def _schedule_difference(r: int, theirs: str, rank: int, mine: str) -> str:
    """The first schedule key two ranks disagree on (the schedules travel as `Schedule.key()` JSON)."""
    import json

    a, b = json.loads(theirs), json.loads(mine)
    for key in sorted(set(a) | set(b), key=lambda k: (k not in ("pattern", "tensor", "dim", "chunks_per_rank", "order"), k)):
        if a.get(key) != b.get(key):
            return (f"rank {r} launched with {key}: {json.dumps(a.get(key))} but rank {rank} with {key}: {json.dumps(b.get(key))}; "
                    "every rank must use the same schedule (the same file and the same overlap() overrides)")
    return f"rank {r} launched with a different schedule than rank {rank}; every rank must use the same schedule"


def _cuda_device(args: tuple, kwargs: dict):
    """The GPU of the launch's first CUDA tensor (None for CPU launches)."""
    return next((a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_cuda), None)


def _on_device(device):
    """`device` made current for the launch: Triton launches on the current device's stream, and the
    backends make their streams and communicators there."""
    import contextlib

    return torch.cuda.device(device) if device is not None else contextlib.nullcontext()


def _deferred(backend) -> bool:
    """Does `backend` return from launches before their kernel ran (errors read later)?"""
    return getattr(backend, "asynchronous", False)


def _dropped_out(transfer) -> str:
    """What a backend knows of peers whose connection failed during the launch ('' if none)."""
    return transfer.dropped_out() if hasattr(transfer, "dropped_out") else ""


def _and(detail: str, gone: str) -> str:
    return f"{detail}; {gone}" if gone else detail


def _advice(gone: str) -> str:
    """What a SyncopyTimeout should tell the user to do: a peer that dropped out is no slow link."""
    return "look for the cause in that rank's own output, then restart the job" if gone else SyncopyTimeout.ADVICE


def _raise_if_dropped_out(ctx: Context, epoch: int, gone: str, transfer=None) -> None:
    """Everything this rank needed arrived, but a peer died on the way, or never took what this rank
    sent it: its other peers cannot finish, and neither can this rank's next launch."""
    unreceived = getattr(transfer, "unreceived", None)
    if unreceived and not gone:
        peer, chunk = unreceived[0]
        src, index = divmod(chunk, ctx.plan.chunks_per_rank)
        ctx.broken = f"rank {peer} never received chunk {chunk}"
        raise LaunchError(f"rank {ctx.plan.rank}: rank {peer} did not receive chunk {index} of rank {src} (epoch {epoch}) within "
                          f"the timeout; check that every rank launched the kernel with the same shapes, or raise timeout_s")
    if gone:
        ctx.broken = gone
        raise LaunchError(f"rank {ctx.plan.rank}: {gone} during launch {epoch}; this rank's result is complete, but the "
                          "operator's peers cannot finish: restart the job (or re-create the process group)")


def overlap(schedule, *, chunks_per_rank: int | str | None = None, order: str | list[int] | None = None,
            hardware: str | None = None, workload=None, backend: str = "auto", timeout_s: float = 60.0,
            link: Link | None = None, faults: Faults | None = None, trace: bool = False, poison_receive: bool = False,
            dump_dir: str | Path | None = None, one_shot_max_bytes: int = planning.ONE_SHOT_MAX_BYTES,
            checked: bool | None = None):
    """Decorator factory: `overlap(schedule)(jit_fn) -> FusedKernel`.

    schedule: a path to a YAML/JSON file, a dict, or a `Schedule`.
    chunks_per_rank, order: override the schedule's keys (same values, "auto" included).
    hardware: the planner's profile for `auto` (a name or a YAML path; default $SYNCOPY_HARDWARE,
    else cpu-gloo on CPU and the GPU's own profile on CUDA). workload: what the planner takes the
    kernel for (a template name, an (M, N, K) tuple or a Workload; see syncopy.planner.auto).
    backend: 'auto' (gloo for CPU tensors; for CUDA tensors p2p when every rank runs on one node, nccl
    otherwise), 'gloo', 'p2p' (copy-engine puts through CUDA IPC) or 'nccl' (NCCL send/recv; grids
    are capped to leave SMs to NCCL, see syncopy.runtime.occupancy). timeout_s (seconds, above 0, at most 1e9) bounds every wait
    (SyncopyTimeout). link/faults: emulated link and injected faults (gloo; p2p drops chunks too). trace: record arrivals and tile
    starts in `fused.last_trace`. poison_receive: fill the receive buffer with NaN before each launch.
    one_shot_max_bytes: an all_reduce of at most this many bytes is one-shot (every rank adds all
    partials) instead of reduce-scatter + all-gather.
    checked: every read of the communicated tensor checks that its chunks arrived, every producer
    store that its chunk was not announced yet; a violation raises SyncopyReadError naming the
    kernel's line, rank, chunk and epoch (default: $SYNCOPY_CHECKED=1 turns it on).

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
                           workload=workload, one_shot_max_bytes=one_shot_max_bytes, checked=checked)

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
