"""The context of a launch (buffers, signal pad, plan) per (group, shard shape, dtype, device): made once,
collectively, with every rank's shard and schedule checked against the others'.

An operator keeps, per process group, its most recently used contexts within two budgets: at most
`max_contexts` of them (default 16, $SYNCOPY_MAX_CONTEXTS) and at most `max_context_bytes` bytes
(default 2 GiB, $SYNCOPY_MAX_CONTEXT_BYTES; the most recent one is kept whatever its size). Past
either, the least recently used goes; its shape is made again, collectively, if it comes back.
Every rank launches the same shapes in the same order, so every rank evicts the same contexts at
the same launch (the budgets are checked equal at the first launch of a shape). Contexts of
process groups that were destroyed go when the group is destroyed or at the next first launch;
`fused.release()` drops them all.

A destroyed group's contexts are not freed under their launches: a launch returns before its kernel
and transfers ran, and its pinned error ring, peer mappings and streams are still written while they
run. Each is given a bounded wait (`_let_go`; its launches' waits are bounded, so they end), its
failures become a warning naming the operator (destroy_process_group's caller did nothing wrong),
and one still running past the bound is parked and freed once done, at a later drop or first launch."""
from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
import weakref

import torch
import torch.distributed as dist

from syncopy.errors import FaultError, LaunchError
from syncopy.runtime.transport import backends
from syncopy.runtime.transport import link as links
from syncopy.runtime.state import plan as planning
from syncopy.runtime.transport.backends import control
from syncopy.runtime.state.context import Arena, Context, context_ids
from syncopy.runtime.transport.backends import refuse_listed
from syncopy.runtime.where import deferred
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


def _shard_shape(shard: torch.Tensor, uneven: bool) -> tuple:
    """A shard's shape as contexts are keyed and checked between ranks: with uneven splits, its rows
    (dim 0) are this launch's own and left out (None)."""
    return (None, *shard.shape[1:]) if uneven else tuple(shard.shape)


def _schedule_difference(r: int, theirs: str, rank: int, mine: str) -> str:
    """The first schedule key two ranks disagree on (the schedules travel as `Schedule.key()` JSON)."""
    import json

    a, b = json.loads(theirs), json.loads(mine)
    for key in sorted(set(a) | set(b), key=lambda k: (k not in ("pattern", "tensor", "dim", "chunks_per_rank", "order"), k)):
        if a.get(key) != b.get(key):
            return (f"rank {r} launched with {key}: {json.dumps(a.get(key))} but rank {rank} with {key}: {json.dumps(b.get(key))}; "
                    "every rank must use the same schedule (the same file and the same overlap() overrides)")
    return f"rank {r} launched with a different schedule than rank {rank}; every rank must use the same schedule"


def shard_difference(t: str, pattern: str, dim: int, r: int, theirs: tuple, rank: int, mine: tuple) -> str:
    """What differs between rank r's shard `theirs` and this rank's `mine`, (shape, dtype) each, and what to change."""
    (theirs_shape, theirs_dtype), (my_shape, my_dtype) = theirs, mine
    if tuple(theirs_shape) == tuple(my_shape):
        return (f"rank {r} passed '{t}' as {theirs_dtype} but rank {rank} passed {my_dtype} (both {list(my_shape)}); "
                f"{pattern} needs the same dtype on every rank: cast every rank's '{t}' to one dtype")
    dims = [d for d, (a, b) in enumerate(zip(theirs_shape, my_shape)) if a != b] if len(theirs_shape) == len(my_shape) else []
    what = f"size along dim {dims[0]}" if len(dims) == 1 else "shape"
    fix = " (pad the last shard)" if dims == [dim] else ""
    return (f"rank {r} passed '{t}' with shape {list(theirs_shape)} {theirs_dtype} but rank {rank} passed {list(my_shape)} "
            f"{my_dtype}; {pattern} needs the same {what} on every rank{fix}")


