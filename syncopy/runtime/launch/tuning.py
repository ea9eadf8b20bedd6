"""Autotuned and heuristic kernels: `@triton.autotune` and `@triton.heuristics` around the local kernel.

syncopy fuses the @triton.jit function underneath the wrappers and plays their part itself at each
launch, outermost first, as Triton's `Heuristics.run` and `Autotuner.run` would: a heuristic sets
its meta-parameter from the arguments; an autotuner picks one of its configs per key (the values of
its `key` arguments and every tensor's dtype, as Triton keys them), adds the config's
meta-parameters and launch options (num_warps, num_stages, ...) and calls the config's pre_hook.
The grid, if a function, sees them (`lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]), ...)`).

How an autotuner with several configs picks one:

- compiled (GPUs): each rank times the configs left by `prune_configs_by` Triton's own way (its
  benchmarker, with `reset_to_zero`, `restore_value`, `pre_hook` and `post_hook` around every run)
  on the *local* kernel, with a scratch tensor of the fused kernel's size in place of the
  communicated one: no timing run waits for a chunk that is not there, and none touches syncopy's
  buffers. The choice of the group's first rank is broadcast over the group's control group, so
  every rank launches the same config; it is cached per (group, key), so later launches time
  nothing and say nothing.
- interpreted (CPU worlds, TRITON_INTERPRET=1): Triton cannot time configs without a GPU driver,
  so the choice is fixed: the config at index $SYNCOPY_AUTOTUNE_CONFIG (default 0, the first) of the
  configs `prune_configs_by` leaves for the launch's arguments (pruned as Triton prunes, with a
  scratch tensor for the communicated one), the same on every rank; `fused.reference` takes the same.

An autotuner with one config (or whose pruning leaves one) uses it, as Triton does.
"""
from __future__ import annotations

import os
from typing import Callable

from syncopy.errors import LaunchError

#: The environment variable that picks an autotuner's config under the interpreter (an index into its configs).
CONFIG_ENV = "SYNCOPY_AUTOTUNE_CONFIG"


def _wrapper_types() -> tuple[type, ...]:
    from triton.runtime.autotuner import Autotuner, Heuristics

    return Autotuner, Heuristics


def unwrap(kernel) -> tuple[object, list]:
    """(the @triton.jit function under any autotune/heuristics wrappers, the wrappers outermost first)."""
    layers = []
    while isinstance(kernel, _wrapper_types()):
        layers.append(kernel)
        kernel = kernel.fn
    return kernel, layers


def _is_autotuner(layer) -> bool:
    from triton.runtime.autotuner import Autotuner

    return isinstance(layer, Autotuner)


def config_index(n_configs: int, where: str) -> int:
    """The config the interpreter runs (and `syncopy compile` compiles by default): $SYNCOPY_AUTOTUNE_CONFIG, else 0."""
    raw = os.environ.get(CONFIG_ENV, "0")
    try:
        index = int(raw)
    except ValueError:
        index = -1
    if not 0 <= index < n_configs:
        raise LaunchError(f"{CONFIG_ENV}={raw!r} but {where} has {n_configs} autotune configs; set it to an index 0..{n_configs - 1}")
    return index


def tuning_key(tuner, named: dict) -> tuple:
    """Triton's autotuning key: the `key` arguments' values, then every tensor argument's dtype."""
    args = {k: v for k, v in named.items() if k in tuner.arg_names}
    key = [args[k] for k in tuner.keys if k in args]
    key += [str(v.dtype) for v in args.values() if hasattr(v, "dtype")]
    return tuple(key)


