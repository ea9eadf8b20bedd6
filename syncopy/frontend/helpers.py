"""User @triton.jit helpers a kernel calls, and what they may hide from inference: loads (rows
that depend on data), `tl.program_id` (tile ids the remap does not reach). A helper is looked into
wherever it is defined: in the kernel's file, or in a module the file imports (frontend/imports.py,
as checked mode finds them); a Triton builtin under another name (`triton_cast = tl.cast`, here or
in that module) is that builtin, and Python's own functions (`isinstance`) are no helpers. A call
syncopy cannot find is assumed to do everything (issue 10, issue 31).
"""
from __future__ import annotations

import builtins
from dataclasses import dataclass

import libcst as cst

from syncopy.frontend import cstutil as cu
from syncopy.frontend import imports
from syncopy.frontend.source import KernelSource, jit_functions

#: Methods of Triton values that compute nothing from memory.
PURE_METHODS = {"to", "reshape", "broadcast_to", "expand_dims", "trans", "permute", "view"}
NOT_HELPERS = {"range", "min", "max", "len", "int", "float", "print", "static_range", "static_assert", "static_print",
               "isinstance", "getattr", "hasattr"}  # Python builtins Triton runs while it compiles: they read no memory


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


@dataclass(frozen=True)
class Helper:
    """What a call `name` of a kernel's file runs: a @triton.jit function (`source`, whose `func` it
    is, in the file that defines it), or a builtin under that name (`builtin`: `tl.cast` for
    `triton_cast = tl.cast`, `isinstance` for Python's own)."""

    name: str
    source: KernelSource | None = None
    builtin: str = ""

    @property
    def func(self) -> cst.FunctionDef | None:
        return self.source.func if self.source is not None else None

    def as_builtin(self, call: cst.Call) -> cst.Call:
        """`call` written as a call of the builtin itself (`triton_cast(x, t)` -> `tl.cast(x, t)`)."""
        return call.with_changes(func=cst.parse_expression(self.builtin))


def find(ks: KernelSource, name: str) -> Helper | None:
    """The function a call `name` (from helper_name) in `ks`'s file runs, wherever it is defined;
    None where syncopy cannot find it without running code."""
    defs = jit_helpers(ks)
    if name in defs:
        return Helper(name, KernelSource(ks.path, ks.module, defs[name], ks.positions, ks.line_offset))
    alias = imports.builtin_alias(ks, name)
    if alias is not None:
        return Helper(name, builtin=alias)
    if "." not in name and hasattr(builtins, name):
        from syncopy.frontend.scope import module_names

        known = module_names(ks.module)
        return Helper(name, builtin=name) if known is not None and name not in known else None
    found = imports.imported_helper(ks, name)
    return Helper(name, found[0]) if found is not None else None


def _reaches(ks: KernelSource, func: cst.FunctionDef, pred, seen: frozenset = frozenset()) -> tuple[str, str] | None:
    """(the helper `func` calls, the call deepest down) where `pred(call)` holds somewhere below that
    helper, or where a call below it cannot be found (then the second is the call syncopy cannot
    see into, prefixed `?`); None if neither."""
    local = local_names(func)
    for call in cu.calls_in(func.body):
        name = helper_name(call, local)
        if name is None:
            continue
        helper = find(ks, name)
        if helper is None:
            return name, f"?{name}"
        if helper.builtin:
            if pred(helper.as_builtin(call)):
                return name, helper.builtin
            continue
        key = (helper.source.path, helper.func.name.value)
        if key in seen:
            continue
        hit = next((c for c in cu.calls_in(helper.func.body) if pred(c)), None)
        if hit is not None:
            return name, cu.call_name(hit) or name
        deeper = _reaches(helper.source, helper.func, pred, seen | {key})
        if deeper is not None:
            return name, deeper[1]
    return None


