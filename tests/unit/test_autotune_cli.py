"""The CLI on an autotuned kernel (issue 13, item 1): `syncopy transform` keeps the @triton.autotune
decorator (the runtime plays its part, runtime/launch/tuning.py); `syncopy compile` compiles one of its
configs, `--config I` (default: the first, as the interpreter runs it), with the config's
meta-parameters and launch options."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from syncopy.cli import main

KERNEL = Path(__file__).parents[1] / "kernels" / "autotuned.py"
SCHEDULE = """\
version: 1
pattern: all_gather
kernel: matmul_kernel
tensor: a_ptr
dim: 0
chunks_per_rank: 2
order: ring
"""
SIGNATURE = ("a_ptr:*fp16,b_ptr:*fp16,c_ptr:*fp16,M:i32,N:i32,K:i32,stride_am:i32,stride_ak:i32,stride_bk:i32,stride_bn:i32,"
             "stride_cm:i32,stride_cn:i32")


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text(SCHEDULE)
    return tmp_path


def test_transform_keeps_the_autotune_decorator(work, capsys):
    assert main(["transform", str(KERNEL), "-s", "s.yaml", "-o", "out.py"]) == 0
    out, text = Path("out.py").read_text(), KERNEL.read_text()
    decorators = text[text.index("@triton.autotune("):text.index("def matmul_kernel(")]
    assert decorators.startswith("@triton.autotune(\n    configs=get_autotune_config(),\n    key=['M', 'N', 'K'],\n)\n@triton.jit\n")
    assert decorators in out
    compile(out, "out.py", "exec")


def _compile(*extra) -> tuple[int, str, str]:
    # A process of its own without the interpreter (one that ran kernels interpreted cannot compile them).
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "0"}
    argv = ["compile", str(KERNEL), "--schedule", "s.yaml", "--signature", SIGNATURE, "--const", "ACTIVATION=''", *extra]
    proc = subprocess.run([sys.executable, "-m", "syncopy.cli", *argv], env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_compile_takes_the_first_config_or_the_one_named(work):
    rc, first, err = _compile()
    assert rc == 0, err
    rc, second, err = _compile("--config", "1")
    assert rc == 0, err
    # The configs' num_warps (4, then 2) become the kernel's thread count; their block sizes its loads.
    assert re.findall(r"\.reqntid (\d+)", first) == ["128"] and re.findall(r"\.reqntid (\d+)", second) == ["64"]
    assert err.strip().endswith("acquire polls inside loops, 1 release ops")


@pytest.mark.parametrize(("extra", "expected"), [
    (["--config", "2"], "--config 2: kernel matmul_kernel has 2 autotune configs; give an index 0..1"),
    (["--config", "0", "--const", "BLOCK_SIZE_M=64"],
     "--const: BLOCK_SIZE_M is set by the autotune config being compiled; pick another with --config"),
])
def test_compile_config_mistakes_are_one_line(work, capsys, monkeypatch, extra, expected):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    argv = ["compile", str(KERNEL), "--schedule", "s.yaml", "--signature", SIGNATURE, "--const", "ACTIVATION=''", *extra]
    if "--const" in extra:  # one --const option: the last one given wins in argparse, so join them
        argv = argv[:-4] + ["--const", "ACTIVATION='',BLOCK_SIZE_M=64", "--config", "0"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == expected + "\n"


def test_config_for_a_kernel_without_autotune_is_one_line(work, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["compile", "ag_gemm", "--config", "1"]) == 2
    assert capsys.readouterr().err == "--config 1: template ag_gemm has no @triton.autotune configs; drop --config\n"
