"""What the passes hand to emit and the runtime: the fused kernel (and its probe) as libcst functions,
plus what inference found."""
from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from syncopy.frontend import infer as inference
from syncopy.frontend.source import KernelSource
from syncopy.schedule.model import Schedule


@dataclass
class Transformed:
    """The fused kernel (and its probe) as libcst functions, plus what inference found."""

    source: KernelSource
    schedule: Schedule
    binding: inference.TensorBinding
    func: cst.FunctionDef
    probe: cst.FunctionDef | None
    remapped: bool
    stages: dict[str, str] = field(default_factory=dict)
    persistent: inference.persistent.PersistentLoop | None = None  # tiles come from a loop, not the grid
    # Producers whose write ranges depend on loaded data: the runtime probes them at every launch.
    fresh_probe: bool = False
    checked: bool = False  # checked mode: every read (or store) of the tensor checks its chunks (read_check.py)
    checked_helpers: list[cst.FunctionDef] = field(default_factory=list)  # checked copies of helpers it calls
    unchecked: tuple[str, ...] = ()  # checked mode: the helper calls whose accesses it cannot check, and why
    others: list[inference.TensorBinding] = field(default_factory=list)  # the other listed tensors (`tensor: [K, V]`)

    def code(self, node: cst.CSTNode | None = None) -> str:
        return self.source.module.code_for_node(node if node is not None else self.func)
