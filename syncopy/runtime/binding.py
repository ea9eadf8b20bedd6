"""A launch's arguments by name, checked once per call form, and the launch options Triton takes."""
from __future__ import annotations

import inspect

import torch

from syncopy.errors import LaunchError


_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "warmup"}


class Binding:
    """How a launch's arguments are bound by name and checked (FusedKernel mixes this in)."""

    def _bind(self, args, kwargs):
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _LAUNCH_OPTIONS}
        arguments = self._arguments(args, kwargs)
        shard = arguments.get(self.schedule.tensor)
        if not isinstance(shard, torch.Tensor):
            raise LaunchError(f"argument '{self.schedule.tensor}' must be this rank's shard as a tensor, got {type(shard).__name__}")
        if shard.device.type not in ("cpu", "cuda"):
            raise LaunchError(
                f"'{self.schedule.tensor}' is on a {shard.device.type} device, which syncopy cannot launch on; pass CPU tensors "
                "(gloo backend) or CUDA tensors (p2p or nccl backend)"
            )
        if self.schedule.dim >= shard.dim():
            raise LaunchError(
                f"schedule dim {self.schedule.dim} but '{self.schedule.tensor}' has {shard.dim()} dimensions; set `dim:` below {shard.dim()}"
            )
        if not shard.is_contiguous():
            raise LaunchError(f"'{self.schedule.tensor}' must be contiguous; pass {self.schedule.tensor}.contiguous()")
        return arguments, shard, options

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
        if inspect.isfunction(self.local.fn):  # an autotuner's configs supply some arguments: let Triton check those
            missing = [p.name for p in self.signature.parameters.values()
                       if p.default is inspect.Parameter.empty and p.name not in arguments
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