def refuse_broken_context(ctx: Context) -> None:
    """A LaunchError, saying why, if `ctx`'s transfers broke in an earlier launch (a timeout)."""
    if ctx.broken:
        raise LaunchError(f"this operator's transfers broke in an earlier launch ({ctx.broken}); re-create the process group")


def listed_difference(names: list[str], r: int, theirs, rank: int, mine) -> str:
    """Rank r passed the other listed tensors (`tensor: [K, V]`) with other (shape, dtype) than this rank."""
    return (f"rank {r} passed the other listed tensors ({', '.join(names)}) as {theirs} but rank {rank} as {mine} (shape, dtype); "
            "pass the same on every rank")


def _option_difference(r: int, other: tuple, rank: int, mine: tuple) -> str:
    """Which launch option two ranks disagree on: verify_chunks (index 7) or the injected faults (8)."""
    if other[7] != mine[7]:
        return (f"rank {r} launched with verify_chunks={other[7]} but rank {rank} with verify_chunks={mine[7]}; give every "
                "rank the same verify_chunks (a rank that checksums its chunks cannot read a peer's that do not carry one)")
    return (f"rank {r} injects faults {other[8] or '(none)'} but rank {rank} {mine[8] or '(none)'}; pass the same faults= "
            "on every rank (each fault names the rank that acts on it)")


MAX_CONTEXTS = 16
MAX_CONTEXT_BYTES = 2 << 30
_cache_lock = threading.Lock()  # every operator's context table, briefly (threads launch on several groups)