class Tuning:
    """The wrappers of one fused kernel and the configs chosen so far (per group and key)."""

    def __init__(self, layers: list, name: str, can_time: bool = True):
        self.layers = layers
        self.name = name
        self.can_time = can_time  # False: the fixed choice on GPUs too (a loaded file has no local kernel)
        self._chosen: dict[tuple, object] = {}

    def supplied(self) -> set[str]:
        """Arguments the wrappers supply (a launch need not pass them)."""
        names: set[str] = set()
        for layer in self.layers:
            if _is_autotuner(layer):
                names.update(k for c in layer.configs for k in c.kwargs)
            else:
                names.update(layer.values)
        return names

    def resolve(self, named: dict, *, grid, group, timing: Callable[[dict], dict], timeout_s: float) -> dict:
        """What the wrappers add to a launch whose arguments (and launch options) by name are `named`:
        meta-parameters and launch options, by name. Calls each chosen config's pre_hook, as Triton does
        before it runs the kernel. `timing(args)` gives the arguments a timing run of the local kernel
        takes (the communicated tensor replaced by scratch)."""
        added: dict = {}
        for index, layer in enumerate(self.layers):
            if not _is_autotuner(layer):
                for meta, heuristic in layer.values.items():
                    added[meta] = heuristic({**named, **added})
                continue
            config = self._config(index, layer, {**named, **added}, grid, group, timing, timeout_s)
            clash = sorted(set(config.all_kwargs()) & set(named))
            if clash:
                raise LaunchError(f"launch of '{self.name}': '{clash[0]}' is set by the autotuner's configs; "
                                  f"do not pass it at launch (or drop it from the configs)")
            added.update(config.all_kwargs())
            if config.pre_hook is not None:
                config.pre_hook({**named, **added})
        return added

    def _config(self, index: int, tuner, named: dict, grid, group, timing, timeout_s: float):
        if len(tuner.configs) == 1:
            return tuner.configs[0]
        from syncopy.runtime.where import interpreting

        fixed = interpreting() or not self.can_time
        where = () if fixed else (_group_token(group),)
        key = (index, *where, tuning_key(tuner, named))
        if key not in self._chosen:
            if fixed:
                # As Triton: the configs its prune_configs_by leaves for these arguments, then the index.
                configs = _pruned(tuner, timing(named))
                pruned = "" if len(configs) == len(tuner.configs) else " after its prune_configs_by"
                config = configs[config_index(len(configs), f"kernel '{self.name}'{pruned}")]
            else:
                config = _timed(tuner, named, grid, group, timing, timeout_s)
            self._chosen[key] = tuner.best_config = config
        return self._chosen[key]


def _group_token(group) -> int:
    from syncopy.runtime.transport.backends import control

    return control.group_token(group)


def _pruned(tuner, args: dict) -> list:
    """The configs `prune_configs_by` leaves for a launch with `args` (by name), as Triton's own run
    prunes them before it picks: a config the kernel cannot run with these arguments is never taken."""
    tuner.nargs = args  # what Triton's pruning reads
    try:
        return tuner.prune_configs({})
    finally:
        tuner.nargs = None


def _timed(tuner, named: dict, grid, group, timing, timeout_s: float):
    """Time the configs on the local kernel (Triton's benchmarker and hooks), agree on the first rank's choice."""
    args = timing(named)
    configs = _pruned(tuner, args)
    tuner.nargs = args  # what Triton's hooks read
    try:
        if len(configs) > 1:
            timings = {c: tuner._bench(config=c, grid=grid, warmup=False, **args) for c in configs}
            mine = min(range(len(configs)), key=lambda i: timings[configs[i]])
        else:
            mine = 0
    finally:
        tuner.nargs = None
    chosen = configs[_first_ranks(mine, group, timeout_s)]
    # As Triton after timing: reset what the timing runs may have changed (reset_to_zero), on the real arguments.
    tuner.pre_hook({**named, **chosen.all_kwargs()}, reset_only=True)
    return chosen


def _first_ranks(index: int, group, timeout_s: float) -> int:
    """The group's first rank's `index`, on every rank (the control group: never the user's collectives)."""
    import torch.distributed as dist

    from syncopy.runtime.transport.backends import control

    if group is None or dist.get_world_size(group) == 1:
        return index
    box = [index]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=control.control_group(group, timeout_s))
    return box[0]
