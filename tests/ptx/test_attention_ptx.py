"""ag_attention for sm_90 (issue 13 item 4): `syncopy compile` of the fused attention (K and V listed,
waits inside its key/value loop, iterations in arrival order) compiles with triton.compile, no GPU:
its waits are acquire polls at system scope inside loops, and its two dots still run on wgmma."""
import os
import subprocess
import sys
from pathlib import Path

from syncopy.emit.ptx import acquire_polls

ROOT = Path(__file__).resolve().parents[2]


def test_ag_attention_compiles_for_sm_90_with_acquire_polls_and_wgmma(tmp_path):
    out = tmp_path / "ag_attention.ptx"
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "0"}
    env["PYTHONPATH"] = str(ROOT)
    env["SYNCOPY_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "syncopy.cli", "compile", "ag_attention", "--arch", "sm_90", "-o", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ptx = out.read_text()
    polls = acquire_polls(ptx)
    # One wait for K's chunks and one for V's per iteration, each a fast poll and a bounded spin.
    assert len(polls) >= 4 and all(".acquire" in p.text and ".sys" in p.text for p in polls)
    assert "wgmma.mma_async" in ptx
    assert "ag_attention for sm_90:" in proc.stderr
