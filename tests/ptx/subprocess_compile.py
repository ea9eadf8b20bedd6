"""Compile fused kernels for a GPU target in a fresh process (the test session runs the interpreter,
which `triton.compile` must not see): `python -m tests.ptx.<module> ARCH` prints one JSON line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def compiled(module: str, arch: int, cache_dir: Path):
    """The JSON that `tests.ptx.<module>` prints for sm_<arch>, with syncopy's cache in `cache_dir`."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["SYNCOPY_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", f"tests.ptx.{module}", str(arch)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
