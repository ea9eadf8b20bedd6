"""The context of a launch (buffers, signal pad, plan) per (group, shard shape, dtype, device): made once,
collectively, with every rank's shard and schedule checked against the others'."""
from __future__ import annotations


import torch
import torch.distributed as dist

from syncopy.errors import LaunchError
from syncopy.runtime import backends
from syncopy.runtime import plan as planning
from syncopy.runtime.backends import control
from syncopy.runtime.context import Context, context_ids, refuse_listed
from syncopy.schedule import Schedule
from syncopy.schedule.model import AUTO


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


def _schedule_difference(r: int, theirs: str, rank: int, mine: str) -> str:
    """The first schedule key two ranks disagree on (the schedules travel as `Schedule.key()` JSON)."""
    import json

    a, b = json.loads(theirs), json.loads(mine)
    for key in sorted(set(a) | set(b), key=lambda k: (k not in ("pattern", "tensor", "dim", "chunks_per_rank", "order"), k)):
        if a.get(key) != b.get(key):
            return (f"rank {r} launched with {key}: {json.dumps(a.get(key))} but rank {rank} with {key}: {json.dumps(b.get(key))}; "
                    "every rank must use the same schedule (the same file and the same overlap() overrides)")
    return f"rank {r} launched with a different schedule than rank {rank}; every rank must use the same schedule"


class Contexts:
    """How a launch finds or makes its context, collectively on first use (FusedKernel mixes this in)."""

    def _context(self, shard: torch.Tensor, group, args: dict) -> tuple[Context, object]:
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        # The group by its token, never by id(): a destroyed group's id may come back with another group.
        # The device with its index: a context's buffers and signal pad live on one GPU.
        extras = tuple((tuple(args[n].shape), args[n].dtype) for n in self.schedule.tensors[1:])
        key = (control.group_token(group), tuple(shard.shape), shard.dtype, shard.device, extras)
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
        mine = (tuple(shard.shape), str(shard.dtype), self.schedule.key(), choice, next(context_ids), str(extras))
        theirs: list = [mine]
        if world > 1:
            # The first launch of a shape is collective: a rank that never comes is named, in bounded time.
            what = f"the first launch of {self.local.fn.__name__} with '{self.schedule.tensors[0]}' of shape {list(shard.shape)}"
            try:
                name = self.backend_for(shard.device, group)
                if name != "gloo":
                    refuse_listed(self.schedule, name)
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
            if other[5] != mine[5]:
                raise LaunchError(f"rank {r} passed the other listed tensors ({', '.join(self.schedule.tensors[1:])}) as "
                                  f"{other[5]} but rank {rank} as {mine[5]} (shape, dtype); pass the same on every rank")
        # The other listed tensors' (shape, dtype), by keyword: the common case keeps its four arguments.
        ctx = self._make_context(shard, rank, world, theirs[0][3], **({"extras": extras} if extras else {}))
        ctx.uid = theirs[0][4]
        self._contexts[key] = (ctx, backend)
        return ctx, backend

    def _make_context(self, shard: torch.Tensor, rank: int, world: int, choice, extras: tuple = ()) -> Context:
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
            ctx = Context(p, tuple(shard.shape), shard.dtype, shard.device, self.schedule.dim, extras=extras)
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
            others = [tuple(v.shape) for k, v in args.items() if isinstance(v, torch.Tensor) and k not in self.schedule.tensors]
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
