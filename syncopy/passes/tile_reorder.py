"""Pass: tile reorder. Every `tl.program_id(axis)` becomes the tile the runtime assigns this program.

    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)

`syncopy_order` holds a permutation of the grid built per launch shape from the probe kernel: tiles
whose rows are local first, then in the order their chunks arrive. A permutation, so a bijection.
The same record gives the tile's chunk range, which the first wait (or the notify) uses.

Proven or as written (docs/how-it-works.md): applied only where inference proved the first read's
rows follow from the program id alone (TensorBinding.no_remap is empty); otherwise tiles keep their
launch order and the transformed source says why.
"""
from __future__ import annotations

import libcst as cst

from syncopy.errors import KernelError
from syncopy.frontend import cstutil as cu
from syncopy.frontend import helpers
from syncopy.frontend.source import KernelSource
from syncopy.passes import names


def _axis(ks: KernelSource, call: cst.Call) -> int:
    a = cu.arg(call, 0, "axis")
    if isinstance(a, cst.Integer) and int(a.value) in (0, 1, 2):
        return int(a.value)
    raise KernelError("tl.program_id needs a literal axis 0, 1 or 2 for syncopy to remap tiles; write it as a number", ks.location(call))


class _Replace(cst.CSTTransformer):
    def __init__(self, ks: KernelSource):
        self.ks = ks
        self.helpers = helpers.jit_helpers(ks)
        self.count = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = cu.call_name(original) or ""
        # A bare `program_id(0)` is Triton's (`from triton.language import program_id`) unless the file
        # defines its own: a helper of that name is inlined first where it only hands the id back
        # (helpers.inline_program_ids), and kept otherwise.
        bare = name == "program_id" and name not in self.helpers
        if name.rsplit(".", 1)[-1] == "program_id" and (bare or name.split(".")[0] in ("tl", "triton", "language")):
            self.count += 1
            return cst.Name(names.PIDS[_axis(self.ks, original)])
        return updated


def remap_program_ids(ks: KernelSource, body: list[cst.BaseStatement]) -> tuple[list[cst.BaseStatement], bool]:
    """Replace program ids in `body`; returns the new body and whether any were found."""
    replacer = _Replace(ks)
    new_body = [stmt.visit(replacer) for stmt in body]
    return new_body, replacer.count > 0


def preamble(why: str = "run tiles in chunk-arrival order") -> cst.BaseStatement:
    targets = ", ".join((*names.PIDS, names.TABLE_LO, names.TABLE_HI))
    stmt = cst.parse_statement(f"{targets} = {names.DEVICE}.slot_entry({names.ORDER})\n")
    return stmt.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(f"# syncopy: {why}"))])
