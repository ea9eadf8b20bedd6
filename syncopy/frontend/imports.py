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
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        other = from_file(spec.origin, func)
    except KernelError:
        return _reexported(spec.origin, func, depth)  # not defined there: maybe imported there
    return other, other.func


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
