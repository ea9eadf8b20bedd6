"""Tensor descriptors made on the host (`triton.tools.tensor_descriptor.TensorDescriptor`) as a launch's
arguments, the way Triton's fused-attention tutorial passes them on Hopper.

A communicated argument may come as a descriptor over this rank's shard. The launch binds its base
(the shard) as the communicated tensor, so buffers, contexts and checks see a tensor as ever, and
hands the kernel the same descriptor remade over the gathered tensor (all_gather; all_to_all: the
received one), its rows along dim 0 scaled to that tensor's:

    user:   TensorDescriptor(k_shard, shape=[rows, D], strides=[D, 1], block_shape=[BN, D])
    kernel: TensorDescriptor(gathered, shape=[world * rows, D], strides=[D, 1], block_shape=[BN, D])

That is sound only where the descriptor covers its whole shard row-major (its rows are then the
shard's elements in order, and the gathered tensor's rows follow on): a descriptor over part of a
shard, or with other strides, is refused in one line. The kernel's waits read the descriptor's own
shape, row stride and block rows (device.desc_chunk_range). Other arguments that are descriptors
(queries, outputs) pass through as they are."""
from __future__ import annotations

import dataclasses
import math

import torch

from syncopy.errors import LaunchError

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # a Triton without host descriptors: nothing can pass one
    TensorDescriptor = None


def is_descriptor(value) -> bool:
    """Is `value` a tensor descriptor made on the host?"""
    return TensorDescriptor is not None and isinstance(value, TensorDescriptor)


def key(value):
    """What a tile order may depend on of a host descriptor (its geometry, not its data): hashable."""
    return ("TensorDescriptor", tuple(value.shape), tuple(value.strides), tuple(value.block_shape), value.padding,
            value.base.dtype)


def shard_of(kernel: str, name: str, desc, dim: int, pattern: str) -> torch.Tensor:
    """The shard a communicated descriptor `name` wraps (its base), checked to be one the launch can
    remake over the gathered tensor: consumers only, along dim 0, over the whole shard row-major."""
    base = desc.base
    where = f"launch of '{kernel}': '{name}' is a TensorDescriptor"
    if pattern not in ("all_gather", "all_to_all"):
        raise LaunchError(f"{where}, but {pattern} writes '{name}' through a buffer of syncopy's; pass the output tensor "
                          "and make its descriptor in the kernel with tl.make_tensor_descriptor")
    if not isinstance(base, torch.Tensor):
        raise LaunchError(f"{where} over a {type(base).__name__}; make it over this rank's shard, a torch tensor")
    if dim != 0:
        raise LaunchError(f"{where} but the schedule shards dim {dim}; syncopy gathers host descriptors along dim 0 only, "
                          "so shard dim 0")
    shape, strides = [int(s) for s in desc.shape], [int(s) for s in desc.strides]
    row_major = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    if not base.is_contiguous() or math.prod(shape) != base.numel() or strides != row_major:
        last = base.shape[-1] if base.dim() else 1
        raise LaunchError(f"{where} with shape {shape} and strides {strides} over a shard of shape {list(base.shape)}; "
                          f"syncopy remakes it over the gathered tensor only where it covers the whole contiguous shard "
                          f"row-major: pass TensorDescriptor({name}_shard, shape=[{base.numel() // max(last, 1)}, {last}], "
                          f"strides=[{last}, 1], block_shape=...)")
    return base


def over(desc, tensor: torch.Tensor):
    """`desc` remade over `tensor` (the gathered or received one): its rows scaled, the rest as given."""
    row = int(desc.strides[0])
    return dataclasses.replace(desc, base=tensor, shape=[tensor.numel() // row, *desc.shape[1:]])


def rewrapped(arguments: dict, descriptors: dict) -> dict:
    """`arguments` with each communicated tensor that came as a host descriptor given back as one,
    over the tensor the kernel reads now (`arguments[name]`)."""
    if not descriptors:
        return arguments
    return {**arguments, **{name: over(desc, arguments[name]) for name, desc in descriptors.items()}}
