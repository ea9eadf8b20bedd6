"""The launch of a fused operator, one function over its parts (api.FusedKernel holds them):

    launch(op, grid, args, kwargs, group)     the group's turn, the caller's stream after the last launch's
      run(op, ...)                            one launch, in order:
        op.binder.bind, check_strides         the call bound by name and checked        -> BoundCall
        agreement.meet                        what every rank launches, said and compared -> the launch's number
        op.contexts.get                       buffers, signal pad, plan (collective once) -> Context, backend
        op.binder.tuned                       an autotuned kernel's config
        op.orders.prepared                    the tile order (probed once), compiled once -> Order
        ctx.begin                             this launch's epoch
        op.tracer.start                       the trace buffer (trace=True)
        _start                                the transfers                              -> transfer
        op.kernel.run                         the fused kernel, then the transfer's join  -> kernel window
        _settle                               its errors: now, or from the error ring later
        op.tracer.finish                      the tiles' records (trace=True)

The consumer patterns (all_gather, all_to_all) and the producer ones (reduce_scatter, all_reduce) run
the same steps; where they differ, the step says so (`op.producer`)."""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.launch import agreement, host_descriptors, outcome, turns
from syncopy.runtime.launch.contexts import checked_group, refuse_broken_context
from syncopy.runtime.launch.order import grid3
from syncopy.runtime.state.context import Context
from syncopy.runtime.streams import streamops
from syncopy.runtime.streams.error_ring import LaunchErrors
from syncopy.runtime.transport import splits
from syncopy.runtime.transport.backends import control
from syncopy.runtime.where import cuda_device, deferred, ensure_allocator, on_device, spin_limit


def launch(op, grid, args, kwargs, group) -> None:
    """`run`, one at a time per group on this rank, in the mode syncopy's tensor work runs in.

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
    agreement.began()
    try:  # before inference_mode below, where no tensor requires grad; raised in `run`, where the peers hear of it
        op.binder.refuse_grad(args, kwargs)
        refused = None
    except LaunchError as exc:
        refused = exc
    group = checked_group(group)
    device = cuda_device(args, kwargs)
    # A pipeline's reader on its side thread (CPU ranks) launches in the turn its writer's thread holds.
    turn = contextlib.nullcontext() if turns.turn_held() else control.group_lock(group)
    with _profiled(op.local.fn.__name__), turn, torch.inference_mode(), on_device(device):
        follow_last_launch(op.contexts.last_stream, control.group_token(group), device)
        run(op, grid, args, kwargs, group, refused)
        if op.trace_file is not None and op.last_trace is not None:
            op.tracer.write(group)


def run(op, grid, args, kwargs, group, refused: LaunchError | None = None) -> None:
    """One launch of `op` on `group` (a checked process group whose turn the caller holds); the steps
    of the module's docstring. `refused`: what `launch` found wrong before (inputs that require grad)."""
    built, call, split, uneven = _checked_call(op, args, kwargs, group, refused)
    told = _tell(op, group, call, uneven)
    first = told is not None and (told.first or not op.contexts.has(call.shard, group, call.arguments, uneven))
    if first:  # a first launch meets the peers anyway: hear them before anything collective
        told.hear(control.wait_bound(op.timeout_s))
    n = told.n if told is not None else 0
    try:
        ready = _prepare(op, grid, group, built, call, split, uneven)
    except Exception as exc:
        agreement.refused(group, n, exc)  # peers waiting for this rank's chunks learn why they never come
        raise
    if told is not None and not first:
        _hear_warm(op, told, *ready[:2])
    _transfer_and_compute(op, grid, group, built, call, n, *ready)


def _checked_call(op, args, kwargs, group, refused: LaunchError | None = None):
    """The kernel built and the call bound and checked on this rank: (built, call, split, uneven).
    A mistake here is this rank's alone: it is said to the peers (agreement.meet) before it is raised,
    so that they name this rank and its error instead of waiting for its chunks."""
    try:
        if refused is not None:
            raise refused
        built = op.kernel.build()
        kwargs = dict(kwargs)
        split = splits.pop(kwargs, op.signature.parameters, op.schedule.pattern, op.local.fn.__name__)
        call = op.binder.bind(args, kwargs)
        op.binder.check_strides(call, dist.get_world_size(group))
        ensure_allocator(call.shard.device)
        uneven = _uneven(op, split, call.shard)
    except Exception as exc:
        if not turns.turn_held():
            with contextlib.suppress(LaunchError):  # a peer that did not come either: this rank's own error comes first
                agreement.meet(op, group, agreement.said(op, error=exc))
        raise
    # An operator or group broken by an earlier launch (a timeout, also one a GPU launch's error ring
    # reports only now) refuses at once and says nothing: its peers' operators broke with it (they
    # refuse alike, the launches stay in step), or they are gone.
    _check_earlier(op, call, group, uneven)
    op.contexts.refuse_broken(call.shard, group, call.arguments, uneven)
    return built, call, split, uneven


