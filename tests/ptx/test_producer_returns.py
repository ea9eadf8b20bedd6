"""Producers whose tiles return before their store compile for sm_90 with a count on both paths:
the early return (over the tile's table range) and the announcement after the stores."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tiles_that_return_early_count_themselves_in_compiled_code(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["SYNCOPY_CACHE_DIR"] = str(tmp_path)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "tests.ptx.compile_producers", "90"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # Two call sites of notify_chunks (each a counter add and a flag release) where a tile may return early.
    assert got["lower_triangular"] == got["skip_by_flag"] == {"counts": 2, "flags": 2}, got
    assert got["rows_by_index"] == {"counts": 1, "flags": 1}, got