def helper_does(ks: KernelSource, func: cst.FunctionDef, pred, seen: frozenset = frozenset()) -> str | None:
    """The name of a helper `func` calls (transitively, across files) for which `pred(call)` holds,
    or below which a call cannot be found (we cannot look inside it); None if there is none."""
    found = _reaches(ks, func, pred, seen)
    return found[0] if found is not None else None


def loads_data(call: cst.Call) -> bool:
    leaf = (cu.call_name(call) or "").rsplit(".", 1)[-1]
    return leaf in ("load", "gather") or leaf in cu.WRITE_CALLS or leaf.startswith("atomic_")


def data_names(ks: KernelSource, func: cst.FunctionDef) -> set[str]:
    """Names whose values depend on loaded data (a load, an atomic, or a helper that loads): rows
    computed from them change with the tensors' contents, from one launch to the next."""
    local = local_names(func)

    def loads(expr: cst.CSTNode) -> bool:
        for call in cu.calls_in(expr):
            if loads_data(call):
                return True
            name = helper_name(call, local)
            if name is None:
                continue
            helper = find(ks, name)
            if helper is None:
                return True
            if helper.builtin:
                if loads_data(helper.as_builtin(call)):
                    return True
            elif any(loads_data(c) for c in cu.calls_in(helper.func.body)) \
                    or helper_does(helper.source, helper.func, loads_data) is not None:
                return True
        return False

    return cu.spread(func.body, set(), lambda value, data: loads(value) or bool(cu.names_in(value) & data))


def is_program_id(call: cst.Call) -> bool:
    name = cu.call_name(call) or ""
    return name.rsplit(".", 1)[-1] == "program_id"


def program_id_helper(ks: KernelSource) -> str:
    """Why remapping `tl.program_id` in the kernel's body alone would not remap every tile id ('' if it would)."""
    found = _reaches(ks, ks.func, is_program_id)
    if found is None:
        return ""
    name, deepest = found
    if not deepest.startswith("?"):
        return f"the helper {name} calls tl.program_id itself"
    unseen = deepest[1:]
    where = "" if unseen == name else f"calls {unseen}, which "
    return (f"the helper {name} {where}is not a @triton.jit function of this file or of a module it imports, so syncopy "
            "cannot see whether it calls tl.program_id")


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


# --- helpers that only hand back the program id (FlagGems' `tle.program_id(axis)`) -----------------

def _returned(func: cst.FunctionDef) -> cst.BaseExpression | None:
    """The expression of a function whose body is one `return E` (after a docstring), else None."""
    body = [s for s in func.body.body if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                                               and isinstance(s.body[0], cst.Expr)
                                               and isinstance(s.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))]
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return None
    ret = body[0].body[0]
    return ret.value if isinstance(ret, cst.Return) and ret.value is not None else None


def _program_id_of(helper: Helper) -> cst.BaseExpression | None:
    """What a helper returns when all it does is hand back the program id: `tl.program_id(axis)`,
    maybe cast (`.to(tl.int64)`), with Triton's own program_id and no other call; else None."""
    expr = _returned(helper.func)
    if expr is None:
        return None
    calls = list(cu.calls_in(expr))
    pids = [c for c in calls if imports.triton_builtin(imports.qualified(helper.source.module, cu.call_name(c) or "")) == "tl.program_id"]
    methods = [c for c in calls if c not in pids and isinstance(c.func, cst.Attribute)
               and c.func.attr.value in PURE_METHODS and not isinstance(c.func.value, cst.Name)]
    if len(pids) != 1 or len(pids) + len(methods) != len(calls):
        return None
    node = expr
    while node is not pids[0]:  # the program id, then only methods called on it
        if not (isinstance(node, cst.Call) and node in methods and isinstance(node.func, cst.Attribute)):
            return None
        node = node.func.value
    return expr