def _budget_from_env(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise LaunchError(f"${name} is {text!r}; give a positive whole number (or unset it for the default {default})")
    return value


def _can_share(backend) -> bool:
    """Whether contexts of several shapes may share one buffer (max_rows=): where a launch returns with
    its transfers done (gloo, or a world of one), so that two shapes never use it at once. GPU
    backends return before (and p2p peers write into a context's buffer on their own): each shape
    keeps its own buffer there."""
    return backend is None or (not deferred(backend) and isinstance(backend, backends.select("gloo", "cpu")))


def _retire(ctx: Context, backend) -> None:
    """Let a context go: a GPU backend's launches that may still use its buffers finish first (an
    error among them is raised here), then the backend frees what it made (events, worker threads);
    a world of one's error ring likewise (its copies land in pinned memory the ring frees)."""
    own = getattr(ctx, "own_errors", None)  # a world of one's (sequence._own_errors)
    try:
        if deferred(backend):
            backend.check(wait=True)
        elif own is not None:
            own.check(wait=True)
    finally:
        _close(ctx, backend)


def _close(ctx: Context, backend) -> None:
    """Free what a context's backend made (events, worker threads), and a world of one's error ring."""
    close = getattr(backend, "close", None)
    if close is not None:
        close()
    own = getattr(ctx, "own_errors", None)
    if own is not None:
        own.close()


_every = weakref.WeakSet()  # every operator's Contexts: a destroyed group's contexts go from all of them

#: Contexts of destroyed groups whose launches were still running when they were let go (`_let_go`):
#: (context, backend, operator name), freed at a later drop or first launch once done (`_free_parked`).
_parked: list[tuple[Context, object, str]] = []
POLL_S = 1e-3


def _settled(ctx: Context, backend) -> bool:
    """Is every launch of this context done on the device, so that nothing still copies into its
    pinned error ring, pushes through its peers' mappings or runs rounds on its streams? A backend
    that knows says so (`settled()`); otherwise its error ring's unread launches, its streams' work
    and a world of one's ring are asked."""
    settled = getattr(backend, "settled", None)
    if settled is not None:
        if not settled():
            return False
    else:
        errors = getattr(backend, "errors", None)
        if errors is not None and getattr(errors, "pending", None):
            return False
        streams = getattr(backend, "streams", None) or {}
        if any(hasattr(s, "query") and not s.query() for s in streams.values()):
            return False
    own = getattr(ctx, "own_errors", None)
    return own is None or not own.pending


def _read(ctx: Context, backend) -> None:
    """Read what of this context's launches is done, without waiting (an error among them is raised)."""
    if deferred(backend):
        backend.check(wait=False)
    own = getattr(ctx, "own_errors", None)
    if own is not None:
        own.check(wait=False)


def _let_go(ctx: Context, backend, name: str, bound_s: float) -> bool:
    """Let go of a context whose process group was destroyed: its launches are given `bound_s` to
    finish (their waits are bounded, so they end), then it is closed; one still running after that
    is parked (`_parked`), not freed: its pinned ring may still receive a copy and its peers'
    mappings pushes, and memory handed out again would take them. A launch that failed is reported
    as a warning naming the operator: destroy_process_group's caller is done with the group, and
    nothing it did made the failure. True if closed."""
    end = time.monotonic() + bound_s
    warned = False
    while True:
        try:
            _read(ctx, backend)
        except Exception as exc:  # a failed launch of a group nobody launches on any more
            if not warned:
                warnings.warn(f"{name}: a launch on a process group destroyed since failed ({type(exc).__name__}: {exc}); "
                              "its results are not to be trusted (destroy the group only once its launches were read, "
                              "e.g. after synchronize())", stacklevel=3)
                warned = True
        if _settled(ctx, backend):
            _close(ctx, backend)
            return True
        if time.monotonic() >= end:
            with _cache_lock:
                _parked.append((ctx, backend, name))
            warnings.warn(f"{name}: launches on a process group destroyed since were still running {bound_s:g}s later; their "
                          "buffers are kept until they finish and freed at a later launch (call synchronize() before "
                          "destroy_process_group to let them go at once)", stacklevel=3)
            return False
        time.sleep(POLL_S)


def _free_parked() -> None:
    """Close the parked contexts whose launches are done by now (never waits)."""
    with _cache_lock:
        parked, _parked[:] = list(_parked), []
    for ctx, backend, name in parked:
        with contextlib.suppress(Exception):  # reported when it was parked
            _read(ctx, backend)
        if _settled(ctx, backend):
            _close(ctx, backend)
        else:
            with _cache_lock:
                _parked.append((ctx, backend, name))


def _drop_destroyed(alive: set[int]) -> None:
    """Let go of every operator's contexts of groups no longer alive (control.on_release: at every
    first launch and when a group is destroyed): their backends hold syncopy's internal groups of
    those groups, which must go with them. Parked contexts done by now are freed first."""
    _free_parked()
    with _cache_lock:
        tables = list(_every)
    for contexts in tables:
        contexts._drop(alive)


control.on_release(_drop_destroyed)


class Contexts:
    """An operator's contexts, per (group, shard shape, dtype, device, listed tensors): found, or made
    collectively on first use, and let go past the budgets. `op` is the operator (api.FusedKernel),
    whose settings (schedule, backend, timeout, link, faults, budgets) the contexts are made with."""

    def __init__(self, op):
        with _cache_lock:
            _every.add(self)
        self.op = op
        self.table: dict[tuple, tuple[Context, object]] = {}  # key -> (context, backend); the most recently used last
        self.arenas: dict = {}  # (group token, dtype, device) -> Arena (max_rows=)
        self.last_stream: dict = {}  # (group token, CUDA device) -> the stream of the last launch there

    def budget(self) -> tuple[int, int]:
        """(contexts, bytes) this operator keeps per process group."""
        op = self.op
        count = op.max_contexts if op.max_contexts is not None else _budget_from_env("SYNCOPY_MAX_CONTEXTS", MAX_CONTEXTS)
        nbytes = (op.max_context_bytes if op.max_context_bytes is not None
                  else _budget_from_env("SYNCOPY_MAX_CONTEXT_BYTES", MAX_CONTEXT_BYTES))
        return count, nbytes

    def release(self, group=None) -> None:
        """Drop this operator's buffers, signal pads and tile tables: of `group`, or of every group
        (None). Like a launch, every rank of the group calls it at the same point of its launches
        (the next launch of a shape is a first launch again, which is collective). On GPUs it waits
        for the launches still running first."""
        token = None if group is None else control.group_token(group)
        with _cache_lock:
            keys = [k for k in self.table if token is None or k[0] == token]
            dropped = [self.table.pop(k) for k in keys]
            for k in [k for k in self.arenas if token is None or k[0] == token]:
                del self.arenas[k]  # the shared buffer goes with the last context using it
        for ctx, backend in dropped:
            _retire(ctx, backend)
        control.release_destroyed()  # and syncopy's internal groups of groups destroyed meanwhile

    def get(self, shard: torch.Tensor, group, args: dict, uneven: bool = False) -> tuple[Context, object]:
        # The group by its token, never by id(): a destroyed group's id may come back with another group.
        # The device with its index: a context's buffers and signal pad live on one GPU.
        # Uneven splits: one context whatever the rows (they change every launch, and differ between ranks).
        key = self.key(shard, group, args, uneven)
        with _cache_lock:
            hit = self.table.pop(key, None)
            if hit is not None:
                self.table[key] = hit  # the most recently used is the last
                return hit
        self._release_destroyed()
        ctx, backend = self._new_context(shard, group, args, uneven)
        with _cache_lock:
            self.table[key] = (ctx, backend)
            evicted = self._over_budget(key[0])
        for old in evicted:
            _retire(*old)
        return ctx, backend

    def refuse_broken(self, shard: torch.Tensor, group, args: dict, uneven: bool = False) -> None:
        """A LaunchError at once, talking to no peer, where this launch's group or context broke in an
        earlier launch (a timeout): its transport, or its launch sequence, cannot be trusted again."""
        key = self.key(shard, group, args, uneven)
        with _cache_lock:
            hit = self.table.get(key)
        if hit is not None:
            refuse_broken_context(hit[0])
        control.refuse_broken_group(group)

    def has(self, shard: torch.Tensor, group, args: dict, uneven: bool = False) -> bool:
        """Is the context of this launch made (a warm launch: no collective first launch)?"""
        return self.peek(shard, group, args, uneven) is not None

    def peek(self, shard: torch.Tensor, group, args: dict, uneven: bool = False) -> tuple | None:
        """(context, backend) of this launch if made, without making it the most recently used."""
        key = self.key(shard, group, args, uneven)
        with _cache_lock:
            return self.table.get(key)

    def key(self, shard: torch.Tensor, group, args: dict, uneven: bool = False) -> tuple:
        return (control.group_token(group), _shard_shape(shard, uneven), shard.dtype, shard.device, self.listed_shapes(args))

    def touch(self, args: tuple, kwargs: dict, group) -> bool:
        """Does a launch with these arguments find its context made (no first launch, which meets the
        peers over the group)? If so it becomes the most recently used, so that no other launch's new
        context evicts it before it runs (a pipeline's side thread, runtime/pipeline/__init__.py)."""
        call = self.op.binder.bind(tuple(args), dict(kwargs))
        bound, shard = call.arguments, call.shard
        key = self.key(shard, checked_group(group), bound)
        with _cache_lock:
            hit = self.table.pop(key, None)
            if hit is not None:
                self.table[key] = hit
        return hit is not None

    def _over_budget(self, token: int) -> list[tuple[Context, object]]:
        """Take out `token`'s least recently used contexts past the budget (under _cache_lock)."""
        count, nbytes = self.budget()
        mine = [k for k in self.table if k[0] == token]  # least recently used first
        total = sum(self.table[k][0].nbytes for k in mine)
        evicted = []
        while len(mine) > 1 and (len(mine) > count or total > nbytes):
            ctx, backend = self.table.pop(mine.pop(0))
            total -= ctx.nbytes
            evicted.append((ctx, backend))
        return evicted

    def _release_destroyed(self) -> None:
        """Drop contexts of destroyed process groups, and syncopy's internal groups made for them
        (every operator's: control.release_destroyed runs _drop_destroyed)."""
        control.release_destroyed()

    def _drop(self, alive: set[int]) -> None:
        """Close this operator's contexts of groups whose token is not in `alive`."""
        with _cache_lock:
            dropped = [self.table.pop(k) for k in [k for k in self.table if k[0] not in alive]]
            for k in [k for k in self.last_stream if k[0] not in alive]:
                del self.last_stream[k]
            for k in [k for k in self.arenas if k[0] not in alive]:
                del self.arenas[k]
        if dropped:
            bound = control.wait_bound(self.op.timeout_s)
            name = self.name()
            for ctx, backend in dropped:
                _let_go(ctx, backend, name, bound)  # their launches may still run: waited for, or kept

    def name(self) -> str:
        """The operator's name, as warnings say it."""
        fn = getattr(getattr(self.op, "local", None), "fn", None)
        return f"operator {getattr(fn, '__name__', type(self.op).__name__)}"

    def listed_shapes(self, args: dict) -> tuple:
        """(shape, dtype) of each other listed tensor (`tensor: [K, V]`): part of a context's key."""
        return tuple((tuple(args[n].shape), args[n].dtype) for n in self.op.schedule.tensors[1:])

    def _new_context(self, shard: torch.Tensor, group, args: dict, uneven: bool = False) -> tuple[Context, object]:
        """The context of `shard`'s shape on `group`: made collectively, every rank's shard, schedule
        and context budget checked against the others'."""
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        extras = self.listed_shapes(args)
        # A world of one moves nothing: its "backend" is the local copy in _launch.
        backend = None
        # `auto` is resolved by rank 0 alone and travels with the shape check below, so that every
        # rank lowers the same plan even where their environments (SYNCOPY_HARDWARE, GPU names) differ.
        # A failure is carried as text, so that every rank raises it instead of rank 0 alone.
        choice = self.resolve(shard, world, args) if self.op.schedule.planned and rank == 0 else None
        # Every rank must bring the same shard shape: check once, collectively, and fail everywhere.
        # It carries an id for the context: rank 0's is taken, so the ranks agree on it (gloo tags).
        # verify_chunks and the injected faults too: a rank that checksums its chunks cannot talk to one that
        # does not, and the faults' check below is collective.
        mine = (_shard_shape(shard, uneven), str(shard.dtype), self.op.schedule.key(), choice, next(context_ids), self.budget(),
                str(extras), bool(self.op.verify_chunks), self._fault_spec())
        theirs: list = [mine]
        what = f"the first launch of {self.op.local.fn.__name__} with '{self.op.schedule.tensors[0]}' of shape {list(shard.shape)}"
        if world > 1:
            # The first launch of a shape is collective: a rank that never comes is named, in bounded time.
            try:
                name = self.op.backend_for(shard.device, group)
                if name != "gloo":
                    refuse_listed(self.op.schedule, name)
                backend = backends.select(name, shard.device.type)(group, self.op.timeout_s, self.op.link, self.op.faults)
                control.join(group, self.op.timeout_s, what)
                theirs = [None] * world
                dist.all_gather_object(theirs, mine, group=backend.group)
            except RuntimeError:  # gloo or the store gave up: a rank is missing (LaunchErrors pass through)
                raise LaunchError(f"rank {rank}: not every rank of the group reached {what} within "
                                  f"{control.wait_bound(self.op.timeout_s):g}s; {control.JOIN_FIX}") from None
        for r, other in enumerate(theirs):
            if other[2] != mine[2]:
                raise LaunchError(_schedule_difference(r, other[2], rank, mine[2]))
            if other[:2] != mine[:2]:
                raise LaunchError(self.shard_difference(r, other, rank, mine))
            if other[5] != mine[5]:
                raise LaunchError(f"rank {r} keeps {other[5][0]} contexts of {other[5][1]} bytes per group but rank {rank} "
                                  f"keeps {mine[5][0]} of {mine[5][1]}; give every rank the same max_contexts and "
                                  "max_context_bytes (or $SYNCOPY_MAX_CONTEXTS and $SYNCOPY_MAX_CONTEXT_BYTES)")
            if other[6] != mine[6]:
                raise LaunchError(listed_difference(self.op.schedule.tensors[1:], r, other[6], rank, mine[6]))
            if other[7:] != mine[7:]:
                raise LaunchError(_option_difference(r, other, rank, mine))
        if backend is not None:  # after the check: a refusal (GPU backends have no checksums) is then every rank's
            backends.verify_chunks(backend, mine[7])
        # The other listed tensors' (shape, dtype), by keyword: the common case keeps its four arguments.
        storage = self._arena(group, shard) if _can_share(backend) else None
        ctx = self.make(shard, rank, world, theirs[0][3], **({"extras": extras} if extras else {}),
                                 **({"uneven": True} if uneven else {}), **({"storage": storage} if storage is not None else {}))
        ctx.uid = theirs[0][4]
        if mine[8] and not uneven:  # uneven all_to_all: what each rank sends is known per launch only
            self._check_faults(ctx, backend, world, what)
        return ctx, backend

    def _arena(self, group, shard: torch.Tensor):
        """max_rows=: the arena the main buffers of this group's contexts (of `shard`'s dtype and device)
        share; None without max_rows."""
        if self.op.max_rows is None:
            return None
        key = (control.group_token(group), shard.dtype, shard.device)
        with _cache_lock:
            if key not in self.arenas:
                self.arenas[key] = Arena(self.op.max_rows)
            return self.arenas[key]

    def _fault_spec(self) -> str:
        return self.op.faults.spec() if self.op.faults is not None else ""

    def _check_faults(self, ctx: Context, backend, world: int, what: str) -> None:
        """Every injected fault names a send some rank makes in this context's plans; else one LaunchError
        on every rank (a fault that names no send would do nothing, and the run would pass for surviving it)."""
        made = links.sends(ctx.plan)
        if world > 1:
            theirs: list = [None] * world
            try:
                dist.all_gather_object(theirs, made, group=backend.group)
            except RuntimeError:
                raise LaunchError(f"rank {ctx.plan.rank}: not every rank of the group reached {what} within "
                                  f"{control.wait_bound(self.op.timeout_s):g}s; {control.JOIN_FIX}") from None
            made = set().union(*theirs)
        problem = links.missing(self.op.faults, world, made, self.op.producer, ctx.plan.chunks_per_rank)
        if problem is not None:
            raise FaultError(problem)

    def make(self, shard: torch.Tensor, rank: int, world: int, choice, extras: tuple = (), uneven: bool = False,
                      storage=None) -> Context:
        """The context of `shard`'s shape for rank `rank` of `world`, lowered with the planner's
        `choice` (None: the schedule as written). `uneven`: split sizes come with each launch
        (Context.relayout); the context starts with every block empty."""
        schedule, resolution = self._lowered(choice)
        rows = shard.shape[self.op.schedule.dim]
        if self.op.producer:
            ctx = self._producer_context(shard, rank, world, schedule, storage)
        elif uneven:
            nothing = (0,) * world
            p = planning.all_to_all(schedule, rank, world, 0, splits=(nothing, nothing))
            ctx = Context(p, tuple(shard.shape), shard.dtype, shard.device, self.op.schedule.dim)
        elif self.op.schedule.pattern == "all_to_all":
            if rows % world:
                raise LaunchError(
                    f"all_to_all sends {world} equal blocks of '{self.op.schedule.tensor}' along dim {self.op.schedule.dim}, but it "
                    f"has {rows} rows; give every rank a multiple of {world} rows (pad the token blocks)"
                )
            p = planning.all_to_all(schedule, rank, world, rows // world)
            block = list(shard.shape)
            block[self.op.schedule.dim] //= world
            ctx = Context(p, tuple(block), shard.dtype, shard.device, self.op.schedule.dim, storage=storage)
        else:
            p = planning.all_gather(schedule, rank, world, rows)
            ctx = Context(p, tuple(shard.shape), shard.dtype, shard.device, self.op.schedule.dim, extras=extras, storage=storage)
        ctx.schedule, ctx.resolution = schedule, resolution
        ctx.kernel_file = self.op.kernel.build().transformed.source.path  # where checked-mode violations point
        return ctx

    def shard_difference(self, r: int, other: tuple, rank: int, mine: tuple) -> str:
        """What differs between two ranks' shards, and what to change."""
        s = self.op.schedule
        return shard_difference(s.tensor, s.pattern, s.dim, r, other[:2], rank, mine[:2])

    def _lowered(self, choice) -> tuple[Schedule, object]:
        """The schedule to lower, with `choice` (a `_resolve` answer, or None) applied, and the Resolution."""
        if not self.op.schedule.planned:
            return self.op.schedule, None
        status, resolution = choice
        if status == "error":
            raise LaunchError(resolution)
        return self.op.schedule.model_copy(update={"chunks_per_rank": resolution.chunks_per_rank, "order": resolution.order}), resolution

    def resolve(self, shard: torch.Tensor, world: int, args: dict) -> tuple[str, object]:
        """("ok", Resolution) with the planner's chunk count and order for this launch, or ("error", text)."""
        from syncopy.planner import auto

        what = " and ".join(k for k in ("chunks_per_rank", "order") if getattr(self.op.schedule, k) == AUTO)
        try:
            device_name = torch.cuda.get_device_name(shard.device) if shard.device.type == "cuda" else None
            hardware = auto.hardware_name(self.op.hardware, shard.device.type, device_name)
            others = [tuple(v.shape) for k, v in args.items() if isinstance(v, torch.Tensor) and k not in self.op.schedule.tensors]
            resolution = auto.resolve(
                self.op.schedule.pattern, self.op.schedule.chunks_per_rank, self.op.schedule.order, world=world,
                shard_shape=tuple(shard.shape), dim=self.op.schedule.dim, dtype=str(shard.dtype), others=others,
                hardware=hardware, workload=self.op.workload, link=self.op.link if shard.device.type == "cpu" else None)
        except Exception as exc:  # every rank must hear of it, not only rank 0 (see _context)
            detail = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            return "error", f"{what} is auto but the planner cannot plan this launch: {detail}"
        return "ok", resolution

    def _producer_context(self, out: torch.Tensor, rank: int, world: int, schedule: Schedule, storage=None) -> Context:
        """reduce_scatter: `out` is this rank's shard of the result, the kernel writes the full
        partial into our buffer. all_reduce: `out` is the full result, split into world parts."""
        dim = self.op.schedule.dim
        shape = list(out.shape)
        full = None
        if self.op.schedule.pattern == "all_reduce":
            # Rank d owns rows [d*S, (d+1)*S) with S = ceil(rows / world); the last part may be short.
            full = tuple(shape)
            shape[dim] = -(-shape[dim] // world)
        nbytes = out.numel() * out.element_size() * (world if self.op.schedule.pattern == "reduce_scatter" else 1)
        size = full[dim] if full is not None else shape[dim] * world
        p = planning.reduce(schedule, rank, world, shape[dim], nbytes, self.op.one_shot_max_bytes, size=size)
        return Context(p, tuple(shape), out.dtype, out.device, dim, producer=True, full_shape=full, storage=storage)
