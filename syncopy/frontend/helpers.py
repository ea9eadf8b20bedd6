"""User @triton.jit helpers a kernel calls, and what they may hide from inference: loads (rows
that depend on data), `tl.program_id` (tile ids the remap does not reach). A helper this file does
not define cannot be looked into and is assumed to do both (issue 10).
"""
from __future__ import annotations

import libcst as cst

from syncopy.frontend import cstutil as cu
from syncopy.frontend.source import KernelSource, jit_functions

#: Methods of Triton values that compute nothing from memory.
PURE_METHODS = {"to", "reshape", "broadcast_to", "expand_dims", "trans", "permute", "view"}
NOT_HELPERS = {"range", "min", "max", "len", "int", "float", "print", "static_range", "static_assert", "static_print"}


def helper_name(call: cst.Call, local: set[str] = frozenset()) -> str | None:
    """The name of a user function this call runs, or None for Triton's own, builtins and methods
    (`x.to(...)`, `desc.load(...)`: calls on a name the function defines itself, in `local`)."""
    name = cu.call_name(call) or ""
    if not name or name.split(".", 1)[0] in ("tl", "triton", "math", "libdevice", "syncopy_device") or name in NOT_HELPERS:
        return None
    if isinstance(call.func, cst.Attribute):
        leaf = name.rsplit(".", 1)[-1]
        if leaf in PURE_METHODS or leaf in ("load", "store", "gather", "scatter") or name.split(".", 1)[0] in local:
            return None
        if not isinstance(call.func.value, (cst.Name, cst.Attribute)):
            return None  # a method of a computed value
    return name


def local_names(func: cst.FunctionDef) -> set[str]:
    """A function's parameters and the names it assigns: calls on them are methods, not helpers."""
    p = func.params
    return {x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)} | cu.assigned_in(func.body)


def jit_helpers(ks: KernelSource) -> dict[str, cst.FunctionDef]:
    """The file's @triton.jit functions by name (the file of the kernel; none when only the kernel's
    own text could be read)."""
    return {f.name.value: f for f in jit_functions(ks.module)}


def helper_does(ks: KernelSource, func: cst.FunctionDef, pred, seen: frozenset = frozenset()) -> str | None:
    """The name of a helper `func` calls (transitively) for which `pred(call)` holds, or that is not in
    this file (we cannot look inside it); None if there is none."""
    defs = jit_helpers(ks)
    local = local_names(func)
    for call in cu.calls_in(func.body):
        name = helper_name(call, local)
        if name is None or name in seen:
            continue
        helper = defs.get(name)
        if helper is None or any(pred(c) for c in cu.calls_in(helper.body)):
            return name
        if helper_does(ks, helper, pred, seen | {name}) is not None:
            return name
    return None


def loads_data(call: cst.Call) -> bool:
    leaf = (cu.call_name(call) or "").rsplit(".", 1)[-1]
    return leaf in ("load", "gather") or leaf in cu.WRITE_CALLS or leaf.startswith("atomic_")


def data_names(ks: KernelSource, func: cst.FunctionDef) -> set[str]:
    """Names whose values depend on loaded data (a load, an atomic, or a helper that loads): rows
    computed from them change with the tensors' contents, from one launch to the next."""
    defs = jit_helpers(ks)
    local = local_names(func)

    def loads(expr: cst.CSTNode) -> bool:
        for call in cu.calls_in(expr):
            if loads_data(call):
                return True
            name = helper_name(call, local)
            if name is not None and (name not in defs or any(loads_data(c) for c in cu.calls_in(defs[name].body))
                                     or helper_does(ks, defs[name], loads_data) is not None):
                return True
        return False

    return cu.spread(func.body, set(), lambda value, data: loads(value) or bool(cu.names_in(value) & data))


def is_program_id(call: cst.Call) -> bool:
    name = cu.call_name(call) or ""
    return name.rsplit(".", 1)[-1] == "program_id"


def program_id_helper(ks: KernelSource) -> str:
    """Why remapping `tl.program_id` in the kernel's body alone would not remap every tile id ('' if it would)."""
    name = helper_does(ks, ks.func, is_program_id)
    if name is None:
        return ""
    if name in jit_helpers(ks):
        return f"the helper {name} calls tl.program_id itself"
    return f"the helper {name} is not in this file, so syncopy cannot see whether it calls tl.program_id"


def bind_args(helper: cst.FunctionDef, call: cst.Call, ks: KernelSource) -> dict[str, str] | None:
    """{helper parameter: the caller's expression} for a call; None where they cannot be matched."""
    params = [*helper.params.posonly_params, *helper.params.params, *helper.params.kwonly_params]
    env: dict[str, str] = {}
    positional = [a for a in call.args if a.keyword is None]
    if any(a.star for a in call.args) or len(positional) > len(params):
        return None
    for p, a in zip(params, positional):
        env[p.name.value] = cu.paren(ks.code(a.value))
    for a in call.args:
        if a.keyword is not None:
            env[a.keyword.value] = cu.paren(ks.code(a.value))
    for p in params:
        if p.name.value not in env:
            if p.default is None:
                return None
            env[p.name.value] = cu.paren(ks.code(p.default))
    return env
