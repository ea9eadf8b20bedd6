"""`syncopy.load`: launch a file that `syncopy transform --loadable` wrote, with the decorator's runtime
and no frontend (libcst need not be installed where it runs: transform at build time, ship the file).

The file holds the fused kernel, its probe, and a manifest per transformed kernel
(`SYNCOPY_MANIFEST_<kernel> = {...}`) telling the runtime what the passes found (a persistent loop,
tensor descriptors, ...) and which syncopy version and schedule it was made with; a file, schedule
and syncopy version that do not belong together are refused in one line.
"""
from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from syncopy.errors import LaunchError

MANIFEST_PREFIX = "SYNCOPY_MANIFEST_"


def schedule_digest(schedule) -> str:
    """What ties a transformed file to its schedule: a hash of the schedule's stable text form."""
    return hashlib.sha256(schedule.key().encode()).hexdigest()[:16]


@dataclass
class _Path:
    path: str


@dataclass
class _Loop:
    remap: bool


@dataclass
class _Access:
    clamped: bool


@dataclass
class _Group:
    accesses: list


@dataclass
class _Binding:
    descriptors: bool
    groups: list = field(default_factory=list)
    tensor: str = ""
    scales: tuple = ()  # the stride arguments of the tensor (Binder.check_strides)


@dataclass
class LoadedTransform:
    """What the runtime reads of a `Transformed` (passes/pipeline.py), from a file's manifest."""

    source: _Path
    binding: _Binding
    persistent: _Loop | None
    fresh_probe: bool
    checked: bool
    others: list = field(default_factory=list)  # the other listed tensors' bindings (their stride arguments)
    written: list = field(default_factory=list)  # the outputs whose extents the runtime checks
    extents: dict = field(default_factory=dict)  # output -> (its store-address probe, descriptors)


def _module(path: Path):
    """Import the file as a module of its own (Triton's @jit reads each kernel's source from it)."""
    name = f"syncopy_loaded_{path.stem}_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _manifest(module, path: Path, kernel: str | None) -> dict:
    found = {k[len(MANIFEST_PREFIX):]: v for k, v in vars(module).items() if k.startswith(MANIFEST_PREFIX)}
    if not found:
        raise LaunchError(f"{path}: no kernel in this file was transformed for syncopy.load; write it with "
                          f"`syncopy transform KERNEL.py --schedule S.yaml --loadable -o {path.name}`")
    if kernel is None:
        if len(found) > 1:
            raise LaunchError(f"{path}: transformed kernels {', '.join(sorted(found))}; add `kernel: NAME` to the schedule")
        kernel = next(iter(found))
    if kernel not in found:
        raise LaunchError(f"{path}: kernel '{kernel}' (the schedule's `kernel:`) was not transformed for syncopy.load here; "
                          f"the file has {', '.join(sorted(found))}")
    return found[kernel]


def open_file(path, schedule) -> tuple[object, object | None, LoadedTransform]:
    """(the kernel object as the file defines it, its probe or None, what the runtime needs to know),
    once the file, the schedule and this syncopy are checked to belong together."""
    from syncopy._version import __version__

    path = Path(path)
    if not path.is_file():
        raise LaunchError(f"{path}: no such file; give the path `syncopy transform --loadable -o` wrote")
    module = _module(path)
    m = _manifest(module, path, schedule.kernel)
    if m["syncopy"] != __version__:
        raise LaunchError(f"{path}: written by syncopy {m['syncopy']}, but this is syncopy {__version__}; "
                          "run `syncopy transform --loadable` again with this version")
    if m["schedule"] != schedule_digest(schedule):
        raise LaunchError(f"{path}: kernel '{m['kernel']}' was transformed for another schedule; load it with the schedule "
                          "`syncopy transform` was given, or transform it again for this one")
    scales = m.get("scales", {})
    first = next(iter(scales), schedule.tensors[0])
    t = LoadedTransform(source=_Path(str(path)),
                        binding=_Binding(m["descriptors"], [_Group([_Access(True)])] if m["clamped"] else [], first,
                                         tuple(scales.get(first, ()))),
                        persistent=_Loop(m["persistent"]["remap"]) if m["persistent"] is not None else None,
                        fresh_probe=m["fresh_probe"], checked=m["checked"],
                        others=[_Binding(False, [], name, tuple(names)) for name, names in scales.items() if name != first],
                        written=list(m.get("written", [])),
                        extents={out: (getattr(module, name), descriptors) for out, (name, descriptors) in m.get("extents", {}).items()})
    probe = getattr(module, m["probe"]) if m["probe"] else None
    return getattr(module, m["kernel"]), probe, t
