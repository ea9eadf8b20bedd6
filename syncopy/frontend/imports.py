"""@triton.jit helpers a kernel's file imports from other files: where they are, and whether a copy
of one could run among the kernel file's globals (checked mode calls such copies, read_check.py).

Found from the file's own import statements, without running it: `import pkg.mod as m` + `m.f(...)`,
`from pkg.mod import f as g` + `g(...)`, relative imports of a module Python has imported. Anything
else (a name assigned at run time, a module that cannot be found) is not followed.
"""
from __future__ import annotations

import builtins
import importlib.util
import sys

import libcst as cst

from syncopy.errors import KernelError
from syncopy.frontend import cstutil as cu
from syncopy.frontend.source import KernelSource, from_file

_DEPTH = 3  # re-exports followed (`from .impl import f` in the module that was named)


def _imports(module: cst.Module):
    """(bound name, statement) for each name the module's top-level imports bind."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                for alias in small.names:
                    bound = cu.dotted(alias.asname.name) if alias.asname else cu.dotted(alias.name).split(".")[0] \
                        if isinstance(small, cst.Import) else cu.dotted(alias.name)
                    yield bound, small, alias


def _package(ks: KernelSource) -> str | None:
    """The package of the kernel's file, if Python imported it (for relative imports)."""
    for mod in list(sys.modules.values()):
        if getattr(mod, "__file__", None) == ks.path:
            return mod.__package__
    return None


def _target(ks: KernelSource, name: str) -> tuple[str, str] | None:
    """(module, function) a dotted call name refers to through the file's imports."""
    head, *rest = name.split(".")
    for bound, stmt, alias in _imports(ks.module):
        if bound != head:
            continue
        if isinstance(stmt, cst.Import):
            module = cu.dotted(alias.name) if alias.asname else head
            path = [*module.split("."), *rest] if alias.asname else [head, *rest]
            return (".".join(path[:-1]), path[-1]) if len(path) > 1 else None
        module = cu.dotted(stmt.module) if stmt.module is not None else ""
        if stmt.relative:
            package = _package(ks)
            if package is None:
                return None
            parts = package.split(".")
            up = len(stmt.relative) - 1
            module = ".".join([*parts[: len(parts) - up], *([module] if module else [])]) if up < len(parts) else None
            if not module:
                return None
        path = [*module.split("."), cu.dotted(alias.name), *rest]
        return ".".join(path[:-1]), path[-1]
    return None


def imported_helper(ks: KernelSource, name: str, depth: int = 0) -> tuple[KernelSource, cst.FunctionDef] | None:
    """The file and @triton.jit function a call `name` of `ks`'s file runs, when it is imported from
    another file; None where it cannot be found without running code."""
    target = _target(ks, name)
    if target is None or depth > _DEPTH:
        return None
    module, func = target
    origin = _module_file(module)
    if origin is None:
        return None
    try:
        other = from_file(origin, func)
    except KernelError:
        return _reexported(origin, func, depth)  # not defined there: maybe imported there
    return other, other.func


