"""Triton's interpreter where no GPU exists (issue 27, item 8): `import syncopy` outside make, with
TRITON_INTERPRET unset, sets it to 1 and says so in one line of stderr when triton is not imported
yet; refuses in one syncopy line when triton was imported first; leaves a value the user set alone;
and imports neither torch nor triton to decide. Each case is a fresh interpreter (a subprocess)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from syncopy import _interpret

ROOT = Path(__file__).resolve().parents[2]

REPORT = ("import json, os, sys; print(json.dumps({'interpret': os.environ.get('TRITON_INTERPRET'), "
          "'torch': 'torch' in sys.modules, 'triton': 'triton' in sys.modules}))")


def _python(code: str, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    environment.update(PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300)


needs_no_gpu = pytest.mark.skipif(_interpret.gpu_usable(), reason="a GPU is usable here: syncopy rightly leaves Triton alone")


@needs_no_gpu
def test_import_sets_the_interpreter_once_without_importing_torch_or_triton():
    done = _python(f"import syncopy; {REPORT}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"interpret": "1", "torch": False, "triton": False}
    notes = [line for line in done.stderr.splitlines() if line.startswith("syncopy:")]
    assert notes == [_interpret.NOTE]


@needs_no_gpu
def test_a_kernel_decorated_after_runs_under_the_interpreter():
    done = _python("import syncopy, triton, triton.language as tl, torch\n"
                   "@triton.jit\ndef k(X):\n    tl.store(X + tl.arange(0, 4), tl.zeros([4], dtype=tl.float32) + 1)\n"
                   "x = torch.zeros(4); k[(1,)](x); print(x.tolist())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[1.0, 1.0, 1.0, 1.0]"


@needs_no_gpu
def test_triton_imported_first_is_refused_in_one_syncopy_line():
    done = _python("import triton\ntry:\n    import syncopy\nexcept Exception as e:\n"
                   "    print(type(e).__name__); print(str(e)); print(repr(__import__('os').environ.get('TRITON_INTERPRET')))")
    assert done.returncode == 0, done.stderr
    kind, message, interpret = done.stdout.splitlines()[-3:]
    assert kind == "SyncopyError" and message == _interpret.TRITON_FIRST and interpret == "None"
    assert "TRITON_INTERPRET=1" in message and "\n" not in message


@pytest.mark.parametrize("value", ["0", "1"])
def test_a_value_the_user_set_is_left_alone(value):
    done = _python(f"import syncopy; {REPORT}", TRITON_INTERPRET=value)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["interpret"] == value
    assert not [line for line in done.stderr.splitlines() if line.startswith("syncopy:")]


def test_a_usable_gpu_is_left_to_triton(monkeypatch):
    """Where a GPU is usable, nothing is set (the signal itself is stubbed: no GPU needed)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(_interpret, "gpu_usable", lambda: True)
    _interpret.choose()
    assert "TRITON_INTERPRET" not in os.environ


def test_the_installed_torch_build_is_read_without_importing_it():
    done = _python("from syncopy import _interpret; import sys; "
                   "print(_interpret._torch_without_gpu_build(), 'torch' in sys.modules)", TRITON_INTERPRET="1")
    assert done.returncode == 0, done.stderr
    built, loaded = done.stdout.split()
    import torch

    assert built == str(torch.version.cuda is None and torch.version.hip is None) and loaded == "False"
