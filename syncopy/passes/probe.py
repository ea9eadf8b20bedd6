"""The probe kernel: the fused kernel cut right before its first wait, minus its stores, storing
each program's chunk range instead. The runtime runs it once per launch shape to learn which
chunks each tile needs, and sorts tiles by when those chunks arrive."""
from __future__ import annotations

import libcst as cst

from syncopy.frontend import cstutil as cu
from syncopy.passes import names


class _DropStores(cst.CSTTransformer):
    def __init__(self):
        self.unsafe = False

    def leave_SimpleStatementLine(self, original, updated):
        kept = []
        for small in updated.body:
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                leaf = (cu.call_name(small.value) or "").rsplit(".", 1)[-1]
                if leaf in cu.WRITE_CALLS:
                    continue
            elif any((cu.call_name(c) or "").rsplit(".", 1)[-1] in cu.WRITE_CALLS for c in cu.calls_in(small)):
                self.unsafe = True  # a value taken from an atomic: running it twice would change memory
            kept.append(small)
        if not kept:
            return cst.RemoveFromParent()
        return updated.with_changes(body=kept)

    def leave_IndentedBlock(self, original, updated):
        if not updated.body:
            return updated.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
        return updated


def build(func: cst.FunctionDef, prefix: list[cst.BaseStatement], ranges: list[cst.BaseStatement],
          store: list[cst.BaseStatement] | None = None) -> cst.FunctionDef | None:
    """`prefix`: the body before the first wait (no remap); `ranges`: statements that set lo/hi;
    `store`: what records them (default: this program's range at its linear id)."""
    dropper = _DropStores()
    kept = []
    for stmt in prefix:
        new = stmt.visit(dropper)
        if not isinstance(new, cst.RemovalSentinel):
            kept.append(new)
    if dropper.unsafe:
        return None
    if store is None:
        store = [cst.parse_statement(f"{names.DEVICE}.probe_store({names.PROBE_OUT}, {names.LO}, {names.HI})\n")]
    body = [*kept, *ranges, *store]
    params = list(func.params.params)
    at = next((i for i, p in enumerate(params) if p.default is not None), len(params))
    params.insert(at, cst.Param(cst.Name(names.PROBE_OUT), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    if at == len(params) - 1 and at > 0:
        params[at - 1] = params[at - 1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        params[at] = params[at].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return func.with_changes(
        name=cst.Name(f"{func.name.value}__syncopy_probe"),
        params=func.params.with_changes(params=params),
        body=func.body.with_changes(body=body),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()],
    )
