"""Imports flow one way: the user-facing layer (syncopy.api, the templates) imports the runtime, never
the reverse (issue 12, item 8: api.py, runtime/persistent.py and templates/ imported each other in a
circle). Type-only imports under `if TYPE_CHECKING:` do not count."""
from __future__ import annotations

import ast
from pathlib import Path

import syncopy

ROOT = Path(syncopy.__file__).parent
USER_FACING = ("syncopy.api", "syncopy.templates", "syncopy.cli", "syncopy.run", "syncopy.demo")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in `path` outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def test_the_runtime_and_the_compiler_never_import_the_user_facing_layer():
    lower = [p for sub in ("runtime", "passes", "frontend", "emit", "schedule") for p in (ROOT / sub).rglob("*.py")] + [ROOT / "device.py"]
    bad = [f"{p.relative_to(ROOT.parent)}:{line}: imports {mod}" for p in lower for line, mod in _imports(p)
           if any(mod == top or mod.startswith(top + ".") for top in USER_FACING)]
    assert not bad, "\n".join(bad)


def test_the_launch_steps_live_in_their_own_runtime_modules():
    from syncopy import api
    from syncopy.runtime import binding, contexts, order, sequence, tracing

    steps = (binding.Binding, contexts.Contexts, order.TileOrder, tracing.Tracing, sequence.LaunchSequence)
    assert all(issubclass(api.FusedKernel, step) for step in steps)
    own = {name for name, v in vars(api.FusedKernel).items() if callable(v) and not name.startswith("__")}
    assert own <= {"build", "backend_for", "synchronize", "_reference", "_reference_producer"}, own