def _module_file(module: str) -> str | None:
    """The .py file of an importable module, found without running it; None where there is none."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):
        return None
    return spec.origin if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def qualified(module: cst.Module, dotted: str) -> str | None:
    """The absolute dotted name `dotted` refers to through a module's top-level imports
    (`tl.cast` -> `triton.language.cast` under `import triton.language as tl` or
    `from triton import language as tl`); None where its head is not bound by an absolute import."""
    head, _, rest = dotted.partition(".")
    for bound, stmt, alias in _imports(module):
        if bound != head:
            continue
        if isinstance(stmt, cst.Import):
            full = cu.dotted(alias.name) if alias.asname else head
        elif stmt.relative or stmt.module is None:
            return None
        else:
            full = f"{cu.dotted(stmt.module)}.{cu.dotted(alias.name)}"
        return f"{full}.{rest}" if rest else full
    return None


def spelling(module: cst.Module, full: str) -> str | None:
    """How code in `module` names the absolute `full` through a module it is in (`triton.language.load`
    -> `tl.load` under `import triton.language as tl`, `triton.language.load` under `import triton`
    alone; never through a name bound to `full` itself, which may be the alias being resolved); None
    where no top-level import binds such a module."""
    parts = full.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        head, rest = ".".join(parts[:cut]), parts[cut:]
        for bound, _, _ in _imports(module):
            if qualified(module, bound) == head:
                return ".".join([bound, *rest])
    return None


def triton_builtin(full: str | None) -> str | None:
    """`tl.<name>` for an absolute name inside triton.language (`triton.language.math.exp` ->
    `tl.math.exp`), else None."""
    prefix = "triton.language"
    if full is None or not (full == prefix or full.startswith(prefix + ".")):
        return None
    return "tl" + full[len(prefix):]


def _alias_in(module: cst.Module, name: str) -> str | None:
    """What a module-level `name = tl.cast` (a Triton builtin under another name) stands for, as
    `tl.cast`; None where `name` is assigned anything else, or more than once."""
    values = [small.value for stmt in module.body if isinstance(stmt, cst.SimpleStatementLine) for small in stmt.body
              if isinstance(small, cst.Assign) and any(name in cu.target_names(t.target) for t in small.targets)]
    dotted = cu.dotted(values[0]) if len(values) == 1 else None
    return triton_builtin(qualified(module, dotted)) if dotted else None


def builtin_alias(ks: KernelSource, name: str, depth: int = 0) -> str | None:
    """The Triton builtin (`tl.cast`) a call `name` of `ks`'s file runs under another name: an
    assignment in this file (`triton_cast = tl.cast`), one in the module it is imported from, or a
    direct import (`from triton.language import cast`); None where it is not one."""
    if "." not in name:
        alias = _alias_in(ks.module, name)
        if alias is not None:
            return alias
    direct = triton_builtin(qualified(ks.module, name))
    if direct is not None:
        return direct
    target = _target(ks, name)
    if target is None or depth > _DEPTH:
        return None
    module, attr = target
    path = _module_file(module)
    if path is None:
        return None
    from syncopy.frontend.source import parse

    try:
        other, positions = parse(open(path, encoding="utf-8").read(), path)
    except (OSError, UnicodeDecodeError, KernelError):
        return None
    stub = KernelSource(path, other, cst.FunctionDef(cst.Name(attr), cst.Parameters(), cst.IndentedBlock([])), positions)
    return builtin_alias(stub, attr, depth + 1)


def _reexported(path: str, func: str, depth: int):
    from syncopy.frontend.source import parse

    try:
        text = open(path, encoding="utf-8").read()
        module, positions = parse(text, path)
    except (OSError, UnicodeDecodeError, KernelError):
        return None
    stub = KernelSource(path, module, cst.FunctionDef(cst.Name(func), cst.Parameters(), cst.IndentedBlock([])), positions)
    return imported_helper(stub, func, depth + 1)


def _binding(module: cst.Module, name: str) -> tuple | None:
    """What a module's top-level imports bind `name` to, comparable between files; None if not an
    absolute import."""
    for bound, stmt, alias in _imports(module):
        if bound == name:
            if isinstance(stmt, cst.Import):
                return ("import", cu.dotted(alias.name), alias.asname is not None)
            if stmt.relative:
                return None
            return ("from", cu.dotted(stmt.module), cu.dotted(alias.name))
    return None


def foreign_names(func: cst.FunctionDef, origin: cst.Module, home: cst.Module) -> list[str]:
    """The global names `func` (from the file of `origin`) uses that the file of `home` does not bind
    to the same thing: a copy of `func` among `home`'s globals would not run as the original does."""
    params = func.params
    local = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)} | cu.assigned_in(func.body)
    annotations = [p.annotation for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.annotation]
    used = set().union(*(cu.names_in(n) for n in (func.body, *annotations, *(d.decorator for d in func.decorators))))
    free = used - local - set(dir(builtins))
    # syncopy's own names: the device module the emitted file imports, the checked copies beside it.
    return sorted(n for n in free if not n.startswith("syncopy_")
                  and (_binding(origin, n) is None or _binding(origin, n) != _binding(home, n)))
