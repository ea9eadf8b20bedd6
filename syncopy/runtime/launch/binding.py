"""A launch's arguments by name, checked once per call form, and the launch options Triton takes."""
from __future__ import annotations

import inspect

import torch

from syncopy.errors import LaunchError


_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "warmup", "ir_override"}


class Binding:
    """How a launch's arguments are bound by name and checked (FusedKernel mixes this in)."""

    # What Triton's wrappers call on the kernel they wrap, so that `@triton.heuristics` may sit above
    # `@syncopy.overlap` too. (`@triton.autotune` belongs below it: timing a fused launch would
    # launch collectives a different number of times on each rank.)
    @property
    def arg_names(self) -> list[str]:
        return list(self.signature.parameters)

    def run(self, *args, grid, warmup=False, group=None, **kwargs):
        if warmup:
            raise LaunchError(f"'{self.local.fn.__name__}': a fused kernel cannot be warmed up alone; launch it")
        return self._serialised_launch(grid, args, kwargs, group)

    def _run_local(self, grid, call_args: dict, options: dict, group) -> None:
        """The local kernel, with the config (and heuristics) a fused launch of these arguments takes."""
        call_args, options = self._tuned(grid, call_args, options, group, lambda: torch.empty_like(call_args[self.schedule.tensors[0]]))
        self.local[grid](**call_args, **options)

    def _bind(self, args, kwargs):
        # A kernel parameter named like a launch option (`num_stages: tl.constexpr`) is that parameter,
        # as under plain Triton, whose binder takes the kernel's parameters first.
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _LAUNCH_OPTIONS and k not in self.signature.parameters}
        self._refuse_splits(kwargs)
        arguments = self._arguments(args, kwargs)
        self._refuse_interpreted_bf16(arguments)
        shard = arguments.get(self.schedule.tensors[0])
        if not isinstance(shard, torch.Tensor):
            raise LaunchError(f"argument '{self.schedule.tensors[0]}' must be this rank's shard as a tensor, got {type(shard).__name__}")
        if shard.device.type not in ("cpu", "cuda"):
            raise LaunchError(
                f"'{self.schedule.tensors[0]}' is on a {shard.device.type} device, which syncopy cannot launch on; pass CPU tensors "
                "(gloo backend) or CUDA tensors (p2p or nccl backend)"
            )
        if self.schedule.dim >= shard.dim():
            raise LaunchError(
                f"schedule dim {self.schedule.dim} but '{self.schedule.tensors[0]}' has {shard.dim()} dimensions; set `dim:` below {shard.dim()}"
            )
        if not shard.is_contiguous():
            raise LaunchError(f"'{self.schedule.tensors[0]}' must be contiguous; pass {self.schedule.tensors[0]}.contiguous()")
        for name in self.schedule.tensors[1:]:
            self._check_listed(name, arguments.get(name), shard)
        return arguments, shard, options

    def _refuse_splits(self, kwargs: dict) -> None:
        """Split sizes reach here only on the launch paths that do not take them (a launch takes
        them out first, runtime/transport/splits.py): the thread and loopback worlds."""
        from syncopy.runtime.transport import splits

        left = [k for k in (splits.INPUT, splits.OUTPUT) if k in kwargs and k not in self.signature.parameters]
        if left:
            raise LaunchError(f"launch of '{self.local.fn.__name__}': uneven all_to_all splits ({', '.join(left)}) run on CPU worlds "
                              "(processes, gloo) only so far, not in thread or loopback worlds; launch with equal splits there")

    def _check_listed(self, name: str, value, shard: torch.Tensor) -> None:
        """Another listed tensor (`tensor: [K, V]`): a contiguous shard beside the first one, with
        as many rows along `dim` (its dtype and other sizes are its own)."""
        first, dim = self.schedule.tensors[0], self.schedule.dim
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

    def _tuned(self, grid, arguments: dict, options: dict, group, scratch) -> tuple[dict, dict]:
        """`arguments` and `options` with what an autotune/heuristics wrapper adds (runtime/launch/tuning.py):
        meta-parameters go with the arguments (a grid function sees them), the rest with the options.
        `scratch()` makes the tensor that stands for the communicated one while configs are timed."""
        if self.tuning is None:
            return arguments, options
        tensor = self.schedule.tensors[0]
        added = self.tuning.resolve({**arguments, **options}, grid=grid, group=group, timeout_s=self.timeout_s,
                                    timing=lambda named: {**named, tensor: scratch()})
        params = self.signature.parameters
        return ({**arguments, **{k: v for k, v in added.items() if k in params}},
                {**options, **{k: v for k, v in added.items() if k not in params}})

    def _refuse_interpreted_bf16(self, arguments: dict) -> None:
        """The Triton interpreter (CPU worlds) keeps bfloat16 as its bit patterns and computes on those
        (tl.dot and arithmetic alike: relative errors of 1e9 and more, the local kernel's too), so a
        bf16 launch there could only be silently wrong: refuse it. Compiled (GPUs), bf16 is as any dtype."""
        from syncopy.runtime.where import interpreting

        if not interpreting():
            return
        for key, value in arguments.items():
            if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
                raise LaunchError(f"launch of '{self.local.fn.__name__}': argument '{key}' is bfloat16, which the Triton interpreter "
                                  "(TRITON_INTERPRET=1) computes on as raw bits, so every result would be wrong; use float32 or "
                                  "float16 on CPU worlds (bf16 runs on GPUs)")

    def _arguments(self, args: tuple, kwargs: dict) -> dict:
        """The launch's arguments by name. How a call's positions map to names is bound (and its
        argument list checked) once per (number of positions, keywords); launch after launch only
        the values change, and each is still checked to be something a kernel takes."""
        key = (len(args), tuple(kwargs))
        names = self._positions.get(key)
        if names is None:
            try:
                bound = self.signature.bind_partial(*args, **kwargs)
            except TypeError as exc:
                raise LaunchError(f"launch of '{self.local.fn.__name__}': {exc}; pass the local kernel's arguments") from None
            self._check_arguments(bound.arguments)
            plain = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in list(self.signature.parameters.values())[:len(args)])
            if plain:
                self._positions[key] = list(self.signature.parameters)[:len(args)]
            return bound.arguments
        arguments = dict(zip(names, args))
        arguments.update(kwargs)
        for name, value in arguments.items():
            if not isinstance(value, torch.Tensor):
                self._check_value(name, value)
        return arguments

    def _check_arguments(self, arguments: dict) -> None:
        """Every argument the local kernel needs is there (constexprs with defaults may be left out),
        and each is something a Triton kernel takes: a tensor, or a hashable scalar (not a list)."""
        name = self.local.fn.__name__
        supplied = self.tuning.supplied() if self.tuning is not None else set()  # by autotune configs, heuristics
        missing = [p.name for p in self.signature.parameters.values()
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
        try:
            hash(value)
        except TypeError:
            raise LaunchError(f"launch of '{self.local.fn.__name__}': argument '{key}' is a {type(value).__name__}, which a Triton "
                              "kernel cannot take; pass a torch tensor (or a number, for a scalar argument)") from None
