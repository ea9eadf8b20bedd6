"""What a kernel's names are: which parameters it uses as pointers, which names exist at a point.

Used to check the schedule against the kernel before anything is rewritten: `tensor:` must name a
pointer the kernel loads or stores through, and `binding.rows` may only use names the kernel has
defined where the wait goes.
"""
from __future__ import annotations

import builtins
import difflib

import libcst as cst

from syncopy.frontend import cstutil as cu
from syncopy.frontend.source import KernelSource

# Calls that hand back (a view of) their pointer argument: `tl.multiple_of(A + offs, 16)` points into A.
_POINTER_PASSING = {"multiple_of", "max_contiguous", "max_constancy", "advance", "where", "to", "reshape",
                    "broadcast_to", "expand_dims", "trans", "permute", "view"}
# Calls whose first argument (or `base=`) is the pointer they read or write through.
_POINTER_SINKS = cu.WRITE_CALLS | {"load", "make_tensor_descriptor", "make_block_ptr"}


def _terms(expr: cst.CSTNode) -> set[str]:
    """Names that can be the *base* of an address expression: `A + offs * s` -> {A}, never the offsets."""
    if isinstance(expr, cst.Name):
        return {expr.value}
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)):
        return _terms(expr.left) | (_terms(expr.right) if isinstance(expr.operator, cst.Add) else set())
    if isinstance(expr, cst.Subscript):
        return _terms(expr.value)
    if isinstance(expr, cst.IfExp):
        return _terms(expr.body) | _terms(expr.orelse)
    leaf = expr.func.attr.value if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) else None
    if isinstance(expr, cst.Call) and (leaf or cu.call_name(expr)) in _POINTER_PASSING:
        out = set().union(*(_terms(a.value) for a in expr.args))
        if isinstance(expr.func, cst.Attribute):
            out |= _terms(expr.func.value)  # `ptrs.to(...)`; `tl.where(...)` adds 'tl', which is no parameter
        return out
    return set()


def pointer_params(ks: KernelSource) -> list[str]:
    """Parameters the kernel loads or stores through, hands to a helper, or reads attributes of
    (`C.dtype`), in signature order. Generous on purpose: it only has to tell pointers from scalars."""
    values: dict[str, list[cst.BaseExpression]] = {}
    sinks: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            for t in n.targets:
                for name in cu.target_names(t.target):
                    values.setdefault(name, []).append(n.value)

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            if isinstance(n.target, cst.Name):
                values.setdefault(n.target.value, []).append(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> None:
            if isinstance(n.value, cst.Name) and n.attr.value not in _POINTER_PASSING:
                sinks.add(n.value.value)

        def visit_Call(self, n: cst.Call) -> None:
            name = cu.call_name(n) or ""
            leaf = name.rsplit(".", 1)[-1]
            if leaf in _POINTER_SINKS:
                ptr = cu.arg(n, 0, "base" if leaf.startswith("make_") else "pointer")
                if ptr is not None:
                    sinks.update(_terms(ptr))
            elif name.split(".", 1)[0] not in ("tl", "triton", "math", "libdevice") and not hasattr(builtins, name):
                for a in n.args:  # a user @triton.jit helper may read through any argument
                    sinks.update(_terms(a.value))

    ks.func.body.visit(V())
    seen: set[str] = set()
    todo = list(sinks)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for value in values.get(name, ()):
            todo += _terms(value)
    return [p for p in ks.params if p in seen]


def module_names(module: cst.Module) -> set[str] | None:
    """Names a module defines at its top level; None after a `from x import *` (anything may exist)."""
    out: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            out.add(stmt.name.value)
            continue
        out |= cu.assigned_in(stmt)
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                    return None
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    for alias in small.names:
                        asname = alias.asname.name if alias.asname is not None else None
                        out.add(asname.value if isinstance(asname, cst.Name) else cu.dotted(alias.name).split(".", 1)[0])
    return out


def unknown_names(ks: KernelSource, expr: str, defined: set[str]) -> list[str]:
    """Names `expr` uses that are none of: `defined` (parameters and names assigned before the point),
    the module's own names, globals the kernel already reads, builtins."""
    used = cu.names_in(cst.parse_expression(expr))
    globals_ = module_names(ks.module)
    if globals_ is None:
        return []
    kernel_globals = cu.names_in(ks.func.body) - cu.assigned_in(ks.func.body) - set(ks.params)
    return sorted(n for n in used if n not in defined and n not in globals_ and n not in kernel_globals and not hasattr(builtins, n))


def suggestion(name: str, candidates: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