class _CallRewriter(cst.CSTTransformer):
    """A rewrite of calls in the kernel `ks`: every node rebuilt on the way keeps the position of the
    node it replaces (`positions`), and `count` says how many calls were rewritten."""

    def __init__(self, ks: KernelSource):
        self.ks, self.local = ks, local_names(ks.func)
        self.positions = dict(ks.positions)
        self.count = 0

    def on_leave(self, original, updated):
        out = super().on_leave(original, updated)
        if out is not original and isinstance(out, cst.CSTNode) and original in self.positions:
            self.positions.setdefault(out, self.positions[original])
        return out

    def applied(self) -> KernelSource:
        """The kernel with its calls rewritten; the kernel itself where no call was."""
        ks = self.ks
        func = ks.func.visit(self)
        if not self.count:
            return ks
        module = ks.module.deep_replace(ks.func, func)
        if ks.module in self.positions:
            self.positions[module] = self.positions[ks.module]
        return KernelSource(ks.path, module, func, self.positions, ks.line_offset, ks.linked)


class _Inline(_CallRewriter):
    """Each call of a program-id helper replaced by what it returns, in the caller's names; every
    node rebuilt on the way keeps the position of the node it replaces."""

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = helper_name(original, self.local)
        helper = find(self.ks, name) if name is not None else None
        if helper is None or helper.builtin:
            return updated
        expr = _program_id_of(helper)
        env = bind_args(helper.func, original, self.ks) if expr is not None else None
        params = set(local_names(helper.func)) - cu.assigned_in(helper.func.body)
        foreign = cu.names_in(expr) - params if expr is not None else set()
        if env is None or any(imports.qualified(helper.source.module, n) is None
                              or imports.qualified(helper.source.module, n) != imports.qualified(self.ks.module, n) for n in foreign):
            return updated
        self.count += 1
        new = cst.parse_expression(cu.substitute(cst.Module(body=[]), expr, env))
        where = self.positions.get(original)
        if where is not None:
            for node in _nodes(new):
                self.positions[node] = where
        return new


def _nodes(node: cst.CSTNode):
    yield node
    for child in node.children:
        yield from _nodes(child)


def inline_program_ids(ks: KernelSource) -> KernelSource:
    """`ks` with every call of a helper that only hands back the program id (`pid = tle.program_id(0)`,
    whose body is `return tl.program_id(axis).to(tl.int64)`, in this file or an imported module)
    replaced by that expression, so that the tile remap, inference and the probe see the program id
    itself; `ks` unchanged where there is none. Only where every global name the expression uses
    (`tl`) means the same in the kernel's file: otherwise the call stays a helper, which syncopy says."""
    return _Inline(ks).applied()


# --- Triton's builtins under another name (`my_load = tl.load`, `from triton.language import load as my_load`) ---

class _Unalias(_CallRewriter):
    """Each call of a Triton builtin under another name written as a call of the builtin, spelled as the
    kernel's file names triton.language; every rebuilt call keeps the position of the one it replaces."""

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = helper_name(original, self.local)
        if name is None or name.split(".", 1)[0] in self.local:
            return updated
        helper = find(self.ks, name)
        if helper is None or not helper.builtin.startswith("tl."):
            return updated
        spelled = imports.spelling(self.ks.module, "triton.language" + helper.builtin[2:])
        if spelled is None:
            return updated
        self.count += 1
        return updated.with_changes(func=cst.parse_expression(spelled))


def unalias_builtins(ks: KernelSource) -> KernelSource:
    """`ks` with every call of a Triton builtin under another name (`my_load(p)` after `my_load = tl.load`
    in the kernel's file or a module it imports, or `from triton.language import load as my_load`)
    written as the builtin itself (`tl.load(p)`), so that inference and every pass read it as they
    read Triton's own; `ks` unchanged where there is none, or where the file binds no name to
    triton.language or triton (the call then stays a helper, which syncopy says)."""
    return _Unalias(ks).applied()


# --- helpers that make a tensor descriptor (the attention tutorial's `_maybe_make_tensor_desc`) -----

_DESC_ARGS = ("base", "shape", "strides", "block_shape")