def _check_earlier(op, call, group, uneven: bool) -> None:
    """The errors of this context's earlier launches that are done (a backend that returns before its
    kernel ran: their timeouts surface here, naming what the exchanges found)."""
    hit = op.contexts.peek(call.shard, group, call.arguments, uneven)
    if hit is not None and deferred(hit[1]):
        try:
            hit[1].check()
        except SyncopyTimeout as exc:
            raise _explained(exc, group, None) from None


def _tell(op, group, call, uneven: bool):
    """This launch's exchange, started (agreement.tell); None in a world of one, and for a pipeline's
    reader on its side thread, which launches in its writer's turn (not counted)."""
    if turns.turn_held():
        return None
    return agreement.tell(op, group, agreement.said(op, call, uneven))


def _hear_warm(op, told, ctx, backend) -> None:
    """A warm launch hears its peers before its transfers start, bounded by timeout_s (a peer that
    never made this launch is a SyncopyTimeout for its first chunk, as its chunks are what never
    comes); one on a backend that returns before its kernel ran (GPUs) enqueues and returns, as any
    CUDA op, and reads their words later."""
    if deferred(backend):
        told.defer()
        return
    rank = ctx.plan.rank
    chunk_of = (lambda peer: (rank, 0)) if op.producer else (lambda peer: (peer, 0))  # what this rank waits for
    told.hear(op.timeout_s, timeout=(rank, chunk_of, ctx.epoch + 1, op.timeout_s))


def _injected(op, exc: SyncopyTimeout) -> SyncopyTimeout | None:
    """`exc` saying so when the chunk it waited for is one an injected fault drops (`faults=`,
    `syncopy run --inject`): the timeout is the one the fault tests, not the ranks' mistake."""
    faults = op.faults
    if faults is None or tuple(exc.chunk) not in faults.drop:
        return None
    src, index = exc.chunk
    return SyncopyTimeout(exc.rank, exc.chunk, exc.epoch, exc.timeout_s,
                          f"the injected fault drop={src}:{index} drops it at every launch", "this is the timeout that fault injects",
                          stopped=exc.stopped)


def _explained(exc: SyncopyTimeout, group, n: int | None) -> SyncopyTimeout:
    """`exc` with the cause its peers left word of (agreement.cause), if any: the rank at fault and why."""
    why = agreement.cause(group, n)
    if why is None:
        return exc
    return SyncopyTimeout(exc.rank, exc.chunk, exc.epoch, exc.timeout_s, why, agreement.SAME, stopped=exc.stopped)


def _prepare(op, grid, group, built, call, split, uneven: bool) -> tuple:
    """Everything before the transfers, once the ranks agreed on what they launch: (ctx, backend,
    kernel arguments, options, order, own error ring)."""
    ctx, backend = op.contexts.get(call.shard, group, call.arguments, uneven=uneven)
    if uneven:
        _relayout(op, ctx, backend, split, call.shard)
    # An autotuned kernel's config (timed on the local kernel with a scratch tensor: no wait on a chunk).
    arguments, options = op.binder.tuned(grid, call.arguments, call.options, group, lambda: torch.empty_like(ctx.buffer))
    op.resolved_chunks_per_rank, op.resolved_order = ctx.schedule.chunks_per_rank, ctx.schedule.order
    op.last_resolution = ctx.resolution
    refuse_broken_context(ctx)
    kernel_args = _kernel_arguments(op, ctx, arguments, call.descriptors)
    if backend is not None and not op.producer:
        g0, g1, g2 = grid3(grid, kernel_args)
        # Each program is num_ctas CTAs (a cluster on sm_90): what could hold SMs is their product.
        backend.check_grid(g0 * g1 * g2, built.transformed.persistent is not None, op.local.fn.__name__, call.shard.device,
                           int(options.get("num_ctas") or 1))
    order = op.orders.prepared(ctx, grid, kernel_args, options, backend, group)
    if deferred(backend):
        try:
            backend.check()  # earlier launches that are done: their errors surface here
        except SyncopyTimeout as exc:
            raise _explained(exc, group, None) from None
    own = _own_errors(op, ctx, built.transformed.checked) if backend is None and not op.producer else None
    if own is not None:
        _check_own(ctx, own, room=True)  # a world of one: its earlier launches that are done, likewise; room for this one
    return ctx, backend, kernel_args, options, order, own


