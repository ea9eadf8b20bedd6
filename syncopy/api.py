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
import time
from pathlib import Path

import torch
import torch.distributed as dist

from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.frontend.source import from_jit
from syncopy.passes import Transformed, transform
from syncopy.runtime import plan as planning
from syncopy.runtime.backends import select
from syncopy.runtime.context import Context, Trace
from syncopy.runtime.link import Faults, Link
from syncopy.schedule import Schedule, load_schedule

_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "warmup"}
_poll_cost_s: float | None = None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _spin_limit(timeout_s: float, device_type: str) -> int:
    """Polls that fit in `timeout_s`. On GPU an acquire poll costs about a microsecond; under the
    interpreter we measure one once per process."""
    global _poll_cost_s
    if device_type != "cpu" or not _interpreting():
        return max(1, int(timeout_s * 1e6))
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


class FusedKernel:
    """A local Triton kernel fused with the communication its schedule describes.

    Launch it like the local kernel, `fused[grid](*args, group=pg)`, passing the communicated argument
    at its per-rank (sharded) size. `fused.reference[grid](...)` runs the unfused equivalent.
    """

    def __init__(self, jit_fn, schedule: Schedule, *, backend: str = "auto", timeout_s: float = 60.0,
                 link: Link | None = None, faults: Faults | None = None, trace: bool = False,
                 poison_receive: bool = False, dump_dir: str | Path | None = None):
        self.local = jit_fn
        self.schedule = schedule
        self.backend_name = backend
        self.timeout_s = timeout_s
        self.link, self.faults = link, faults
        self.trace = trace
        self.poison_receive = poison_receive
        self.dump_dir = dump_dir
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
        self._contexts: dict[tuple, tuple[Context, object]] = {}
        self.last_trace: Trace | None = None

    # -- compile --------------------------------------------------------------------------------
    def build(self) -> Transformed:
        """Run the passes (once) and import the generated module."""
        if self._built is None:
            from syncopy.emit import source as emit

            t = transform(from_jit(self.local), self.schedule)
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
    def __getitem__(self, grid):
        return lambda *args, group=None, **kwargs: self._launch(grid, args, kwargs, group)

    @property
    def reference(self):
        """Unfused equivalent: all_gather_into_tensor of the shards, then the local kernel."""
        fk = self

        class _Ref:
            def __getitem__(self, grid):
                return lambda *args, group=None, **kwargs: fk._reference(grid, args, kwargs, group)

        return _Ref()

    def _bind(self, args, kwargs):
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _LAUNCH_OPTIONS}
        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise LaunchError(f"launch of '{self.local.fn.__name__}': {exc}; pass the local kernel's arguments") from None
        shard = bound.arguments.get(self.schedule.tensor)
        if not isinstance(shard, torch.Tensor):
            raise LaunchError(f"argument '{self.schedule.tensor}' must be this rank's shard as a tensor, got {type(shard).__name__}")
        if self.schedule.dim >= shard.dim():
            raise LaunchError(
                f"schedule dim {self.schedule.dim} but '{self.schedule.tensor}' has {shard.dim()} dimensions; set `dim:` below {shard.dim()}"
            )
        if not shard.is_contiguous():
            raise LaunchError(f"'{self.schedule.tensor}' must be contiguous; pass {self.schedule.tensor}.contiguous()")
        return bound.arguments, shard, options

    def _context(self, shard: torch.Tensor, group) -> tuple[Context, object]:
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        key = (id(group), tuple(shard.shape), shard.dtype, shard.device.type)
        if key in self._contexts:
            return self._contexts[key]
        # A world of one moves nothing: its "backend" is the local copy in _launch.
        backend = select(self.backend_name, shard.device.type)(group, self.timeout_s, self.link, self.faults) if world > 1 else None
        # Every rank must bring the same shard shape: check once, collectively, and fail everywhere.
        mine = (tuple(shard.shape), str(shard.dtype), self.schedule.key())
        theirs: list = [None] * world
        if world > 1:
            dist.all_gather_object(theirs, mine, group=backend.group)
        else:
            theirs = [mine]
        for r, other in enumerate(theirs):
            if other[2] != mine[2]:
                raise LaunchError(f"rank {r} launched with a different schedule than rank {rank}; every rank must use the same schedule")
            if other[:2] != mine[:2]:
                raise LaunchError(
                    f"rank {r} passed '{self.schedule.tensor}' with shape {list(other[0])} {other[1]} but rank {rank} passed "
                    f"{list(mine[0])} {mine[1]}; all_gather needs the same shard shape on every rank"
                )
        rows = shard.shape[self.schedule.dim]
        p = planning.all_gather(self.schedule, rank, world, rows)
        ctx = Context(p, tuple(shard.shape), shard.dtype, shard.device, self.schedule.dim)
        self._contexts[key] = (ctx, backend)
        return ctx, backend

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
        dims = self._grid(grid, args)
        n = dims[0] * dims[1] * dims[2]
        scalars = tuple((k, v) for k, v in sorted(args.items()) if not isinstance(v, torch.Tensor))
        key = (dims, scalars)
        if key in ctx.orders:
            return ctx.orders[key]
        ranges: list[tuple[int, int]] = [(0, -1)] * n
        if probe is not None:
            out = torch.full((2 * n,), -1, dtype=torch.int32, device=ctx.buffer.device)
            dummy = torch.zeros(1, dtype=torch.int32, device=ctx.buffer.device)
            probe[grid](**args, **self._extra(ctx, dummy, dummy, table=False), syncopy_probe_out=out)
            flat = out.tolist()
            ranges = [(flat[2 * i], flat[2 * i + 1]) for i in range(n)]
        tiles = planning.tile_order(ranges, ctx.plan.position())
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
        # [tile per slot | (first, last) chunk per tile]: the kernel reads its range from here.
        flat_ranges = [x for r in ranges for x in r]
        order = torch.tensor(table + flat_ranges, dtype=torch.int32, device=ctx.buffer.device)
        ctx.orders[key] = (order, ranges, [table[s] for s in slots])
        return ctx.orders[key]

    @staticmethod
    def _grid(grid, args) -> tuple[int, int, int]:
        g = grid(args) if callable(grid) else grid
        g = tuple(int(x) for x in g)
        return (g + (1, 1, 1))[:3]

    def _launch(self, grid, args, kwargs, group):
        group = group if group is not None else dist.group.WORLD
        if not dist.is_initialized():
            raise LaunchError("torch.distributed is not initialised; call dist.init_process_group (gloo on CPU) before launching")
        self.build()
        t, fused, probe, _ = self._built
        bound, shard, options = self._bind(args, dict(kwargs))
        _ensure_allocator(shard.device)
        ctx, backend = self._context(shard, group)
        if ctx.broken:
            raise LaunchError(f"this operator's transfers broke in an earlier launch ({ctx.broken}); re-create the process group")
        call_args = dict(bound)
        call_args[self.schedule.tensor] = ctx.buffer
        order, ranges, exec_order = self._order(ctx, grid, call_args, backend)
        epoch = ctx.begin(_spin_limit(self.timeout_s, shard.device.type))
        trace = Trace(ctx.plan.rank, epoch, {g: ctx.plan.bounds(g) for g in range(ctx.n_chunks)}, total_chunks=ctx.n_chunks) if self.trace else None
        if trace is not None:
            trace.started_at = ctx.t0_wall
        ctx.trace = trace
        n_tiles = len(ranges)
        trace_buf = torch.zeros(2 * n_tiles if self.trace else 1, dtype=torch.int32, device=shard.device)
        if self.poison_receive and ctx.buffer.is_floating_point():
            ctx.buffer.fill_(float("nan"))
        if backend is None:
            ctx.buffer.copy_(shard)
            for g in range(ctx.n_chunks):
                ctx.land(g)
            transfer = None
        else:
            backend.local(ctx, shard)
            transfer = backend.start(ctx, epoch)
        k0 = time.perf_counter() - ctx.t0
        try:
            fused[grid](**call_args, **self._extra(ctx, order, trace_buf), **options)
        finally:
            k1 = time.perf_counter() - ctx.t0
            if transfer is not None:
                transfer.join()
        if transfer is not None and transfer.errors:
            ctx.broken = repr(transfer.errors[0])
            raise LaunchError(f"rank {ctx.plan.rank}: transfer failed: {transfer.errors[0]}")
        err = ctx.error()
        c = ctx.plan.chunks_per_rank
        if err is not None:
            rank, chunk, e = err
            ctx.broken = f"chunk {chunk} timed out"
            raise SyncopyTimeout(rank, divmod(chunk, c), e, self.timeout_s)
        if transfer is not None and transfer.lost:
            ctx.broken = f"chunk {transfer.lost[0]} lost"
            raise SyncopyTimeout(ctx.plan.rank, divmod(transfer.lost[0], c), epoch, self.timeout_s, "the transfer never completed")
        if trace is not None:
            flat = trace_buf.tolist()
            slot_tiles = list(range(n_tiles)) if t.persistent is not None else order[:n_tiles].tolist()
            trace.tile_ranges = ranges
            trace.tile_order = exec_order
            trace.tile_starts = sorted(
                ((slot_tiles[s], flat[2 * s] - 1, flat[2 * s + 1]) for s in range(n_tiles) if flat[2 * s] > 0), key=lambda x: x[1]
            )
            trace.kernel_s = (k0, k1)
            self.last_trace = trace
        return None

    def _reference(self, grid, args, kwargs, group):
        group = group if group is not None else dist.group.WORLD
        bound, shard, options = self._bind(args, dict(kwargs))
        _ensure_allocator(shard.device)
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


def overlap(schedule, *, backend: str = "auto", timeout_s: float = 60.0, link: Link | None = None,
            faults: Faults | None = None, trace: bool = False, poison_receive: bool = False,
            dump_dir: str | Path | None = None):
    """Decorator factory: `overlap(schedule)(jit_fn) -> FusedKernel`.

    schedule: a path to a YAML/JSON file, a dict, or a `Schedule`.
    backend: 'auto' (gloo for CPU tensors), 'gloo'. timeout_s bounds every wait (SyncopyTimeout).
    link/faults: emulated link and injected faults (CPU backend). trace: record arrivals and tile
    starts in `fused.last_trace`. poison_receive: fill the receive buffer with NaN before each launch.
    """
    sched = load_schedule(schedule)

    def wrap(jit_fn) -> FusedKernel:
        return FusedKernel(jit_fn, sched, backend=backend, timeout_s=timeout_s, link=link, faults=faults,
                           trace=trace, poison_receive=poison_receive, dump_dir=dump_dir)

    return wrap
