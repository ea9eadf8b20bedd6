"""The `syncopy` command's arguments: every user mistake is exit 2, one line on stderr naming the option
or key and what to change, no traceback, nothing written; `--help` documents every argument.

Mistakes that `syncopy run` and `syncopy demo` can see before starting ranks are checked with the
launchers replaced by a function that fails the test; two tests start a real CPU world of 2 ranks.
"""
from __future__ import annotations

import argparse
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from syncopy.cli import build_parser, main
from tests.unit.test_cli import SCHEDULE  # the same kernel name and tensor

REPO = Path(__file__).resolve().parents[2]
AG_GEMM = REPO / "templates" / "ag_gemm"

KERNEL = textwrap.dedent(
    '''\
    import triton
    import triton.language as tl


    @triton.jit
    def scale_blocks(src, dst, count, BLOCK: tl.constexpr):
        blk = tl.program_id(0)
        at = blk * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + at, tl.load(src + at, mask=at < count) * 2.0, mask=at < count)
    '''
)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kern.py").write_text(KERNEL)
    (tmp_path / "s.yaml").write_text(SCHEDULE)
    return tmp_path


@pytest.fixture
def no_ranks(monkeypatch):
    """Fail the test if a command starts a world: these mistakes must be caught before."""
    import torch.distributed.launcher.api as launcher

    import syncopy.runtime.worlds.processes as world

    def started(*args, **kwargs):
        raise AssertionError("ranks were started for a mistake the parent can see")

    monkeypatch.setattr(launcher, "elastic_launch", started)
    monkeypatch.setattr(world, "spawn", started)


def _fails(argv, capsys) -> str:
    """Run in this process, expect a clean failure, return the one stderr line."""
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert captured.out == ""
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err.rstrip("\n")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "syncopy.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# --- expand: auto is the planner's, at launch -----------------------------------------------------

@pytest.mark.parametrize(("edit", "expected"), [
    pytest.param(("order: ring", "order: auto"),
                 "s.yaml:7: order: auto is resolved at launch by the planner, so there is nothing fixed to expand; "
                 "write a named order (ring, local_first, bidirectional_ring) or a list of peer offsets to expand",
                 id="order-auto"),
    pytest.param(("chunks_per_rank: 2", "chunks_per_rank: auto"),
                 "s.yaml:6: chunks_per_rank: auto is resolved at launch by the planner, so there is nothing fixed to expand; "
                 "write a chunk count (e.g. chunks_per_rank: 2) to expand",
                 id="chunks-auto"),
])
def test_expand_of_an_auto_schedule_names_the_key(work, capsys, edit, expected):
    (work / "s.yaml").write_text(SCHEDULE.replace(*edit))
    assert _fails(["expand", "s.yaml", "--world", "2"], capsys) == expected


def test_expand_with_both_auto_names_the_first_and_mentions_the_other(work, capsys):
    (work / "s.yaml").write_text(SCHEDULE.replace("chunks_per_rank: 2", "chunks_per_rank: auto").replace("order: ring", "order: auto"))
    assert _fails(["expand", "s.yaml", "--world", "2"], capsys).startswith(
        "s.yaml:6: chunks_per_rank: auto is resolved at launch by the planner, so there is nothing fixed to expand (order is auto too); ")


# --- run: what the parent can see, before any rank starts -----------------------------------------