def _transfer_and_compute(op, grid, group, built, call, n: int, ctx, backend, kernel_args, options, order, own) -> None:
    """This launch's epoch, transfers, kernel and outcome (a timeout names the cause the peers left word of)."""
    need = ctx.tiles_per_chunk[op.orders.shape_key(grid, kernel_args)] if op.producer else None
    if need is not None:
        ctx.set_targets(need)
    epoch = ctx.begin(spin_limit(op.timeout_s, call.shard.device.type))
    trace, trace_buf = op.tracer.start(ctx, epoch, len(order.ranges))
    transfer = _start(op, ctx, backend, call.shard, epoch, need)
    window = op.kernel.run(grid, kernel_args, ctx, order.table, trace_buf, options, transfer)
    try:
        _settle(op, ctx, backend, own, transfer, epoch, call.shard, traced=trace is not None)
    except SyncopyTimeout as exc:
        raise _injected(op, exc) or _explained(exc, group, n) from None
    if trace is not None:
        op.tracer.finish(trace, trace_buf, order.table, order.ranges, order.exec_order, window,
                         persistent=built.transformed.persistent is not None)


def _kernel_arguments(op, ctx: Context, arguments: dict, descriptors: dict) -> dict:
    """The user's arguments as the fused kernel takes them: a consumer reads the gathered (received)
    tensors where the user passed shards (host descriptors: descriptors over them); a producer writes
    its partial into the context's buffer."""
    call_args = dict(arguments)
    tensors = op.schedule.tensors
    if op.producer:
        call_args[tensors[0]] = ctx.buffer
        return call_args
    ctx.extra_shards = [arguments[n] for n in tensors[1:]]
    call_args.update(zip(tensors, ctx.tensors()))
    call_args[tensors[0]] = ctx.received()
    return host_descriptors.rewrapped(call_args, descriptors)


def _start(op, ctx: Context, backend, shard: torch.Tensor, epoch: int, need: list[int] | None):
    """This launch's transfers, started before its kernel: the backend's transfer (None in a world of one).

    Consumers: the receive buffers poisoned (poison_receive), this rank's own rows placed, the peers'
    chunks on their way. Producers: the partial set to what the kernel starts from, `out` poisoned
    once that is read, the flags of chunks no tile writes raised, the reduction on its way."""
    if op.producer:
        init_partial(ctx, shard, op.schedule.pattern)
        if op.poison_receive and shard.is_floating_point():
            shard.fill_(float("nan"))  # after init_partial read it: only the reduction may write `out` now
        outcome.announce_unwritten(ctx, need)
        return backend.start_reduce(ctx, shard, epoch) if backend is not None else None
    if op.poison_receive:
        for buffer in ctx.tensors():
            if buffer.is_floating_point():
                buffer.fill_(float("nan"))
    if backend is None:
        ctx.place_local(shard)
        ctx.land_all()
        return None
    if op.schedule.pattern == "all_to_all":
        ctx.source = shard
    backend.local(ctx, shard)
    return backend.start(ctx, epoch)


def _settle(op, ctx: Context, backend, own: LaunchErrors | None, transfer, epoch: int, shard: torch.Tensor, traced: bool) -> None:
    """What became of the launch. Where it returned before its kernel ran (a GPU backend, a world of
    one's error ring), its errors are recorded and raised by a later launch or `synchronize()` (now,
    if traced: the trace reads the kernel's records anyway); elsewhere they are raised now."""
    if own is not None:
        # A world of one, as the deferred backends: the kernel's error words copied behind it, read
        # once it is done (CPU ranks: now; GPUs: the next launch, synchronize(), or now if it already is).
        own.record(epoch, own.ops.handle(torch.cuda.current_stream(shard.device)) if shard.is_cuda else None)
        _check_own(ctx, own, wait=traced)
        return
    if getattr(transfer, "deferred", False):
        # Enqueued, like any CUDA op. Consumers: the error words are read once the kernel is done.
        # Producers (p2p reduce_scatter): the sends follow the kernel's flags and the reduction the sends.
        if not op.producer:
            backend.finish(ctx, epoch)
            backend.check(wait=traced)
        elif traced:
            backend.check(wait=True)
        return
    t = op.kernel.build().transformed
    checked_file = t.source.path if t.checked else None  # checked mode: its report words are read now
    if op.producer:
        if transfer is None:
            shard.copy_(ctx.buffer)  # a world of one: the partial is the result
        outcome.raise_for_producer(ctx, transfer, epoch, op.timeout_s, checked_file)
    else:
        outcome.raise_for_consumer(ctx, transfer, epoch, op.timeout_s, checked_file)


