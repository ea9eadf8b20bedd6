"""Compile fused kernels for a GPU target in a fresh process (the test session runs the interpreter,
which `triton.compile` must not see): `python -m tests.ptx.<module> ARCH...` prints one JSON line per ARCH."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


ARCHS = (80, 90)  # the targets tests/ptx checks
BATCHED = {"compile_fused", "compile_tma"}  # modules whose tests read every target: one process compiles them all
_compiled: dict[tuple[str, int], dict] = {}


def compiled(module: str, arch: int, cache_dir: Path):
    """The JSON that `tests.ptx.<module>` prints for sm_<arch>, with syncopy's cache in `cache_dir`.
    For a module of BATCHED the first call compiles every target of ARCHS in one process (one
    interpreter start and one import of torch, triton and syncopy where a process each cost seconds)."""
    if (module, arch) not in _compiled:
        archs = ARCHS if module in BATCHED and arch in ARCHS else (arch,)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["SYNCOPY_CACHE_DIR"] = str(cache_dir)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run([sys.executable, "-m", f"tests.ptx.{module}", *map(str, archs)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = proc.stdout.strip().splitlines()[-len(archs):]  # one JSON line per target, in order
        assert len(lines) == len(archs), proc.stdout[-3000:]
        _compiled.update({(module, a): json.loads(line) for a, line in zip(archs, lines)})
    return _compiled[(module, arch)]
