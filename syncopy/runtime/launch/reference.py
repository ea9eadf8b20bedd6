"""The unfused equivalent of a fused operator (`fused.reference[grid](...)`): the collective, then the
local kernel, with the config a fused launch of the same arguments takes. Also the collectives the
templates' references run."""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from syncopy.errors import LaunchError
from syncopy.runtime.launch import host_descriptors
from syncopy.runtime.launch.contexts import checked_group
from syncopy.runtime.launch.interpreter_limits import raise_interpreter_limit
from syncopy.runtime.transport import splits
from syncopy.runtime.where import ensure_allocator


def run(op, grid, args, kwargs, group) -> None:
    """all_gather: every listed tensor gathered along `dim`, then the local kernel. all_to_all:
    all_to_all_single (with the launch's split sizes, if any), then the local kernel. Producers:
    see `_producer`."""
    if op.loaded:
        raise LaunchError(f"'{op.local.fn.__name__}' comes from syncopy.load: its file holds the fused kernel only, so there is "
                          "no local kernel to run unfused; decorate the original kernel with syncopy.overlap for .reference")
    op.binder.refuse_grad(args, kwargs)  # the local kernel records no autograd graph either
    group = checked_group(group)
    kwargs = dict(kwargs)
    schedule = op.schedule
    split = splits.pop(kwargs, op.signature.parameters, schedule.pattern, op.local.fn.__name__)
    call = op.binder.bind(args, kwargs)
    op.binder.check_strides(call, dist.get_world_size(group))
    bound, shard, options = call.arguments, call.shard, call.options
    ensure_allocator(shard.device)
    if op.producer:
        return _producer(op, grid, bound, shard, options, group)
    if schedule.pattern == "all_to_all":
        if schedule.dim != 0:
            raise LaunchError("the all_to_all reference splits along dim 0; use dim: 0")
        if split is None:
            received = torch.empty_like(shard)
            dist.all_to_all_single(received, shard.contiguous(), group=group)
        else:  # uneven: all_to_all_single with the same splits (the counts exchanged and checked the same way)
            splits.check_static(shard, schedule.tensor, schedule.dim, op.local.fn.__name__)
            world, rank, kernel = dist.get_world_size(group), dist.get_rank(group), op.local.fn.__name__
            send, said, error = splits.local(split, shard, schedule.tensor, schedule.dim, world, kernel)
            recv = splits.exchange(send, said, error, group, world, rank, kernel)
            received = shard.new_empty((sum(recv), *shard.shape[1:]))
            dist.all_to_all_single(received, shard.contiguous(), list(recv), list(send), group=group)
        call_args = dict(bound)
        call_args[schedule.tensor] = received
        run_local(op, grid, call_args, options, group, call.descriptors)
        return
    call_args = dict(bound)
    for name in schedule.tensors:  # every listed tensor, gathered along `dim`
        if schedule.dim == 0:
            call_args[name] = all_gather_rows(bound[name], group)
        else:
            parts = [torch.empty_like(bound[name]) for _ in range(dist.get_world_size(group))]
            dist.all_gather(parts, bound[name], group=group)
            call_args[name] = torch.cat(parts, dim=schedule.dim).contiguous()
    run_local(op, grid, call_args, options, group, call.descriptors)


def _producer(op, grid, bound: dict, out: torch.Tensor, options: dict, group) -> None:
    """all_reduce: the local kernel on this rank's `out` as passed (it may read it: `C += A @ B`),
    then all_reduce, so out = sum over ranks r of kernel(C_r). reduce_scatter: the local kernel
    into a full buffer of zeros, then reduce_scatter_tensor, so unwritten elements sum to 0."""
    schedule = op.schedule
    world = dist.get_world_size(group)
    call_args = dict(bound)
    if schedule.pattern == "all_reduce":
        run_local(op, grid, call_args, options, group)
        dist.all_reduce(out, group=group)
        return
    shape = list(out.shape)
    shape[schedule.dim] *= world
    full = torch.zeros(shape, dtype=out.dtype, device=out.device)
    call_args[schedule.tensor] = full
    run_local(op, grid, call_args, options, group)
    # gloo has no reduce_scatter: all_reduce and keep this rank's part (same sums).
    dist.all_reduce(full, group=group)
    rows = out.shape[schedule.dim]
    out.copy_(full.narrow(schedule.dim, dist.get_rank(group) * rows, rows))


def run_local(op, grid, call_args: dict, options: dict, group, descriptors: dict | None = None) -> None:
    """The local kernel, with the config (and heuristics) a fused launch of these arguments takes,
    after the checks a fused launch makes of what the grid writes: a grid that writes past an output
    (a producer's full result included) is the fused launch's one line here too, not memory
    corruption (a kernel from syncopy.load has no local kernel: .reference refuses it above).
    `descriptors`: the communicated arguments the launch passed as host tensor descriptors, handed
    to the kernel as descriptors over the gathered tensors in `call_args`."""
    call_args, options = op.binder.tuned(grid, call_args, options, group, lambda: torch.empty_like(call_args[op.schedule.tensors[0]]))
    if op.schedule.dim == 0:
        op.orders.check_extents(grid, {**call_args, **options}, dist.get_world_size(group))
    try:
        op.local[grid](**host_descriptors.rewrapped(call_args, descriptors or {}), **options)
    except Exception as exc:
        raise_interpreter_limit(exc, op.kernel.build().transformed.source)
        raise


def all_gather_rows(x, group=None):
    """The reference all-gather along dim 0 (`all_gather_into_tensor`, quiet about its rename)."""
    full = torch.empty(x.shape[0] * dist.get_world_size(group), *x.shape[1:], dtype=x.dtype, device=x.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        dist.all_gather_into_tensor(full, x.contiguous(), group=group)
    return full
