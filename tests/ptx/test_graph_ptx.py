"""The device-epoch advance (runtime/graph.py) compiles for sm_80 and sm_90 (no GPU needed): one
program that steps the epoch, stashes and clears the error words and raises the own flags."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys
from syncopy.emit.ptx import compile_ptx
from syncopy.runtime.graph import advance_epoch
print(compile_ptx(advance_epoch, {"ctx": "*i64", "signals": "*i32", "words": "*i32", "own_lo": "i32"},
                  {"OWN": 3, "OWN_POW2": 4}, int(sys.argv[1])))
"""


@pytest.mark.parametrize("arch", [80, 90])
def test_advance_epoch_compiles_to_plain_loads_and_stores(arch, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(arch)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ptx = proc.stdout
    assert "st.global.b64" in ptx  # the epoch word
    assert "ld.global.acquire" not in ptx and "atom." not in ptx  # ordered by its stream, not by the memory model
