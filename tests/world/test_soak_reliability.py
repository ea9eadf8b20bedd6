"""benchmarks/reliability.py on one case (a rank of a reduce-scatter killed mid-launch): the report
runs it in a bounded subprocess, finds the fault, and its JSON totals say 0 hangs, 0 wrong results
and 0 processes left behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.world
def test_reliability_report_of_one_case_has_its_totals(tmp_path):
    out = tmp_path / "rel.json"
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "reliability.py"), "--templates", "gemm_rs", "--worlds", "2",
                           "--kinds", "kill", "--json", str(out)], env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["totals"] == {"cases": 1, "must_detect": 1, "detected": 1, "as_must": 1, "hangs": 0, "wrong": 0,
                                "leftover_processes": 0}
    row, = report["rows"]
    assert (row["template"], row["world"], row["fault"], row["inject"], row["outcome"]) == ("gemm_rs", 2, "kill", "kill=1:0", "died")
    # Detected in bounded time: from the killed rank's launch start to the launcher's report of it.
    assert 0 < row["detect_s"] < row["wall_s"], row
    assert proc.stdout.splitlines()[-1] == ("1 cases: 1/1 faults detected, 1/1 as they must, 0 hangs, 0 wrong results, "
                                            "0 processes left behind")
    assert "[1/1 " in proc.stderr  # progress, a line per case
