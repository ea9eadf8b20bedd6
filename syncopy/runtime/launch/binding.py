"""A launch's arguments by name, checked once per call form, and the launch options Triton takes: the
first step of a launch, `Binder.bind(args, kwargs) -> BoundCall`."""
from __future__ import annotations

import inspect
from typing import NamedTuple

import torch

from syncopy.errors import LaunchError
from syncopy.runtime.launch import host_descriptors
from syncopy.runtime.where import interpreting


_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "warmup", "ir_override"}


class BoundCall(NamedTuple):
    """One launch's call, bound: the kernel's arguments by name (the communicated tensor as passed: this
    rank's shard), that shard, and the launch options (num_warps, ...) for Triton. `descriptors`: the
    communicated arguments passed as host tensor descriptors, by name (`arguments` holds their shards;
    host_descriptors.rewrapped gives the kernel descriptors over what it reads)."""

    arguments: dict
    shard: torch.Tensor
    options: dict
    descriptors: dict = {}


class Binder:
    """How an operator's launches bind their arguments by name and check them. `op` is the operator
    (api.FusedKernel): its kernel's signature, schedule and autotune/heuristics wrappers."""

    def __init__(self, op):
        self.op = op
        self.kernel = op.local.fn.__name__
        self.positions: dict[tuple, list[str]] = {}  # (positions, keywords) of a launch -> the names of its positions

    @property
    def parameters(self):
        return self.op.signature.parameters

    def bind(self, args, kwargs) -> BoundCall:
        """The launch's call bound by name, checked; the launch options taken out of `kwargs` (which
        keeps the kernel's own keyword arguments)."""
        # A kernel parameter named like a launch option (`num_stages: tl.constexpr`) is that parameter,
        # as under plain Triton, whose binder takes the kernel's parameters first.
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _LAUNCH_OPTIONS and k not in self.parameters}
        self._refuse_splits(kwargs)
        arguments = self.arguments(args, kwargs)
        schedule = self.op.schedule
        descriptors = self._unwrap_descriptors(arguments)
        self._refuse_interpreted_bf16(arguments)
        shard = arguments.get(schedule.tensors[0])
        if not isinstance(shard, torch.Tensor):
            raise LaunchError(f"argument '{schedule.tensors[0]}' must be this rank's shard as a tensor, got {type(shard).__name__}")
        if shard.device.type not in ("cpu", "cuda"):
            raise LaunchError(
                f"'{schedule.tensors[0]}' is on a {shard.device.type} device, which syncopy cannot launch on; pass CPU tensors "
                "(gloo backend) or CUDA tensors (p2p or nccl backend)"
            )
        if schedule.dim >= shard.dim():
            raise LaunchError(
                f"schedule dim {schedule.dim} but '{schedule.tensors[0]}' has {shard.dim()} dimensions; set `dim:` below {shard.dim()}"
            )
        if not shard.is_contiguous():
            raise LaunchError(f"'{schedule.tensors[0]}' must be contiguous; pass {schedule.tensors[0]}.contiguous()")
        for name in schedule.tensors[1:]:
            self._check_listed(name, arguments.get(name), shard)
        return BoundCall(arguments, shard, options, descriptors)

    def _unwrap_descriptors(self, arguments: dict) -> dict:
        """The communicated arguments passed as host tensor descriptors, by name, each replaced in
        `arguments` by the shard it wraps (host_descriptors.shard_of checks what can be gathered)."""
        schedule = self.op.schedule
        found = {name: arguments[name] for name in schedule.tensors if host_descriptors.is_descriptor(arguments.get(name))}
        for name, desc in found.items():
            arguments[name] = host_descriptors.shard_of(self.kernel, name, desc, schedule.dim, schedule.pattern)
        return found

    def check_strides(self, call: BoundCall, world: int) -> None:
        """The launch passes the communicated tensor at its per-rank size and everything else as for the
        tensor the kernel sees: the gathered one (reduce_scatter: the full partial), whose strides differ
        from the shard's where `dim` is not 0. A stride argument (a parameter that scales the tensor's
        pointer arithmetic, found by inference) that equals a stride of the shard as passed where the
        two differ, and no stride of the tensor the kernel sees, is refused, naming the value to pass."""
        schedule = self.op.schedule
        # Along dim 0 a contiguous shard's strides are the gathered tensor's: nothing to check, and the
        # warm launch path (and a reference, which need not build the fused kernel) does no work here.
        if world == 1 or schedule.dim == 0 or schedule.pattern not in ("all_gather", "reduce_scatter"):
            return
        transformed = self.op.kernel.build().transformed
        for binding in (transformed.binding, *getattr(transformed, "others", ())):
            scales = getattr(binding, "scales", ())  # a kernel from syncopy.load: its manifest carries none
            if not scales:
                continue
            shard = call.arguments.get(binding.tensor)
            if not isinstance(shard, torch.Tensor) or schedule.dim >= shard.dim():
                continue
            shape = list(shard.shape)
            shape[schedule.dim] *= world
            seen = _contiguous_strides(shape)
            for name in scales:
                value = call.arguments.get(name)
                if type(value) is not int or value in seen:
                    continue
                dims = [d for d, stride in enumerate(shard.stride()) if stride == value and stride != seen[d]]
                if dims:
                    what = "reads the gathered" if schedule.pattern == "all_gather" else "writes the full partial"
                    raise LaunchError(
                        f"launch of '{self.kernel}': '{name}' is {value}, the stride of dim {dims[0]} of '{binding.tensor}' as "
                        f"passed (this rank's shard, shape {list(shard.shape)}), but the kernel {what} '{binding.tensor}' "
                        f"(shape {shape}, strides {tuple(seen)}): pass {name}={seen[dims[0]]}")

    def refuse_grad(self, args, kwargs) -> None:
        """A launch records no autograd graph: refuse inputs that require grad (with grad enabled),
        rather than return a result whose gradients would silently be missing."""
        if not torch.is_grad_enabled():
            return
        for key, value in [*zip(self.parameters, args), *kwargs.items()]:
            if isinstance(value, torch.Tensor) and value.requires_grad:
                raise LaunchError(f"launch of '{self.kernel}': argument '{key}' requires grad, but fused operators are "
                                  f"not differentiable yet (its gradient would be lost); pass {key}.detach(), or launch under "
                                  "torch.no_grad() or torch.inference_mode()")

    def _refuse_splits(self, kwargs: dict) -> None:
        """Split sizes reach here only on the launch paths that do not take them (a launch takes
        them out first, runtime/transport/splits.py): the thread and loopback worlds."""
        from syncopy.runtime.transport import splits

        left = [k for k in (splits.INPUT, splits.OUTPUT) if k in kwargs and k not in self.parameters]
        if left:
            raise LaunchError(f"launch of '{self.kernel}': uneven all_to_all splits ({', '.join(left)}) run on CPU worlds "
                              "(processes, gloo) only so far, not in thread or loopback worlds; launch with equal splits there")

    def _check_listed(self, name: str, value, shard: torch.Tensor) -> None:
        """Another listed tensor (`tensor: [K, V]`): a contiguous shard beside the first one, with
        as many rows along `dim` (its dtype and other sizes are its own)."""
        first, dim = self.op.schedule.tensors[0], self.op.schedule.dim
        if not isinstance(value, torch.Tensor):
            raise LaunchError(f"argument '{name}' (listed in `tensor:`) must be this rank's shard as a tensor, got {type(value).__name__}")
        if value.device != shard.device:
            raise LaunchError(f"'{name}' is on {value.device} but '{first}' on {shard.device}; pass every listed tensor on one device")
        if dim >= value.dim() or value.shape[dim] != shard.shape[dim]:
            rows = f"{value.shape[dim]} rows" if dim < value.dim() else f"only {value.dim()} dimensions"
            raise LaunchError(f"'{name}' has {rows} along dim {dim} but '{first}' has {shard.shape[dim]}; every tensor listed in "
                              f"`tensor:` needs the same rows per rank along `dim`")
        if not value.is_contiguous():
            raise LaunchError(f"'{name}' must be contiguous; pass {name}.contiguous()")

    def tuned(self, grid, arguments: dict, options: dict, group, scratch) -> tuple[dict, dict]:
        """`arguments` and `options` with what an autotune/heuristics wrapper adds (runtime/launch/tuning.py):
        meta-parameters go with the arguments (a grid function sees them), the rest with the options.
        `scratch()` makes the tensor that stands for the communicated one while configs are timed."""
        tuning = self.op.tuning
        if tuning is None:
            return arguments, options
        tensor = self.op.schedule.tensors[0]
        added = tuning.resolve({**arguments, **options}, grid=grid, group=group, timeout_s=self.op.timeout_s,
                               timing=lambda named: {**named, tensor: scratch()})
        params = self.parameters
        return ({**arguments, **{k: v for k, v in added.items() if k in params}},
                {**options, **{k: v for k, v in added.items() if k not in params}})

    def _refuse_interpreted_bf16(self, arguments: dict) -> None:
        """The Triton interpreter (CPU worlds) keeps bfloat16 as its bit patterns and computes on those
        (tl.dot and arithmetic alike: relative errors of 1e9 and more, the local kernel's too), so a
        bf16 launch there could only be silently wrong: refuse it. Compiled (GPUs), bf16 is as any dtype."""
        if not interpreting():
            return
        for key, value in arguments.items():
            value = value.base if host_descriptors.is_descriptor(value) else value
            if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
                raise LaunchError(f"launch of '{self.kernel}': argument '{key}' is bfloat16, which the Triton interpreter "
                                  "(TRITON_INTERPRET=1) computes on as raw bits, so every result would be wrong; use float32 or "
                                  "float16 on CPU worlds (bf16 runs on GPUs)")

    def arguments(self, args: tuple, kwargs: dict) -> dict:
        """The launch's arguments by name. How a call's positions map to names is bound (and its
        argument list checked) once per (number of positions, keywords); launch after launch only
        the values change, and each is still checked to be something a kernel takes."""
        key = (len(args), tuple(kwargs))
        names = self.positions.get(key)
        if names is None:
            try:
                bound = self.op.signature.bind_partial(*args, **kwargs)
            except TypeError as exc:
                raise LaunchError(f"launch of '{self.kernel}': {exc}; pass the local kernel's arguments") from None
            self.check_arguments(bound.arguments)
            plain = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in list(self.parameters.values())[:len(args)])
            if plain:
                self.positions[key] = list(self.parameters)[:len(args)]
            return bound.arguments
        arguments = dict(zip(names, args))
        arguments.update(kwargs)
        for name, value in arguments.items():
            if not isinstance(value, torch.Tensor):
                self._check_value(name, value)
        return arguments

    def check_arguments(self, arguments: dict) -> None:
        """Every argument the local kernel needs is there (constexprs with defaults may be left out),
        and each is something a Triton kernel takes: a tensor, or a hashable scalar (not a list)."""
        name = self.kernel
        supplied = self.op.tuning.supplied() if self.op.tuning is not None else set()  # by autotune configs, heuristics
        missing = [p.name for p in self.parameters.values()
                   if p.default is inspect.Parameter.empty and p.name not in arguments and p.name not in supplied
                   and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        if missing:
            listed = ", ".join(f"'{m}'" for m in missing)
            raise LaunchError(f"launch of '{name}': missing argument{'s' if len(missing) > 1 else ''} {listed}; "
                              "pass every argument the local kernel takes")
        for key, value in arguments.items():
            if not isinstance(value, torch.Tensor):
                self._check_value(key, value)

    def _check_value(self, key: str, value) -> None:
        if host_descriptors.is_descriptor(value):  # Triton takes it (a host TensorDescriptor), unhashable as it is
            return
        try:
            hash(value)
        except TypeError:
            raise LaunchError(f"launch of '{self.kernel}': argument '{key}' is a {type(value).__name__}, which a Triton "
                              "kernel cannot take; pass a torch tensor (or a number, for a scalar argument)") from None


def _contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]