RUN_MISTAKES = [
    pytest.param(["--order", "1,1"], "--order 1,1: list each peer offset 1..1 exactly once for --world 2 (e.g. 1), or use a named order",
                 id="order-not-a-permutation"),
    pytest.param(["--world", "4", "--order", "1,2"],
                 "--order 1,2: list each peer offset 1..3 exactly once for --world 4 (e.g. 1,2,3), or use a named order",
                 id="order-too-short"),
    pytest.param(["--backend", "foo"], "--backend foo: unknown backend; use auto or gloo", id="backend-unknown"),
    pytest.param(["--backend", "p2p"], "--backend p2p: moves CUDA tensors, but `syncopy run` uses CPU ranks; use auto or gloo",
                 id="backend-p2p-on-cpu"),
    pytest.param(["--shape", "0,32,32"],
                 "--shape 0,32,32: every dimension must be at least 1 (a zero-size problem checks nothing); give positive M,N,K",
                 id="shape-zero"),
    pytest.param(["--shape", "4,32,-1"],
                 "--shape 4,32,-1: every dimension must be at least 1 (a zero-size problem checks nothing); give positive M,N,K",
                 id="shape-negative"),
    pytest.param(["--iters", "0"], "--iters 0: run the kernel at least once; pass --iters N with N >= 1", id="iters-zero"),
    pytest.param(["--world", "0"], "--world 0: a world has at least one rank; pass --world N with N >= 1", id="world-zero"),
    pytest.param(["--world", "-1"], "--world -1: a world has at least one rank; pass --world N with N >= 1", id="world-negative"),
]


@pytest.mark.parametrize(("extra", "expected"), RUN_MISTAKES)
def test_run_mistake_is_one_line_before_any_rank_starts(no_ranks, capsys, extra, expected):
    assert _fails(["run", "ag_gemm", *extra], capsys) == expected


def test_run_shape_k_may_be_zero_only_where_the_template_ignores_it(no_ranks, capsys):
    assert _fails(["run", "ag_rmsnorm", "--shape", "0,48,0"], capsys) == (
        "--shape 0,48,0: give M and N of at least 1 (K is unused by ag_rmsnorm: 0 or more)")


