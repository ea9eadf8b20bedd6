"""Uneven all_to_all: split sizes given at launch, as torch's `all_to_all_single` takes them.

    fused[grid](x, ..., input_split_sizes=[5, 0, 11], output_split_sizes=None, group=pg)

`input_split_sizes[d]` rows of this rank's input (in rank order along dim 0) go to rank d;
`output_split_sizes[s]` rows arrive from rank s, and the kernel reads them in rank order. The
counts change from launch to launch (MoE routing). They are exchanged over the control group at
every launch (one small all_gather), so output_split_sizes may be left out; given, it is checked
against what the peers send. Split sizes that do not fit, on any rank, are a one-line error on every
rank (the exchange carries each rank's verdict), never a transfer that waits for rows that never
come or a receive of the wrong rows.
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


def check_static(shard: torch.Tensor, tensor: str, dim: int, kernel: str) -> None:
    """What no split size can fix, the same on every rank: dim 0, and a CPU world."""
    if dim != 0:
        raise LaunchError(f"launch of '{kernel}': split sizes cut '{tensor}' along dim 0, as all_to_all_single does, but the "
                          f"schedule says dim: {dim}; use dim: 0")
    if shard.device.type != "cpu":
        raise LaunchError(f"launch of '{kernel}': uneven all_to_all splits run on CPU worlds (gloo backend) only so far, not on "
                          f"{shard.device.type} (p2p, nccl); launch with equal splits (pad each block to the largest count)")


def check_input(send: tuple[int, ...], shard: torch.Tensor, tensor: str, dim: int, kernel: str) -> None:
    """The input splits cover the input's rows exactly, along dim 0, on a CPU world."""
    check_static(shard, tensor, dim, kernel)
    rows = shard.shape[0]
    if sum(send) != rows:
        raise LaunchError(f"launch of '{kernel}': input_split_sizes {list(send)} sums to {sum(send)} but '{tensor}' has {rows} "
                          f"rows along dim 0; give counts that sum to {rows} (rows sent to each rank, in rank order)")


def local(split, shard: torch.Tensor, tensor: str, dim: int, world: int, kernel: str):
    """This rank's (input splits, output splits or None) checked, or the LaunchError saying why not:
    raised only after the exchange, so that every rank hears of it (see `exchange`)."""
    try:
        send = counts(split[0], INPUT, world, kernel)
        check_input(send, shard, tensor, dim, kernel)
        said = counts(split[1], OUTPUT, world, kernel) if split[1] is not None else None
    except LaunchError as exc:
        return None, None, exc
    return send, said, None


def exchange(send, said, error: LaunchError | None, group, world: int, rank: int, kernel: str) -> tuple[int, ...]:
    """Rows this rank receives from each rank: every rank's count for it. One all_gather of every
    rank's (refused?, input splits, output splits it expects), so that a mistake on one rank is an
    error on every rank, naming it, rather than a wait for chunks that never come."""
    rows = [[0 if error is None else 1, *(send or (0,) * world), *(said or (-1,) * world)]]
    if world > 1:
        every = [torch.empty(2 * world + 1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(every, torch.tensor(rows[0], dtype=torch.int64), group=group)
        rows = [t.tolist() for t in every]
    if error is not None:
        raise error
    refused = [r for r in range(world) if rows[r][0]]
    if refused:
        raise LaunchError(f"launch of '{kernel}': rank {refused[0]} refused its split sizes (its own error says why), so rank "
                          f"{rank} does not launch either; fix the split sizes there")
    for r in range(world):
        recv = [rows[s][1 + r] for s in range(world)]
        expected = rows[r][1 + world :]
        if expected[0] >= 0 and expected != recv:
            src = next(s for s in range(world) if expected[s] != recv[s])
            raise LaunchError(f"launch of '{kernel}': output_split_sizes {expected} on rank {r} but the ranks send it {recv} "
                              f"(rank {src}'s input_split_sizes[{r}] is {recv[src]}); pass output_split_sizes = what "
                              "all_to_all_single of the input counts gives, or leave it out")
    return tuple(rows[s][1 + rank] for s in range(world))
