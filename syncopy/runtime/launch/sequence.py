"""The launch sequence of a fused operator: one launch at a time per group, bind, context, order, epoch,
transfers, kernel, errors; the producer path; the launch's initial partial."""
from __future__ import annotations

import contextlib
import time

import torch

from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.launch import turns
from syncopy.runtime.transport import splits
from syncopy.runtime.streams import streamops
from syncopy.runtime.launch import warmup
from syncopy.runtime.transport.backends import control
from syncopy.runtime.state.context import Context
from syncopy.runtime.launch.contexts import checked_group
from syncopy.runtime.where import cuda_device, deferred, ensure_allocator, on_device, spin_limit
from syncopy.runtime.launch.outcome import (_advice, _and, _announce_unwritten, _dropped_out, _raise_if_corrupt, _raise_if_dropped_out)
from syncopy.runtime.streams.error_ring import LaunchErrors


def _profiled(kernel: str):
    """A `syncopy::<kernel>` range in torch.profiler traces around a launch (its transfers, kernel and
    waits show up inside it); nothing at all when no profiler runs, the warm launch path stays as it was."""
    if torch.autograd._profiler_enabled():
        return torch.profiler.record_function(f"syncopy::{kernel}")
    return contextlib.nullcontext()


class LaunchSequence:
    """The launch itself, consumer and producer (FusedKernel mixes this in; the steps it calls are the
    other mixins of syncopy/runtime)."""

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
        device = cuda_device(args, kwargs)
        # A pipeline's reader on its side thread (CPU ranks) launches in the turn its writer's thread holds.
        turn = contextlib.nullcontext() if turns.turn_held() else control.group_lock(group)
        with _profiled(self.local.fn.__name__), turn, torch.inference_mode(), on_device(device):
            self._follow_last_launch(control.group_token(group), device)
            result = self._launch(grid, args, kwargs, group)
            if self.trace_file is not None and self.last_trace is not None:
                self._write_trace(group)
            return result

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

    def _launch(self, grid, args, kwargs, group):
        group = checked_group(group)
        self.build()
        t, fused, probe, _ = self._built
        kwargs = dict(kwargs)
        split = splits.pop(kwargs, self.signature.parameters, self.schedule.pattern, self.local.fn.__name__)
        bound, shard, options = self._bind(args, kwargs)
        ensure_allocator(shard.device)
        uneven = self._uneven(split, shard)
        ctx, backend = self._context(shard, group, bound, uneven=uneven)
        if uneven:
            self._relayout(ctx, backend, split, shard)
        # An autotuned kernel's config (timed on the local kernel with a scratch tensor: no wait on a chunk).
        bound, options = self._tuned(grid, bound, options, group, lambda: torch.empty_like(ctx.buffer))
        self.resolved_chunks_per_rank, self.resolved_order = ctx.schedule.chunks_per_rank, ctx.schedule.order
        self.last_resolution = ctx.resolution
        if ctx.broken:
            raise LaunchError(f"this operator's transfers broke in an earlier launch ({ctx.broken}); re-create the process group")
        if self.producer:
            return self._launch_producer(grid, bound, shard, options, ctx, backend, group)
        call_args = dict(bound)
        ctx.extra_shards = [bound[n] for n in self.schedule.tensors[1:]]
        call_args.update(zip(self.schedule.tensors, ctx.tensors()))
        call_args[self.schedule.tensors[0]] = ctx.received()
        if backend is not None:
            g0, g1, g2 = self._grid(grid, call_args)
            # Each program is num_ctas CTAs (a cluster on sm_90): what could hold SMs is their product.
            backend.check_grid(g0 * g1 * g2, t.persistent is not None, self.local.fn.__name__, shard.device,
                               int(options.get("num_ctas") or 1))
        order, ranges, exec_order = self._prepared_order(ctx, grid, call_args, options, backend, group)
        if deferred(backend):
            backend.check()  # earlier launches that are done: their errors surface here
        own = self._own_errors(ctx, t.checked) if backend is None else None
        if own is not None:
            _check_own(ctx, own)  # a world of one: its earlier launches that are done, likewise
        epoch = ctx.begin(spin_limit(self.timeout_s, shard.device.type))
        trace, trace_buf = self._new_trace(ctx, epoch, len(ranges))
        if self.poison_receive:
            for buffer in ctx.tensors():
                if buffer.is_floating_point():
                    buffer.fill_(float("nan"))
        if backend is None:
            ctx.place_local(shard)
            ctx.land_all()
            transfer = None
        else:
            if self.schedule.pattern == "all_to_all":
                ctx.source = shard
            backend.local(ctx, shard)
            transfer = backend.start(ctx, epoch)
        k0, k1 = self._run_kernel(fused, grid, call_args, ctx, order, trace_buf, options, transfer)
        if own is not None:
            # A world of one, as the deferred backends: the kernel's error words copied behind it,
            # read once it is done (CPU ranks: now; GPUs: the next launch, synchronize(), or now if
            # it already is; a traced launch waits for it).
            own.record(epoch, own.ops.handle(torch.cuda.current_stream(shard.device)) if shard.is_cuda else None)
            _check_own(ctx, own, wait=trace is not None)
            if trace is not None:
                self._finish_trace(trace, trace_buf, order, ranges, exec_order, (k0, k1), persistent=t.persistent is not None)
            return None
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
            _read_check().raise_if_violated(ctx, t.source.path)
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
        _raise_if_corrupt(ctx, epoch, transfer)
        if trace is not None:
            self._finish_trace(trace, trace_buf, order, ranges, exec_order, (k0, k1), persistent=t.persistent is not None)
        return None

    def _uneven(self, split, shard: torch.Tensor) -> bool:
        """Does this launch give split sizes? (What no count can fix is refused here, on every rank alike.)"""
        if split is None:
            return False
        splits.check_static(shard, self.schedule.tensor, self.schedule.dim, self.local.fn.__name__)
        return True

    def _relayout(self, ctx: Context, backend, split, shard: torch.Tensor) -> None:
        """Uneven all_to_all: check and exchange this launch's counts (every rank hears of a rank's
        mistake), then lower its plan into the context."""
        from syncopy.runtime.state import plan as planning

        plan, kernel = ctx.plan, self.local.fn.__name__
        send, said, error = splits.local(split, shard, self.schedule.tensor, self.schedule.dim, plan.world, kernel)
        group = backend.group if backend is not None else None
        recv = splits.exchange(send, said, error, group, plan.world, plan.rank, kernel)
        ctx.relayout(planning.all_to_all(ctx.schedule, plan.rank, plan.world, 0, splits=(send, recv)))

    def synchronize(self) -> None:
        """Wait for this operator's launches so far and raise the first error among them
        (SyncopyTimeout, naming rank, chunk and epoch). On GPUs a warm launch returns once its work
        is enqueued, like any CUDA op (p2p with one rank per GPU, and a world of one); its errors
        surface at the next launch of the same shape or here. CPU launches return when they are done and raise at once."""
        for ctx, backend in list(self._contexts.values()):
            if deferred(backend):
                backend.check(wait=True)
            elif backend is None and getattr(ctx, "own_errors", None) is not None:
                _check_own(ctx, ctx.own_errors, wait=True)

    def _own_errors(self, ctx: Context, checked: bool) -> LaunchErrors | None:
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
            errors = ctx.own_errors = LaunchErrors(ctx, ops, (lambda t: t.pin_memory()) if cuda else (lambda t: t), self.timeout_s)
        return errors

    def _prepared_order(self, ctx: Context, grid, call_args: dict, options: dict, backend, group):
        """`_order`; at the first launch of this launch shape on `ctx`, also the kernel's compile, both
        done before the launch's waits start and met by every rank (control.prepared): a compile
        longer than timeout_s times nothing out, and blames no rank."""
        # Uneven splits: grids follow each rank's received rows, so they differ between ranks and
        # launches; the first launch of the context is the one every rank prepares together.
        key = ("uneven",) if ctx.plan.uneven else self._shape_key(grid, call_args)
        if backend is None or key in ctx.prepared:
            return self._order(ctx, grid, call_args, backend)

        def prepare():
            spin_limit(self.timeout_s, ctx.buffer.device.type)  # the interpreter measures a poll once: not on the clock
            ordered = self._order(ctx, grid, call_args, backend)
            extra = self._extra(ctx, ordered[0], ctx.no_trace)
            warmup.compile_kernel(self._built[1], grid, {**call_args, **extra}, options)
            return ordered

        what = f"the first launch of {self.local.fn.__name__} with grid {list(self._grid(grid, call_args))}"
        ordered = control.prepared(group, self.timeout_s, what, prepare)
        ctx.prepared[key] = True
        return ordered

    def _launch_producer(self, grid, bound: dict, out: torch.Tensor, options: dict, ctx: Context, backend, group=None):
        """reduce_scatter / all_reduce: the kernel writes its full partial result into our buffer and
        announces chunks; the transfer threads reduce them into `out` while later tiles compute.

        The kernel runs as the reference runs it: on a partial that starts as the user's `out`
        (all_reduce) or as zeros (reduce_scatter), so atomics, read-modify-write epilogues and
        elements no tile writes give what `fused.reference` gives."""
        _, fused, _, _ = self._built
        call_args = dict(bound)
        call_args[self.schedule.tensor] = ctx.buffer
        order, ranges, exec_order = self._prepared_order(ctx, grid, call_args, options, backend, group)
        need = ctx.tiles_per_chunk[self._shape_key(grid, call_args)]
        if deferred(backend):
            backend.check()  # earlier launches that are done: their errors surface here
        ctx.set_targets(need)
        epoch = ctx.begin(spin_limit(self.timeout_s, out.device.type))
        trace, trace_buf = self._new_trace(ctx, epoch, len(ranges))
        self._init_partial(ctx, out)
        if self.poison_receive and out.is_floating_point():
            out.fill_(float("nan"))  # after _init_partial read it: only the reduction may write `out` now
        _announce_unwritten(ctx, need)
        transfer = backend.start_reduce(ctx, out, epoch) if backend is not None else None
        k0, k1 = self._run_kernel(fused, grid, call_args, ctx, order, trace_buf, options, transfer)
        if getattr(transfer, "deferred", False):
            # Enqueued (p2p reduce_scatter, one rank per GPU): the sends follow the kernel's flags and
            # the reduction follows the sends on the device; errors surface at the next launch or
            # synchronize() (a traced launch waits for them now).
            if trace is not None:
                backend.check(wait=True)
                self._finish_trace(trace, trace_buf, order, ranges, exec_order, (k0, k1))
            return None
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
            _raise_if_corrupt(ctx, epoch, transfer)
        if self._built[0].checked:
            _read_check().raise_if_violated(ctx, self._built[0].source.path)  # on GPUs a host sync: checked mode only
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

    def _run_kernel(self, fused, grid, call_args: dict, ctx: Context, order, trace_buf, options: dict, transfer) -> tuple[float, float]:
        """The fused kernel, then the transfer's join (whatever the kernel raised); (start, end) in
        seconds from the launch's start, for the trace."""
        k0 = time.perf_counter() - ctx.t0
        try:
            fused[grid](**call_args, **self._extra(ctx, order, trace_buf), **options)
        finally:
            k1 = time.perf_counter() - ctx.t0
            if transfer is not None:
                transfer.join()
        return k0, k1


def _check_own(ctx: Context, errors: LaunchErrors, wait: bool = False) -> None:
    """`errors.check`: the first timed-out chunk among a world of one's launches that are done
    (with `wait`: all of them) raises SyncopyTimeout, and its context takes no more launches, as
    when the error was read at the end of its launch."""
    try:
        errors.check(wait=wait)
    except SyncopyTimeout as exc:
        src, index = exc.chunk
        ctx.broken = f"chunk {src * ctx.plan.chunks_per_rank + index} timed out"
        raise


def _read_check():
    """Checked mode's reports (passes/read_check.py, which needs libcst), imported only when a checked kernel reports."""
    from syncopy.passes import read_check

    return read_check
