"""Imports flow one way (issue 12, item 8; issue 29, item 3): the user-facing layer (syncopy.api, the
templates, the CLI) imports the runtime, never the reverse; inside the runtime each folder imports only
from the folders below it; and no module of syncopy imports, however lazily, a module that imports
it back. Type-only imports under `if TYPE_CHECKING:` do not count."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import syncopy

ROOT = Path(syncopy.__file__).parent
USER_FACING = ("syncopy.api", "syncopy.templates", "syncopy.cli", "syncopy.run", "syncopy.demo")

#: The runtime's folders from the bottom up: each may import its own folder and those below it.
#: Folders on one line stand side by side and import neither each other.
RUNTIME_LAYERS = (
    ("where",),
    ("trace", "streams"),
    ("state",),
    ("transport",),
    ("launch",),
    ("pipeline",),
    ("worlds",),
)
#: What lies below the whole runtime: it imports no part of it.
BELOW_THE_RUNTIME = ("syncopy.errors", "syncopy.device", "syncopy.schedule", "syncopy._version")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in `path` outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _edges() -> dict[str, set[str]]:
    """module -> the syncopy modules it imports: `from P import n` is an edge to the submodule P.n where
    there is one, else to P."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        listed = _imports(path)
        targets = {mod for _, mod in listed if mod in modules}
        # `from P import n` lists both P and P.n: where P.n is a module, that import is an edge to it alone.
        named = {mod.rpartition(".")[0] for line, mod in listed if mod in modules and (line, mod.rpartition(".")[0]) in listed}
        package_names = {(line, mod.rpartition(".")[0]) for line, mod in listed if mod not in modules}
        keep = {t for t in targets if t not in named or any(m == t for _, m in package_names)}
        graph[name] = keep - {name}
    return graph


def _runtime_folder(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["syncopy", "runtime"] or len(parts) < 3:
        return None
    return parts[2]


def test_the_runtime_and_the_compiler_never_import_the_user_facing_layer():
    lower = [p for sub in ("runtime", "passes", "frontend", "emit", "schedule") for p in (ROOT / sub).rglob("*.py")] + [ROOT / "device.py"]
    bad = [f"{p.relative_to(ROOT.parent)}:{line}: imports {mod}" for p in lower for line, mod in _imports(p)
           if any(mod == top or mod.startswith(top + ".") for top in USER_FACING)]
    assert not bad, "\n".join(bad)


def test_the_runtime_is_its_folders_and_where():
    runtime = ROOT / "runtime"
    folders = {f for layer in RUNTIME_LAYERS for f in layer}
    loose = sorted(p.name for p in runtime.iterdir() if p.suffix == ".py" and p.name not in ("__init__.py", "where.py"))
    assert not loose, f"modules outside the runtime's folders: {loose}"
    found = {p.name for p in runtime.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert found == folders - {"where"}, found
    for folder in found:
        doc = ast.get_docstring(ast.parse((runtime / folder / "__init__.py").read_text()))
        assert doc and len(doc) > 80, f"runtime/{folder}/__init__.py says what the folder owns"


def test_each_runtime_folder_imports_only_the_folders_below_it():
    level = {f: i for i, layer in enumerate(RUNTIME_LAYERS) for f in layer}
    bad = []
    for name, path in _modules().items():
        mine = "where" if name == "syncopy.runtime.where" else _runtime_folder(name)
        if mine is None:
            continue
        for line, mod in _imports(path):
            theirs = "where" if mod.startswith("syncopy.runtime.where") else _runtime_folder(mod)
            if theirs is None or theirs == mine or theirs not in level:
                continue
            if level[theirs] >= level[mine]:
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}: runtime/{mine} imports {mod} (runtime/{theirs})")
    assert not bad, "\n".join(bad)


def test_what_lies_below_the_runtime_never_imports_it():
    bad = [f"{path.relative_to(ROOT.parent)}:{line}: imports {mod}" for name, path in _modules().items()
           if any(name == low or name.startswith(low + ".") for low in BELOW_THE_RUNTIME)
           for line, mod in _imports(path) if mod.startswith("syncopy.runtime")]
    assert not bad, "\n".join(bad)


def test_no_import_circles():
    graph = _edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_sees_a_circle(tmp_path, monkeypatch):
    """A negative control: two modules importing each other (one lazily, one by a name of the package
    that is a module) are reported; a package importing a name that is not a module of it is not."""
    pkg = tmp_path / "syncopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("VERSION = 1\n")
    (pkg / "a.py").write_text("from syncopy import b, VERSION\n")
    (pkg / "b.py").write_text("def f():\n    from syncopy.a import g\n")
    (pkg / "c.py").write_text("from syncopy import b\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    with pytest.raises(AssertionError) as found:
        test_no_import_circles()
    assert str(found.value).splitlines()[0] == "syncopy.a <-> syncopy.b"


def test_the_operator_holds_the_parts_of_a_launch_and_inherits_none():
    """FusedKernel is the user's object; a launch's parts are objects it holds (issue 29, item 2), and
    a pipeline's variant gets parts of its own (its own contexts, its own compiled kernel)."""
    from syncopy import api
    from syncopy.runtime.launch import binding, contexts, kernel, order, tracing
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    assert api.FusedKernel.__mro__ == (api.FusedKernel, object)
    fk = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 2, "order": "ring"})(ag_gemm_kernel)
    parts = {"kernel": kernel.Kernel, "binder": binding.Binder, "contexts": contexts.Contexts, "orders": order.TileOrders,
             "tracer": tracing.Tracer}
    assert all(type(getattr(fk, name)) is part and getattr(fk, name).op is fk for name, part in parts.items())
    variant = fk.linked(notify="C")
    assert all(getattr(variant, name) is not getattr(fk, name) and getattr(variant, name).op is variant for name in parts)
    assert variant.link_roles == {"notify": "C"} and fk.link_roles == {}
