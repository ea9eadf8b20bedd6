"""FA2's forward fused (tests/kernels/attention_styles.py, `tensor: [K, V]`) compiles for sm_90 with
either value of its EVEN_N constexpr (issue 31 item 7): the waits' guarded ranges compile to one arm
each, and a loop's first corner (`tl.multiple_of(start_n, BLOCK_N)` at 0) is a plain 0, which compiled
Triton accepts (a hint on a literal is refused)."""
import os
import subprocess
import sys
from pathlib import Path

from syncopy.emit.ptx import acquire_polls

ROOT = Path(__file__).resolve().parents[2]
SIGNATURE = ",".join(f"{p}:*fp16" for p in ("Q", "K", "V", "Out")) + ",softmax_scale:fp32," + ",".join(
    f"{p}:i32" for p in ("stride_qm", "stride_qh", "stride_kn", "stride_kh", "stride_vn", "stride_vh", "stride_om",
                         "stride_oh", "seqlen_q", "seqlen_k", "headdim"))


def test_fa2_compiles_for_sm_90_with_either_arm_of_its_constexpr_branch(tmp_path):
    schedule = tmp_path / "fa2.yaml"
    schedule.write_text("version: 1\npattern: all_gather\nkernel: fa2_forward\ntensor: [K, V]\ndim: 0\nchunks_per_rank: 2\n")
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "0"}
    env["PYTHONPATH"] = str(ROOT)
    env["SYNCOPY_CACHE_DIR"] = str(tmp_path / "cache")
    ptx = {}
    for even in (0, 1):
        out = tmp_path / f"fa2_{even}.ptx"
        const = f"IS_CAUSAL=0,BLOCK_HEADDIM=64,EVEN_M=1,EVEN_N={even},EVEN_HEADDIM=1,BLOCK_M=64,BLOCK_N=64"
        proc = subprocess.run([sys.executable, "-m", "syncopy.cli", "compile", "tests/kernels/attention_styles.py",
                               "--schedule", str(schedule), "--signature", SIGNATURE, "--const", const, "-o", str(out)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        ptx[even] = out.read_text()
        polls = acquire_polls(ptx[even])
        assert len(polls) >= 2 and all(".acquire" in p.text and ".sys" in p.text for p in polls)
    assert ptx[0] != ptx[1]  # one arm each