def init_partial(ctx: Context, out: torch.Tensor, pattern: str) -> None:
    """What the kernel's partial holds before its first store, as in the reference: all_reduce,
    this rank's `out` (the kernel sees the user's C, e.g. for `C += A @ B`); reduce_scatter,
    zeros (a partial the kernel adds into, or leaves unwritten, starts at zero). Enqueued on the
    current stream, the kernel's, so on GPUs it is a stream-ordered memset or copy, no host sync.
    Done at every launch: the kernel's own stores are not proven to cover every element."""
    if pattern == "all_reduce":
        ctx.buffer.copy_(out)
    else:
        ctx.buffer.zero_()


def follow_last_launch(last_stream: dict, token: int, device) -> None:
    """On CUDA, this launch's stream waits for the last launch's on the group when they differ
    (threads have their own current streams; both launches use the same buffers). `last_stream`:
    the operator's (group token, device) -> stream of its last launch there (Contexts.last_stream)."""
    if device is None:
        return
    stream, last = torch.cuda.current_stream(device), last_stream.get((token, device))
    if last is not None and last != stream:
        stream.wait_stream(last)
    last_stream[(token, device)] = stream


def synchronize(op) -> None:
    """Wait for `op`'s launches so far and raise the first error among them (FusedKernel.synchronize);
    a disagreement between the ranks that the warm launches' exchanges found first (agreement.settle)."""
    for ctx, backend in list(op.contexts.table.values()):
        if deferred(backend):  # p2p and nccl, which know the user's group
            agreement.settle(backend.user_group)
            try:
                backend.check(wait=True)
            except SyncopyTimeout as exc:
                raise _explained(exc, backend.user_group, None) from None
        elif backend is None and getattr(ctx, "own_errors", None) is not None:
            _check_own(ctx, ctx.own_errors, wait=True)


def _profiled(kernel: str):
    """A `syncopy::<kernel>` range in torch.profiler traces around a launch (its transfers, kernel and
    waits show up inside it); nothing at all when no profiler runs, the warm launch path stays as it was."""
    if torch.autograd._profiler_enabled():
        return torch.profiler.record_function(f"syncopy::{kernel}")
    return contextlib.nullcontext()


def _uneven(op, split, shard: torch.Tensor) -> bool:
    """Does this launch give split sizes? (What no count can fix is refused here, on every rank alike.)"""
    if split is None:
        return False
    splits.check_static(shard, op.schedule.tensor, op.schedule.dim, op.local.fn.__name__)
    return True


def _relayout(op, ctx: Context, backend, split, shard: torch.Tensor) -> None:
    """Uneven all_to_all: check and exchange this launch's counts (every rank hears of a rank's
    mistake), then lower its plan into the context."""
    from syncopy.runtime.state import plan as planning

    plan, kernel = ctx.plan, op.local.fn.__name__
    send, said, error = splits.local(split, shard, op.schedule.tensor, op.schedule.dim, plan.world, kernel)
    group = backend.group if backend is not None else None
    recv = splits.exchange(send, said, error, group, plan.world, plan.rank, kernel)
    ctx.relayout(planning.all_to_all(ctx.schedule, plan.rank, plan.world, 0, splits=(send, recv)))


def _own_errors(op, ctx: Context, checked: bool) -> LaunchErrors | None:
    """A world of one's consumer context: the ring its launches' error words are copied into
    (made at its first launch), so that a launch never reads a device word on the host (a
    device sync on GPUs). None in checked mode, whose launch reads its report words after the
    kernel anyway (read_check.raise_if_violated)."""
    if checked:
        return None
    errors = getattr(ctx, "own_errors", None)
    if errors is None:
        cuda = ctx.signals.is_cuda
        ops = streamops.cuda_ops() if cuda else streamops.HostOps()
        errors = ctx.own_errors = LaunchErrors(ctx, ops, (lambda t: t.pin_memory()) if cuda else (lambda t: t), op.timeout_s)
    return errors


def _check_own(ctx: Context, errors: LaunchErrors, wait: bool = False, room: bool = False) -> None:
    """`errors.check`: the first timed-out chunk among a world of one's launches that are done
    (with `wait`: all of them) raises SyncopyTimeout, and its context takes no more launches, as
    when the error was read at the end of its launch. With `room`, before the launch's kernel: the
    ring has a slot for it (`errors.make_room`, which raises an older launch's failure now, before
    anything of this launch is enqueued)."""
    try:
        errors.check(wait=wait)
        if room:
            errors.make_room()
    except SyncopyTimeout as exc:
        src, index = exc.chunk
        ctx.broken = f"chunk {src * ctx.plan.chunks_per_rank + index} timed out"
        raise
