"""benchmarks/overlap_cpu.py: its --help, and a tiny smoke run's JSON (no timed assertions)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "overlap_cpu.py"

pytestmark = pytest.mark.world


def _env() -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def test_help_lists_the_options():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, env=_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    for option in ("--json", "--reps", "--world", "--chunks", "--balance"):
        assert option in out.stdout


def test_smoke_run_writes_a_calibration_record(tmp_path):
    from syncopy.planner.calibrate import load_measurements

    path = tmp_path / "overlap.json"
    cmd = [sys.executable, str(SCRIPT), "--reps", "1", "--calib-reps", "1", "--shape", "64,32,32", "--chunks", "2",
           "--json", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)  # a hang fails, never skips
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(path.read_text())
    for key in ("sequential_s", "stream_overlap_s", "fused_s"):
        assert data[key] > 0
    assert data["world"] == 2 and data["shape"] == [64, 32, 32] and data["chunks_per_rank"] == 2
    records, hardware = load_measurements(path)
    assert hardware == "cpu-gloo"
    assert records[0].fused_s == data["fused_s"] and records[0].link is not None
    # The world-1 record that tile_sync_s is fitted on: all of A through the local kernel and through
    # the fused kernel with every chunk present, at the run's chunk count.
    present = [r for r in records if r.world == 1 and r.fused_s is not None]
    assert len(present) == 1
    assert (present[0].shape, present[0].chunks_per_rank) == ((64, 32, 32), 2)
    assert present[0].sequential_s > 0
