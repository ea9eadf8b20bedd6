"""The kernels of tests/kernels/listed.py fused with their lists reversed (issue 30 B) compile for
sm_90 with triton.compile, no GPU, checked or not: one bounded acquire wait (a fast poll and a
spin) per listed tensor at least, and the async-proxy fence of the tensor read through a tensor
descriptor (swiglu_desc, whose first read is through pointers)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.world.listed_workers import CASES

ROOT = Path(__file__).resolve().parents[2]


def test_listed_kernels_compile_for_sm_90_with_a_wait_per_listed_tensor(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "0"}
    env["PYTHONPATH"] = str(ROOT)
    env["SYNCOPY_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "tests.ptx.compile_listed"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(got) == {f"{k} checked={c}" for k in CASES for c in (False, True)}
    for label, r in got.items():
        assert r["polls"] >= 2 * r["listed"], (label, r)
        assert (r["fences"] > 0) == label.startswith("swiglu_desc"), (label, r)
