"""bf16 on CPU worlds (issue 13, item 8). The Triton interpreter keeps bfloat16 as its bit patterns
and computes on those, in tl.dot and in plain arithmetic alike (the local kernel too: relative
errors of 1e9 and more), so a bf16 launch under the interpreter is refused in one line instead of
reporting WRONG; compiled for a GPU, bf16 is as any dtype (its PTX below)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import syncopy
from syncopy.errors import LaunchError
from tests.kernels import autotuned

REPO = Path(__file__).parents[2]
AG_GEMM = REPO / "templates" / "ag_gemm"
MESSAGE = ("launch of 'softmax_rows': argument 'out_ptr' is bfloat16, which the Triton interpreter (TRITON_INTERPRET=1) "
           "computes on as raw bits, so every result would be wrong; use float32 or float16 on CPU worlds (bf16 runs on GPUs)")


def _softmax_bind(dtype):
    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "in_ptr", "dim": 0, "chunks_per_rank": 2})(autotuned.softmax_rows)
    x, y = torch.zeros(4, 8, dtype=dtype), torch.zeros(8, 8, dtype=dtype)
    return fused.binder.bind((y, x, 8, 8, 8, 8), {"BLOCK_SIZE": 8, "num_stages": 2})


def test_bf16_under_the_interpreter_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(LaunchError) as info:
        _softmax_bind(torch.bfloat16)
    assert str(info.value) == MESSAGE
    _softmax_bind(torch.float16)  # fp16 and fp32 compute right under the interpreter


def test_bf16_compiled_is_not_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    _softmax_bind(torch.bfloat16)


def test_syncopy_run_bf16_on_cpu_is_one_line_before_any_rank_starts(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "syncopy.cli", "run", "ag_gemm", "--world", "2", "--dtype", "bf16", "--iters", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-3000:]
    assert proc.stderr == ("--dtype bf16: `syncopy run` runs its ranks' kernels under the Triton interpreter, which computes "
                           "bfloat16 on raw bits (every result would be wrong); use fp32 or fp16 (bf16 runs on GPUs)\n")


def test_bf16_kernel_compiles_for_sm_90(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "0"}
    env["PYTHONPATH"] = str(REPO)
    signature = ("A:*bf16,B:*bf16,C:*bf16,M:i32,N:i32,K:i32,stride_am:i32,stride_ak:i32,stride_bk:i32,stride_bn:i32,"
                 "stride_cm:i32,stride_cn:i32")
    proc = subprocess.run([sys.executable, "-m", "syncopy.cli", "compile", str(AG_GEMM / "kernel.py"), "--schedule",
                           str(AG_GEMM / "schedule.yaml"), "--signature", signature,
                           "--const", "BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,GROUP_M=4", "-o", "ag.ptx"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ptx = (tmp_path / "ag.ptx").read_text()
    assert re.search(r"\bmma\.sync\.aligned\.\S*\.bf16\.bf16\b|\bwgmma\.\S*\.bf16\.bf16\b", ptx), "no bf16 MMA in the PTX"
    assert re.search(r"[1-9]\d* acquire polls inside loops", proc.stderr), proc.stderr
