"""Uneven all_to_all: split sizes given at launch, as torch's `all_to_all_single` takes them.

    fused[grid](x, ..., input_split_sizes=[5, 0, 11], output_split_sizes=None, group=pg)

`input_split_sizes[d]` rows of this rank's input (in rank order along dim 0) go to rank d;
`output_split_sizes[s]` rows arrive from rank s, and the kernel reads them in rank order. The
counts change from launch to launch (MoE routing). They are exchanged over the control group at
every launch (one small all_to_all), so output_split_sizes may be left out; given, it is checked
against what the peers send, and a mismatch is a one-line error rather than a transfer that hangs
or a receive of the wrong rows.
"""
from __future__ import annotations

import numbers

import torch
import torch.distributed as dist

from syncopy.errors import LaunchError

INPUT, OUTPUT = "input_split_sizes", "output_split_sizes"


def pop(kwargs: dict, parameters, pattern: str, kernel: str):
    """Take the split keywords out of a launch's keywords: (input, output or None), or None for an
    equal-split launch. A kernel parameter of the same name stays the kernel's."""
    given = {k: kwargs.pop(k) for k in (INPUT, OUTPUT) if k in kwargs and k not in parameters}
    if not given:
        return None
    if pattern != "all_to_all":
        raise LaunchError(f"launch of '{kernel}': {', '.join(given)} split an all_to_all, but the schedule's pattern is {pattern}; "
                          "drop the split sizes, or use pattern: all_to_all")
    if INPUT not in given:
        raise LaunchError(f"launch of '{kernel}': output_split_sizes without input_split_sizes; pass input_split_sizes (rows "
                          "this rank sends to each rank), output_split_sizes is optional")
    return given[INPUT], given.get(OUTPUT)


def counts(value, name: str, world: int, kernel: str) -> tuple[int, ...]:
    """A split-size argument as a tuple of `world` counts >= 0 (a list, a tuple or a 1-D integer tensor)."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.is_floating_point() or value.is_complex():
            raise LaunchError(f"launch of '{kernel}': {name} is a {value.dtype} tensor of shape {list(value.shape)}; pass one "
                              f"integer count per rank ({world}), as a list or a 1-D integer tensor")
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value):
        raise LaunchError(f"launch of '{kernel}': {name} must be a list of {world} integer row counts (one per rank), "
                          f"got {value!r}")
    if len(value) != world:
        raise LaunchError(f"launch of '{kernel}': {name} has {len(value)} counts but the group has {world} ranks; "
                          f"give one count per rank")
    if any(v < 0 for v in value):
        raise LaunchError(f"launch of '{kernel}': {name} {list(value)} has a negative count; counts are rows, 0 or more")
    return tuple(int(v) for v in value)


def check_input(send: tuple[int, ...], shard: torch.Tensor, tensor: str, dim: int, kernel: str) -> None:
    """The input splits cover the input's rows exactly, along dim 0, on a CPU world."""
    if dim != 0:
        raise LaunchError(f"launch of '{kernel}': split sizes cut '{tensor}' along dim 0, as all_to_all_single does, but the "
                          f"schedule says dim: {dim}; use dim: 0")
    if shard.device.type != "cpu":
        raise LaunchError(f"launch of '{kernel}': uneven all_to_all splits run on CPU worlds (gloo backend) only so far, not on "
                          f"{shard.device.type} (p2p, nccl); launch with equal splits (pad each block to the largest count)")
    rows = shard.shape[0]
    if sum(send) != rows:
        raise LaunchError(f"launch of '{kernel}': input_split_sizes {list(send)} sums to {sum(send)} but '{tensor}' has {rows} "
                          f"rows along dim 0; give counts that sum to {rows} (rows sent to each rank, in rank order)")


def exchange(send: tuple[int, ...], group, world: int) -> tuple[int, ...]:
    """Rows this rank receives from each rank: every rank's count for it (one all_to_all of counts)."""
    if world == 1:
        return send
    mine = torch.tensor(send, dtype=torch.int64)
    theirs = torch.empty_like(mine)
    dist.all_to_all_single(theirs, mine, group=group)
    return tuple(int(v) for v in theirs.tolist())


def check_output(given, recv: tuple[int, ...], world: int, rank: int, kernel: str) -> None:
    """A caller's output_split_sizes says what the peers send this rank."""
    if given is None:
        return
    said = counts(given, OUTPUT, world, kernel)
    if said != recv:
        src = next(s for s in range(world) if said[s] != recv[s])
        raise LaunchError(f"launch of '{kernel}': output_split_sizes {list(said)} on rank {rank} but the ranks send it {list(recv)} "
                          f"(rank {src}'s input_split_sizes[{rank}] is {recv[src]}); pass output_split_sizes = what "
                          "all_to_all_single of the input counts gives, or leave it out")