@pytest.mark.world
def test_run_error_found_by_the_ranks_is_one_line_without_the_launchers_traceback(tmp_path):
    proc = _cli("run", "ag_gemm", "--world", "2", "--shape", "4,32,32", "--chunks", "8", "--iters", "1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stdout == ""
    # Every rank finds it; whichever reports first is named (the launcher then stops the others).
    assert re.fullmatch(r"rank [01]: chunks_per_rank is 8 but each shard of 'A' has only 4 rows along dim 0; "
                        r"use chunks_per_rank <= 4\n", proc.stderr), proc.stderr


@pytest.mark.world
def test_run_prints_the_problem_size_and_the_planners_choice(tmp_path):
    proc = _cli("run", "ag_gemm", "--world", "2", "--shape", "4,32,32", "--chunks", "auto", "--order", "auto", "--iters", "1",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "ag_gemm on 2 CPU rank(s), fp32: inputs per rank a 4x32, b 32x32; output 8x32 per rank"
    assert re.fullmatch(r"planner \(cpu-gloo, ag_gemm M,N,K=8,32,32 fp32, world 2\): chunks_per_rank [1-4], order \S+; .*", lines[1])
    assert lines[-1] == "ag_gemm on 2 rank(s): correct"


# --- compile: a kernel file's --signature and --const ---------------------------------------------

SIGNATURE = ("A:*fp16,B:*fp16,C:*fp16,M:i32,N:i32,K:i32,stride_am:i32,stride_ak:i32,stride_bk:i32,stride_bn:i32,"
             "stride_cm:i32,stride_cn:i32")
PARAMS = "A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn"
TYPES = "i1, i8, i16, i32, i64, u8, u16, u32, u64, fp8e4nv, fp8e5, fp16, bf16, fp32, fp64"

COMPILE_MISTAKES = [
    pytest.param(["--signature", "A:*fp16"],
                 "--signature: no type for B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn; "
                 f"give name:type for every parameter of ag_gemm_kernel: {PARAMS}", id="signature-partial"),
    pytest.param(["--signature", "A:*fp99"],
                 f"--signature: A:*fp99: unknown type '*fp99'; use one of {TYPES}, with a leading * for a pointer (e.g. *fp16)",
                 id="signature-unknown-type"),
    pytest.param(["--signature", "A*fp16"], "--signature: 'A*fp16' is not name:type; write e.g. --signature A:*fp16,M:i32",
                 id="signature-no-colon"),
    pytest.param(["--signature", "Z:i32"], f"--signature: ag_gemm_kernel has no parameter 'Z'; its parameters are {PARAMS}",
                 id="signature-unknown-parameter"),
    pytest.param(["--signature", "BLOCK_M:i32"],
                 "--signature: 'BLOCK_M' of ag_gemm_kernel is a tl.constexpr; give its value with --const BLOCK_M=INT",
                 id="signature-constexpr"),
    pytest.param(["--signature", SIGNATURE],
                 "--const: no value for BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M; give NAME=INT for every tl.constexpr parameter of "
                 "ag_gemm_kernel: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M", id="const-missing"),
    pytest.param(["--signature", SIGNATURE, "--const", "BLOCK_M=x"],
                 "--const: BLOCK_M=x: not an integer; give NAME=INT, e.g. BLOCK_M=64 (or a quoted string)", id="const-not-an-int"),
    pytest.param(["--signature", SIGNATURE, "--const", "BLOCK_Q=1"],
                 "--const: ag_gemm_kernel has no tl.constexpr parameter 'BLOCK_Q'; its constexpr parameters are "
                 "BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M", id="const-unknown"),
]


@pytest.mark.parametrize(("extra", "expected"), COMPILE_MISTAKES)
def test_compile_kernel_file_argument_mistake_is_one_line(capsys, monkeypatch, extra, expected):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compile here, not in a child process
    argv = ["compile", str(AG_GEMM / "kernel.py"), "--schedule", str(AG_GEMM / "schedule.yaml"), *extra]
    assert _fails(argv, capsys) == expected


def test_compile_missing_kernel_file_is_one_line(work, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert _fails(["compile", "nope.py", "--schedule", "s.yaml", "--signature", "src:*fp32"], capsys) == (
        "nope.py: cannot read the kernel file: No such file; check the path")


def test_compile_output_in_a_missing_directory_is_one_line_and_creates_nothing(work, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert _fails(["compile", "ag_gemm", "-o", "missing/dir/ag.ptx"], capsys) == (
        "-o missing/dir/ag.ptx: the directory 'missing/dir' does not exist; create it first or choose another path")
    assert not (work / "missing").exists()


# --- demo -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "expected"), [
    pytest.param(["--world", "0"], "--world 0: a world has at least one rank; pass --world N with N >= 1", id="world-zero"),
    pytest.param(["--chunks", "0"], "--chunks 0: each rank's shard has 45 rows; give a chunk count from 1 to 45", id="chunks-zero"),
    pytest.param(["--world", "1", "--chunks", "1000"], "--chunks 1000: each rank's shard has 45 rows; give a chunk count from 1 to 45",
                 id="chunks-above-the-rows"),
    pytest.param(["--latency-ms", "-1"], "--latency-ms -1: a link latency cannot be negative; give 0 or more", id="latency-negative"),
])
def test_demo_mistake_is_one_line_before_any_rank_starts(no_ranks, capsys, extra, expected):
    assert _fails(["demo", *extra], capsys) == expected


# --- transform -o, --diff, --dump-dir -------------------------------------------------------------

@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_output_gets_the_normal_file_mode(work, capsys, umask_022):
    assert main(["transform", "kern.py", "-s", "s.yaml", "-o", "fused.py"]) == 0
    assert stat.S_IMODE((work / "fused.py").stat().st_mode) == 0o644


def test_output_keeps_the_mode_of_the_file_it_replaces(work, capsys, umask_022):
    (work / "fused.py").write_text("previous\n")
    (work / "fused.py").chmod(0o640)
    assert main(["transform", "kern.py", "-s", "s.yaml", "-o", "fused.py"]) == 0
    assert stat.S_IMODE((work / "fused.py").stat().st_mode) == 0o640
    assert (work / "fused.py").read_text() != "previous\n"


@pytest.mark.parametrize("diff", [[], ["--diff"]], ids=["file", "diff"])
def test_output_in_a_missing_directory_is_one_line_and_creates_nothing(work, capsys, diff):
    assert _fails(["transform", "kern.py", "-s", "s.yaml", *diff, "-o", "missing/dir/out.py"], capsys) == (
        "-o missing/dir/out.py: the directory 'missing/dir' does not exist; create it first or choose another path")
    assert sorted(p.name for p in work.iterdir()) == ["kern.py", "s.yaml"]


def test_output_under_a_file_is_one_line(work, capsys):
    (work / "afile").write_text("")
    assert _fails(["transform", "kern.py", "-s", "s.yaml", "-o", "afile/out.py"], capsys) == (
        "-o afile/out.py: 'afile' is not a directory; choose another path")


def test_diff_with_output_writes_only_the_diff_there(work, capsys):
    assert main(["transform", "kern.py", "-s", "s.yaml", "--diff", "-o", "d.diff"]) == 0
    assert capsys.readouterr().out == ""
    diff = (work / "d.diff").read_text().splitlines()
    assert diff[:2] == ["--- kern.py", "+++ kern.py (fused)"] and diff[2].startswith("@@ ")
    assert all(line[:1] in " +-@" for line in diff[2:])
    assert "+import syncopy.device as syncopy_device" in diff


def test_dump_dir_that_is_a_file_is_one_line_and_writes_nothing(work, capsys):
    (work / "afile").write_text("keep\n")
    assert _fails(["transform", "kern.py", "-s", "s.yaml", "-o", "fused.py", "--dump-dir", "afile"], capsys) == (
        "--dump-dir afile: is a file, not a directory; choose a directory path (it is created if missing)")
    assert (work / "afile").read_text() == "keep\n"
    assert not (work / "fused.py").exists()


# --- --help ---------------------------------------------------------------------------------------

def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # unwrapped


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_argument_has_help(command):
    missing = [a.dest for a in _commands()[command]._actions if not a.help]
    assert missing == []


def test_help_shows_defaults_and_run_backend_choices(capsys):
    run = _help("run", capsys)
    assert "--world N number of CPU ranks (default: 2)" in run
    assert "--iters N launches per rank, each checked against torch (default: 2)" in run
    assert "[--backend {auto,gloo}]" in run and "(default: auto)" in run
    assert "--arch {sm_80,sm_86,sm_89,sm_90} the NVIDIA target (default: sm_90)" in _help("compile", capsys)
    assert "--chunks N chunks per rank, 1 to 45 (the rows of each rank's shard) (default: 2)" in _help("demo", capsys)


def test_run_and_plan_agree_on_dtype_order_and_the_template_argument(capsys):
    run, plan, comp = _help("run", capsys), _help("plan", capsys), _help("compile", capsys)
    assert "--dtype {bf16,fp16,fp32}" in run and "--dtype {bf16,fp16,fp32}" in plan
    assert re.search(r"\] NAME .* positional arguments: NAME ", run) and re.search(r"\] NAME .* positional arguments: NAME ", plan)
    assert "NAME|KERNEL.py template NAME" in comp


def test_shape_help_says_what_m_is_in_run_and_in_plan(capsys):
    assert "M is the rows of ONE rank's shard for ag_gemm" in _help("run", capsys)
    assert "for all-gather templates (ag_gemm, ag_gemm_persistent, ag_rmsnorm) the gathered rows" in _help("plan", capsys)


@pytest.mark.parametrize("argv,line", [
    (["run", "ag_gemm", "--world", "abc"], "syncopy run: argument --world: invalid int value: 'abc'; see `syncopy run --help`"),
    (["transform"], "syncopy transform: the following arguments are required: KERNEL.py, --schedule/-s; see `syncopy transform --help`"),
    ([], "syncopy: the following arguments are required: COMMAND; see `syncopy --help`"),
])
def test_argparse_mistakes_are_one_line_too(argv, line, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err == line + "\n"
