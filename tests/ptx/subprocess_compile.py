"""Compile fused kernels for GPU targets in a fresh process (the test session runs the interpreter,
which `triton.compile` must not see).

A test file registers the compile modules it reads when pytest imports it (`register(__name__,
"compile_fused", (80, 90))`), as tests/world/shared.py registers world jobs; the first `compiled`
call compiles every module that the selected test files registered in one process (an interpreter
start and the imports of torch, triton and syncopy cost seconds a process), with a Triton cache of
its own (cold, as on a fresh clone; kernels two modules share compile once). Such a module's
`main(archs)` prints one JSON line per target (tests/pipeline registers compile_pipeline here too). A
module nobody registered runs alone: `python -m tests.ptx.<module> ARCH` prints its JSON line.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ARCHS = (80, 90)  # the targets tests/ptx checks
_registered: dict[str, dict[str, tuple[int, ...]]] = {}  # test module -> {compile module: targets}
selected_modules: set[str] | None = None  # the modules of the tests pytest selected (None: every registered one)
_compiled: dict[tuple[str, int], dict] = {}
_batch_ran = False


def register(test_module: str, module: str, archs: tuple[int, ...] = ARCHS) -> None:
    """Test module `test_module` reads what `tests.ptx.<module>` prints for each target of `archs`."""
    _registered.setdefault(test_module, {})[module] = tuple(archs)


def compiled(module: str, arch: int, cache_dir: Path):
    """The JSON that `tests.ptx.<module>` prints for sm_<arch>, with syncopy's cache in `cache_dir`."""
    global _batch_ran
    if not _batch_ran:
        _batch_ran = True
        _compile_registered(cache_dir)
    if (module, arch) not in _compiled:
        lines = _run(["-m", f"tests.ptx.{module}", str(arch)], cache_dir)
        _compiled[(module, arch)] = json.loads(lines[-1])
    return _compiled[(module, arch)]


def _wanted() -> dict[str, list[int]]:
    wanted: dict[str, set[int]] = {}
    for test_module, modules in _registered.items():
        if selected_modules is None or test_module in selected_modules:
            for module, archs in modules.items():
                wanted.setdefault(module, set()).update(archs)
    return {module: sorted(archs) for module, archs in sorted(wanted.items())}


def _compile_registered(cache_dir: Path) -> None:
    wanted = _wanted()
    if not wanted:
        return
    lines = _run(["-m", "tests.ptx.subprocess_compile", json.dumps(wanted)], cache_dir, triton_cache=cache_dir / "triton")
    for line in lines:
        if line.startswith("{\"module\""):
            got = json.loads(line)
            _compiled[(got["module"], got["arch"])] = got["out"]


def _run(args: list[str], cache_dir: Path, triton_cache: Path | None = None) -> list[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "0"}
    env["SYNCOPY_CACHE_DIR"] = str(cache_dir)
    if triton_cache is not None:
        env["TRITON_CACHE_DIR"] = str(triton_cache)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def main(wanted: dict[str, list[int]]) -> None:
    """In the compiling process: each module's `main(archs)`, its JSON lines printed as
    {"module", "arch", "out"} (whatever else a module prints is left out)."""
    for module, archs in wanted.items():
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            importlib.import_module(f"tests.ptx.{module}").main(archs)
        lines = printed.getvalue().strip().splitlines()[-len(archs):]
        assert len(lines) == len(archs), printed.getvalue()[-3000:]
        for arch, line in zip(archs, lines):
            print(json.dumps({"module": module, "arch": arch, "out": json.loads(line)}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
