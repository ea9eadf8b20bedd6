"""Emit: Python source for a transformed kernel, written to a content-addressed cache and imported.

Triton's @jit reads a kernel's source through `inspect`, so a rewritten kernel must live in a real
file. The file name is keyed by the hash of (kernel source, schedule, syncopy version, generated
text), which also makes `--dump-dir` and a look at what syncopy generated a matter of opening that file.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import libcst as cst

from syncopy.passes import names
from syncopy.passes.transformed import Transformed

IMPORT_DEVICE = f"import syncopy.device as {names.DEVICE}"


def _version() -> str:
    from syncopy._version import __version__

    return __version__


def cache_dir() -> Path:
    root = os.environ.get("SYNCOPY_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "syncopy"


def cache_key(t: Transformed) -> str:
    h = hashlib.sha256()
    # The generated text too: it also depends on what the kernel's source alone does not say (the
    # helpers inference followed, checked mode), and a process must never find another's text
    # under its key (Triton reads a kernel's source back from the file).
    for part in (t.source.code(t.source.func), t.schedule.key(), _version(), standalone_module(t)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _has_device_import(module: cst.Module) -> bool:
    return IMPORT_DEVICE in module.code


def rewrite_file(t: Transformed, loadable: bool = False) -> str:
    """The whole kernel file with only the named kernel replaced (and syncopy's device import added).
    `loadable`: also the probe kernel and the manifest `syncopy.load` needs, at the end of the file."""
    module = t.source.module
    new = module.deep_replace(t.source.func, t.func)
    assert isinstance(new, cst.Module)
    if loadable:
        new = new.with_changes(body=[*new.body, *_loadable_tail(t)])
    if t.checked_helpers:
        # Checked copies of the helpers (read_check.py) go right before the kernel that calls them.
        body = list(new.body)
        at = next(i for i, s in enumerate(body) if s is t.func)
        copies = [f.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()] if i else []) for i, f in enumerate(t.checked_helpers)]
        body[at:at] = copies
        body[at + len(copies)] = t.func.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        copies[0] = copies[0].with_changes(leading_lines=list(t.func.leading_lines))
        body[at] = copies[0]
        new = new.with_changes(body=body)
    if _has_device_import(module):
        return new.code
    body = list(new.body)
    last_import = max(
        (i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], (cst.Import, cst.ImportFrom))),
        default=-1,
    )
    stmt = cst.parse_statement(IMPORT_DEVICE + "\n")
    if last_import < 0:
        # No imports: put ours after a module docstring, or first.
        doc = 1 if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) else 0
        body.insert(doc, stmt)
    else:
        body.insert(last_import + 1, stmt)
    return new.with_changes(body=body).code


def manifest(t: Transformed, extents: dict | None = None) -> dict:
    """What the runtime reads of `t` (runtime/launch/loaded.py), and what ties the file to its schedule
    and syncopy. `extents`: output -> [its store-address probe's name, descriptors], as _extent_probes."""
    from syncopy.runtime.launch.loaded import schedule_digest

    return {"syncopy": _version(), "kernel": t.source.name, "schedule": schedule_digest(t.schedule),
            "probe": t.probe.name.value if t.probe is not None else None,
            "persistent": {"remap": bool(t.persistent.remap)} if t.persistent is not None else None,
            "fresh_probe": t.fresh_probe, "checked": t.checked, "descriptors": bool(t.binding.descriptors),
            "clamped": any(a.clamped for g in t.binding.groups for a in g.accesses),
            # The checks a decorated launch makes with the frontend, made here without it: the stride
            # arguments of each communicated tensor (Binder.check_strides), each output's extent probe.
            "scales": {b.tensor: list(getattr(b, "scales", ())) for b in (t.binding, *t.others)},
            "written": sorted(extents or {}), "extents": dict(extents or {})}


def _extent_probes(t: Transformed) -> list[tuple[str, cst.FunctionDef, bool]]:
    """(output, its store-address probe named `<kernel>__syncopy_extent_<output>`, descriptors) for every
    tensor the kernel writes but the communicated ones, where the probe reports exactly the rows written
    (runtime/launch/kernel.py, Kernel.extent_probe: the same rule, the same transform)."""
    from syncopy.errors import InferenceError, KernelError
    from syncopy.frontend import infer
    from syncopy.passes import transform
    from syncopy.schedule import from_dict

    out = []
    for output in infer.written_bases(t.source):
        if output in t.schedule.tensors:
            continue
        writes = from_dict({"pattern": "reduce_scatter", "kernel": t.source.name, "tensor": output, "dim": 0,
                            "chunks_per_rank": 1, "order": "ring"})
        try:
            e = transform(t.source, writes)
        except (InferenceError, KernelError):
            continue
        if e.probe is None or any(a.clamped or a.every for g in e.binding.groups for a in g.accesses):
            continue
        name = f"{t.source.name}__syncopy_extent_{output}"
        out.append((output, e.probe.with_changes(name=cst.Name(name)), bool(e.binding.descriptors)))
    return out


def _loadable_tail(t: Transformed) -> list[cst.CSTNode]:
    """The probe (the runtime probes each program's chunks with it) and the manifest, for syncopy.load."""
    from syncopy.runtime.launch.loaded import MANIFEST_PREFIX

    two = [cst.EmptyLine(), cst.EmptyLine()]
    tail: list[cst.CSTNode] = []
    if t.probe is not None:
        tail.append(_only_jit_decorator(t.probe).with_changes(leading_lines=two))
    extents = {}
    for output, probe, descriptors in _extent_probes(t):
        tail.append(_only_jit_decorator(probe).with_changes(leading_lines=two))
        extents[output] = [probe.name.value, descriptors]
    note = cst.EmptyLine(comment=cst.Comment(f"# syncopy: what syncopy.load needs to launch {t.source.name} "
                                             "(written by syncopy transform --loadable; do not edit)"))
    statement = cst.parse_statement(f"{MANIFEST_PREFIX}{t.source.name} = {manifest(t, extents)!r}\n")
    tail.append(statement.with_changes(leading_lines=[*two, note]))
    return tail


def standalone_module(t: Transformed) -> str:
    """A module holding only the fused kernel and its probe, run in the user's module globals."""
    header = (
        f"# Generated by syncopy {_version()} from {t.source.path} (kernel {t.source.name}, "
        f"pattern {t.schedule.pattern}, tensor {', '.join(t.schedule.tensors)}). Do not edit.\n"
        f"{IMPORT_DEVICE}\n"
    )
    funcs = [*map(_only_jit_decorator, t.checked_helpers), _only_jit_decorator(t.func)]
    if t.probe is not None:
        funcs.append(_only_jit_decorator(t.probe))
    module = cst.Module(body=funcs)
    return header + "\n\n" + module.code


def _only_jit_decorator(func: cst.FunctionDef) -> cst.FunctionDef:
    from syncopy.frontend.source import _is_jit

    jit = [d for d in func.decorators if _is_jit(d)]
    # A function made a kernel by `g = triton.jit(f)`: decorated here, in the module that holds it alone.
    return func.with_changes(decorators=jit or [cst.Decorator(decorator=cst.parse_expression("triton.jit"))], leading_lines=[])


def _file_mode(path: Path) -> int:
    """The mode a write to `path` should leave: an existing file's own, else 0666 less the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)  # the only way to read it; set it straight back
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file renamed over it (readers never see half a file).

    Creates missing parent folders (the cache and --dump-dir rely on it; the CLI checks `-o` itself).
    The file gets the mode a plain `open(path, "w")` would give it, not mkstemp's 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), _file_mode(path))
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(t: Transformed, user_globals: dict) -> tuple[object, object | None, Path]:
    """Write the fused module to the cache and execute it in a copy of the kernel's globals.

    Returns (fused JIT function, probe JIT function or None, path of the generated file).
    """
    import syncopy.device as device

    text = standalone_module(t)
    path = cache_dir() / cache_key(t) / f"{t.source.name}_fused.py"
    if not path.exists() or path.read_text() != text:
        write_atomic(path, text)
    namespace = dict(user_globals)
    namespace.update({"__name__": f"syncopy_generated_{t.source.name}", "__file__": str(path), names.DEVICE: device})
    namespace.setdefault("tl", __import__("triton.language", fromlist=["language"]))
    namespace.setdefault("triton", __import__("triton"))
    code = compile(text, str(path), "exec")
    exec(code, namespace)
    fused = namespace[t.func.name.value]
    probe = namespace[t.probe.name.value] if t.probe is not None else None
    return fused, probe, path


def dump(t: Transformed, directory: str | Path) -> list[Path]:
    """Write each stage's artifact (kernel, binding, fused, probe) into `directory`."""
    d = Path(directory)
    written = []
    for i, (stage, text) in enumerate(t.stages.items()):
        p = d / f"{i}_{stage}.{'txt' if stage == 'binding' else 'py'}"
        write_atomic(p, text)
        written.append(p)
    return written