def _builtin_of(source: KernelSource, call: cst.CSTNode) -> str | None:
    return imports.triton_builtin(imports.qualified(source.module, cu.call_name(call) or "")) \
        if isinstance(call, cst.Call) else None


def _param_of(call: cst.Call, i: int, key: str, params: list[str]) -> str | None:
    """The helper parameter a Triton call is handed, unchanged, as argument i (or `key=`); None otherwise."""
    a = cu.arg(call, i, key)
    return a.value if isinstance(a, cst.Name) and a.value in params else None


def _maker_params(helper: Helper) -> tuple[str, ...] | None:
    """The helper's parameters handed, unchanged, as (base, shape, strides, block_shape) to
    `tl.make_tensor_descriptor`, where its whole body is that: `return tl.make_tensor_descriptor(p, s, t, b)`,
    or, first, `if isinstance(p, tl.tensor_descriptor): return p` (a descriptor made on the host
    passes through; syncopy hands the kernel a pointer, so that branch never runs); None otherwise."""
    func, source = helper.func, helper.source
    params = [p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)]
    body = [s for s in func.body.body if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                                               and isinstance(s.body[0], cst.Expr)
                                               and isinstance(s.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))]

    def returned(stmts) -> cst.BaseExpression | None:
        stmts = list(stmts)
        if len(stmts) != 1 or not isinstance(stmts[0], cst.SimpleStatementLine) or len(stmts[0].body) != 1:
            return None
        ret = stmts[0].body[0]
        return ret.value if isinstance(ret, cst.Return) else None

    passthrough = None
    if body and isinstance(body[0], cst.If):
        branch = body[0]
        test = branch.test
        kind = cu.arg(test, 1, "") if isinstance(test, cst.Call) and cu.call_name(test) == "isinstance" else None
        given = returned(branch.body.body)
        if kind is None or _builtin_of(source, cst.Call(func=kind)) != "tl.tensor_descriptor" or not isinstance(given, cst.Name):
            return None
        passthrough = given.value
        if cu.arg(test, 0, "") is None or not (isinstance(cu.arg(test, 0, ""), cst.Name) and cu.arg(test, 0, "").value == passthrough):
            return None
        if isinstance(branch.orelse, cst.Else) and len(body) == 1:
            made = returned(branch.orelse.body.body)
        elif branch.orelse is None and len(body) == 2:
            made = returned(body[1:])
        else:
            return None
    else:
        made = returned(body)
    if _builtin_of(source, made) != "tl.make_tensor_descriptor":
        return None
    handed = tuple(_param_of(made, i, key, params) for i, key in enumerate(_DESC_ARGS))
    if None in handed or len(set(handed)) != 4 or (passthrough is not None and passthrough != handed[0]):
        return None
    return handed


def descriptor_made(ks: KernelSource, call: cst.Call) -> cst.Call | None:
    """`call` (a call of a helper that only makes a tensor descriptor, _maker_params) written as the
    `tl.make_tensor_descriptor(base, shape=..., strides=..., block_shape=...)` it runs, from the
    caller's own argument nodes; None where it is no such call or its arguments cannot be matched."""
    name = helper_name(call)
    helper = find(ks, name) if name is not None else None
    if helper is None or helper.builtin:
        return None
    made = _maker_params(helper)
    func = helper.func
    params = [*func.params.posonly_params, *func.params.params, *func.params.kwonly_params]
    positional = [a for a in call.args if a.keyword is None]
    if made is None or any(a.star for a in call.args) or len(positional) > len(params):
        return None
    given = {p.name.value: a.value for p, a in zip(params, positional)}
    given.update({a.keyword.value: a.value for a in call.args if a.keyword is not None})
    if any(p not in given for p in made):
        return None
    args = [cst.Arg(given[made[0]])] + [cst.Arg(given[p], keyword=cst.Name(key), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        for p, key in zip(made[1:], _DESC_ARGS[1:])]
    return cst.Call(func=cst.parse_expression("tl.make_tensor_descriptor"), args=args)
