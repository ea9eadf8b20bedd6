"""Finding the kernel: parse a file (or a live JITFunction's file) once, locate the @triton.jit function."""
from __future__ import annotations

import functools
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from syncopy.errors import KernelError, SourceLocation


@dataclass
class KernelSource:
    """A parsed file and the kernel function in it, with positions for every node."""

    path: str
    module: cst.Module
    func: cst.FunctionDef
    positions: dict = field(repr=False)
    line_offset: int = 0  # added to libcst lines when only the function's text was parsed
    linked: bool = False  # a pipeline's link pass added its syncopy_in_* / syncopy_out_* names (passes/link.py)

    @property
    def name(self) -> str:
        return self.func.name.value

    def location(self, node: cst.CSTNode) -> SourceLocation:
        pos = self.positions.get(node)
        if pos is None:
            return SourceLocation(self.path, self.line_offset + 1, 1)
        return SourceLocation(self.path, pos.start.line + self.line_offset, pos.start.column + 1)

    def code(self, node: cst.CSTNode) -> str:
        """A node's text; an expression over several lines comes parenthesized (cstutil.code)."""
        from syncopy.frontend.cstutil import code

        return code(self.module, node)

    @property
    def params(self) -> list[str]:
        p = self.func.params
        return [x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)]


def _is_jit(decorator: cst.Decorator) -> bool:
    d = decorator.decorator
    if isinstance(d, cst.Call):
        d = d.func
    if isinstance(d, cst.Attribute):
        return d.attr.value == "jit"
    return isinstance(d, cst.Name) and d.value == "jit"


def jit_functions(module: cst.Module) -> list[cst.FunctionDef]:
    """Top-level functions decorated with @triton.jit (or @jit, @triton.jit(...)), or made kernels by a
    module-level call (`g = triton.jit(f)`, as unsloth writes them), in file order."""
    called = set(jit_assignments(module).values())
    return [s for s in module.body if isinstance(s, cst.FunctionDef)
            and (any(_is_jit(d) for d in s.decorators) or s.name.value in called)]


def jit_assignments(module: cst.Module) -> dict[str, str]:
    """{name bound: function} for module-level `name = triton.jit(function)` (or `jit(f)`, `triton.jit(f, ...)`)."""
    out = {}
    for stmt in module.body:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        call = assign.value
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name) or not isinstance(call, cst.Call):
            continue
        if _is_jit(cst.Decorator(decorator=call.func)) and call.args and isinstance(call.args[0].value, cst.Name) \
                and call.args[0].keyword is None:
            out[assign.targets[0].target.value] = call.args[0].value.value
    return out


def parse(text: str, path: str) -> tuple[cst.Module, dict]:
    """The file's module and each node's position, parsed once per (text, path): an operator parses
    its kernel's file for the fused kernel, its written outputs and their extent probes (libcst's
    trees are immutable; the positions are read, never written)."""
    return _parse(text, path)


@functools.lru_cache(maxsize=32)
def _parse(text: str, path: str) -> tuple[cst.Module, dict]:
    try:
        compile(text, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        # Python's own parser points at the right line and column (libcst's often does not).
        raise KernelError(
            f"Python syntax error: {exc.msg}; fix the kernel file", SourceLocation(path, exc.lineno or 1, exc.offset or 1)
        ) from None
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise KernelError(
            f"Python syntax error: {exc.message}; fix the kernel file", SourceLocation(path, exc.raw_line, exc.raw_column + 1)
        ) from None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    return module, dict(wrapper.resolve(PositionProvider))


def find_kernel(text: str, path: str, name: str | None, *, line_offset: int = 0) -> KernelSource:
    """The @triton.jit function `name` of a file's text; errors list the kernels that are there."""
    module, positions = parse(text, path)
    kernels = jit_functions(module)
    if name is None:
        if len(kernels) == 1:
            return KernelSource(path, module, kernels[0], positions, line_offset)
        raise KernelError(
            f"the schedule names no kernel and the file has {len(kernels)} @triton.jit functions "
            f"({', '.join(k.name.value for k in kernels) or 'none'}); add `kernel: NAME` to the schedule",
            SourceLocation(path, 1, 1),
        )
    name = jit_assignments(module).get(name, name)  # `kernel: g` for `g = triton.jit(f)`: the function f
    for k in kernels:
        if k.name.value == name:
            return KernelSource(path, module, k, positions, line_offset)
    found = ", ".join(k.name.value for k in kernels) or "none"
    others = [s.name.value for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    why = "is not decorated with @triton.jit" if others else "is not in this file"
    raise KernelError(
        f"kernel '{name}' {why}; the @triton.jit kernels here are: {found}; set `kernel:` to one of them",
        SourceLocation(path, 1, 1),
    )


def from_file(path: str | Path, name: str | None) -> KernelSource:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KernelError(f"cannot read the kernel file: {exc.strerror}; check the path", SourceLocation(str(path), 1, 1)) from None
    except UnicodeDecodeError as exc:
        raise KernelError(f"the kernel file is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8", SourceLocation(str(path), 1, 1)) from None
    return find_kernel(text, str(path), name)


def from_jit(jit_fn) -> KernelSource:
    """The source of a live @triton.jit function (JITFunction or, under TRITON_INTERPRET, InterpretedFunction)."""
    fn = getattr(jit_fn, "fn", None)
    if fn is None or not callable(fn):
        raise KernelError(
            f"syncopy.overlap expects a @triton.jit function, got {type(jit_fn).__name__}; decorate the kernel with @triton.jit first"
        )
    name = fn.__name__
    file = inspect.getsourcefile(fn)
    if file and Path(file).exists():
        text = Path(file).read_text()
        module, positions = parse(text, file)
        line = fn.__code__.co_firstlineno
        for k in jit_functions(module):
            pos = positions[k]
            # co_firstlineno is the first decorator's line; libcst's function starts at `def`.
            first = min([pos.start.line, *(positions[d].start.line for d in k.decorators)])
            if k.name.value == name and first <= line <= pos.end.line:
                return KernelSource(file, module, k, positions)
    # Defined somewhere without a readable file (exec, notebook cell): parse the function alone.
    lines, start = inspect.getsourcelines(fn)
    return find_kernel(textwrap.dedent("".join(lines)), file or f"<{name}>", name, line_offset=start - 1)
