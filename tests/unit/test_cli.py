"""The `syncopy` command: transform / check / schema.

Every user mistake: exit status 2, exactly one line on stderr (`where: what to change`), nothing
on stdout, no traceback, no output file. Success: stdout without -o, an atomic write with -o, a
unified diff with --diff, and the input file never modified.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from syncopy.cli import main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"

KERNEL = textwrap.dedent(
    '''\
    """Row-block scaling, one program per block of rows."""
    import triton
    import triton.language as tl


    @triton.jit
    def scale_blocks(src, dst, count, BLOCK: tl.constexpr):
        blk = tl.program_id(0)
        at = blk * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + at, tl.load(src + at, mask=at < count) * 2.0, mask=at < count)


    @triton.jit
    def other_kernel(src, dst):
        tl.store(dst, tl.load(src))
    '''
)
SCHEDULE = textwrap.dedent(
    """\
    version: 1
    pattern: all_gather
    kernel: scale_blocks
    tensor: src
    dim: 0
    chunks_per_rank: 2
    order: ring
    """
)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kern.py").write_text(KERNEL)
    (tmp_path / "s.yaml").write_text(SCHEDULE)
    return tmp_path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fails(argv, capsys, out: Path | None = None) -> str:
    """Run, expect a clean failure, return the one stderr line."""
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.out == ""
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    if out is not None:
        assert not out.exists()
    for folder in {Path.cwd(), *([out.parent] if out is not None and out.parent.exists() else [])}:
        assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    return captured.err.rstrip("\n")


# --- transform errors: one line, exit 2, nothing written ---------------------------------------

TRANSFORM_ERRORS = [
    pytest.param(
        {"s.yaml": SCHEDULE.replace("kernel: scale_blocks", "kernel: scale_block")},
        "kern.py:1:1: kernel 'scale_block' is not in this file; the @triton.jit kernels here are: scale_blocks, other_kernel; "
        "set `kernel:` to one of them",
        id="unknown-kernel-lists-kernels",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE.replace("tensor: src", "tensor: source")},
        "kern.py:7:1: kernel 'scale_blocks' has no argument 'source'; its arguments are src, dst, count, BLOCK; "
        "set `tensor:` to the communicated one",
        id="unknown-argument",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE.replace("chunks_per_rank: 2", "chunks_per_rank: 0")},
        "s.yaml:6: chunks_per_rank: must be a positive integer or auto (got 0); write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
        id="chunks-zero",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE.replace("chunks_per_rank: 2", "chunks_per_rank: -1")},
        "s.yaml:6: chunks_per_rank: must be a positive integer or auto (got -1); write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
        id="chunks-negative",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE.replace("all_gather", "allgather")},
        "s.yaml:2: pattern: 'allgather' is not allowed; use one of all_gather, reduce_scatter, all_reduce, all_to_all",
        id="unknown-pattern",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE.replace("all_gather", "reduce_scatter")},
        "kern.py:7:1: kernel 'scale_blocks' never stores into 'src', so no program would announce its chunks; check `tensor:` (for "
        "reduce_scatter and all_reduce it is the output the kernel writes) or add `binding: {rows: <expression>}` to the schedule, "
        "giving in the kernel's names the indices along dim 0 of 'src' that one program writes (e.g. pid_m * BLOCK_M + tl.arange(0, BLOCK_M))",
        id="producer-on-an-input",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE.replace("dim: 0", "dim: [0")},
        "s.yaml:6: YAML syntax error: expected ',' or ']', but got ':'; fix the syntax",
        id="yaml-syntax",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE.replace("order: ring", "order: [1, 3]")},
        "s.yaml:7: order: explicit order [1, 3] is not a permutation of the peer offsets 1..2; list every peer offset exactly once",
        id="order-not-a-permutation",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE + "overlap: true\n"},
        "s.yaml:8: overlap: unknown key; the schedule keys are version, pattern, kernel, tensor, dim, chunks_per_rank, order, binding",
        id="unknown-key",
    ),
    pytest.param(
        {"s.yaml": SCHEDULE.replace("kernel: scale_blocks\n", "")},
        "s.yaml: kernel: missing required key for the CLI; add `kernel: NAME` (the @triton.jit function to transform)",
        id="cli-needs-a-kernel-name",
    ),
    pytest.param(
        {"kern.py": KERNEL.replace("    tl.store(dst, tl.load(src))", "    tl.store(dst, tl.load(src)")},
        "kern.py:",
        id="python-syntax-error",
    ),
    pytest.param(
        {"kern.py": KERNEL.replace("tl.load(src + at, mask=at < count)", "tl.load(tl.make_block_ptr(src, (count,), (1,), (blk * BLOCK,), (BLOCK,), (0,)))")},
        "kern.py:10:32: 'src' is read through tl.make_block_ptr, but Triton ",
        id="inference-failure-names-the-key",
    ),
    pytest.param(
        {"kern.py": KERNEL.replace("tl.store(dst + at", "tl.store(src + at")},
        "kern.py:10:5: the kernel writes into 'src' (tl.store); an all-gathered input is read-only, so write results to another argument",
        id="writes-into-the-tensor",
    ),
    pytest.param(
        {"s.yaml": None},
        "s.yaml: cannot read the schedule: No such file or directory; check the path",
        id="missing-schedule-file",
    ),
    pytest.param(
        {"kern.py": None},
        "kern.py:1:1: cannot read the kernel file: No such file or directory; check the path",
        id="missing-kernel-file",
    ),
]


@pytest.mark.parametrize(("files", "expected"), TRANSFORM_ERRORS)
@pytest.mark.parametrize("mode", ["stdout", "output", "diff"])
def test_transform_error_is_one_line_exit_2_and_writes_nothing(work, capsys, files, expected, mode):
    for name, text in files.items():
        if text is None:
            (work / name).unlink()
        else:
            (work / name).write_text(text)
    before = _digest(work / "kern.py") if (work / "kern.py").exists() else None
    out = work / "out" / "fused.py"
    argv = ["transform", "kern.py", "--schedule", "s.yaml"]
    argv += {"stdout": [], "output": ["-o", str(out)], "diff": ["--diff", "-o", str(out)]}[mode]
    line = _fails(argv, capsys, out)
    assert line.startswith(expected)
    if before is not None:
        assert _digest(work / "kern.py") == before
    assert not (work / "out").exists()


def test_existing_output_is_left_alone_on_failure(work, capsys):
    out = work / "fused.py"
    out.write_text("previous\n")
    (work / "s.yaml").write_text(SCHEDULE.replace("tensor: src", "tensor: nope"))
    assert main(["transform", "kern.py", "-s", "s.yaml", "-o", str(out)]) == 2
    assert out.read_text() == "previous\n"
    assert capsys.readouterr().err.count("\n") == 1


def test_refuses_to_overwrite_its_input(work, capsys):
    before = _digest(work / "kern.py")
    line = _fails(["transform", "kern.py", "-s", "s.yaml", "-o", "kern.py"], capsys)
    assert line == "kern.py: refusing to overwrite the input kernel; choose another -o path"
    assert _digest(work / "kern.py") == before


def test_refusal_to_overwrite_prints_no_diff(work, capsys):
    _fails(["transform", "kern.py", "-s", "s.yaml", "--diff", "-o", "kern.py"], capsys)


def test_undecodable_kernel_file_is_a_one_line_error(work, capsys):
    (work / "kern.py").write_bytes(KERNEL.encode().replace(b"Row-block", b"Ro\xe9-block"))
    _fails(["transform", "kern.py", "-s", "s.yaml"], capsys)


def test_unwritable_output_is_a_one_line_error(work, capsys):
    (work / "afile").write_text("")
    _fails(["transform", "kern.py", "-s", "s.yaml", "-o", str(work / "afile" / "fused.py")], capsys)


def test_usage_errors_exit_2(work, capsys):
    with pytest.raises(SystemExit) as info:
        main(["transform", "kern.py"])
    assert info.value.code == 2
    assert "--schedule" in capsys.readouterr().err


# --- transform success -------------------------------------------------------------------------

def test_stdout_without_output_is_the_rewritten_file(capsys):
    case = GOLDEN / "masked_loads"
    assert main(["transform", str(case / "kernel.py"), "-s", str(case / "schedule.yaml")]) == 0
    captured = capsys.readouterr()
    assert captured.out == (case / "expected.py").read_text()
    assert captured.err == ""


def test_output_is_written_atomically_and_input_untouched(work, capsys, monkeypatch):
    import syncopy.emit.source as emit

    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((Path(src), Path(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(emit.os, "replace", spy)
    before = _digest(work / "kern.py")
    out = work / "new" / "dir" / "fused.py"
    out.parent.mkdir(parents=True)  # -o never creates folders (see test_cli_args)
    assert main(["transform", "kern.py", "-s", "s.yaml", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert _digest(work / "kern.py") == before
    # written to a temporary file next to the target, then renamed over it in one step
    assert len(replaced) == 1
    tmp, dst = replaced[0]
    assert dst == out and tmp.parent == out.parent and not tmp.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["fused.py"]
    text = out.read_text()
    compile(text, str(out), "exec")
    assert "def scale_blocks(src, dst, count, BLOCK: tl.constexpr, syncopy_ctx," in text
    assert "def other_kernel(src, dst):\n    tl.store(dst, tl.load(src))\n" in text


def test_a_failed_write_leaves_the_previous_output(work, monkeypatch):
    import syncopy.emit.source as emit

    out = work / "fused.py"
    out.write_text("previous\n")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(emit.os, "replace", boom)
    assert main(["transform", "kern.py", "-s", "s.yaml", "-o", str(out)]) == 2
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in work.iterdir()) == ["fused.py", "kern.py", "s.yaml"]


def test_diff_is_a_unified_diff_of_the_kernel_only(work, capsys):
    assert main(["transform", "kern.py", "-s", "s.yaml", "--diff"]) == 0
    diff = capsys.readouterr().out.splitlines()
    assert diff[0] == "--- kern.py" and diff[1] == "+++ kern.py (fused)"
    assert diff[2].startswith("@@ ")
    assert all(line[:1] in " +-@" for line in diff[2:])
    assert "+import syncopy.device as syncopy_device" in diff
    assert "-    blk = tl.program_id(0)" in diff and "+    blk = syncopy_pid0" in diff
    assert not any("other_kernel" in line and line[:1] in "+-" for line in diff)
    assert not (work / "kern.py (fused)").exists()


def test_diff_with_output_writes_the_diff_there_and_prints_nothing(work, capsys):
    assert main(["transform", "kern.py", "-s", "s.yaml", "--diff"]) == 0
    printed = capsys.readouterr().out
    assert main(["transform", "kern.py", "-s", "s.yaml", "--diff", "-o", "fused.diff"]) == 0
    assert capsys.readouterr().out == ""
    assert (work / "fused.diff").read_text() == printed
    assert printed.splitlines()[1] == "+++ kern.py (fused)"


def test_dump_dir_writes_every_stage(work, capsys):
    assert main(["transform", "kern.py", "-s", "s.yaml", "-o", "fused.py", "--dump-dir", "stages"]) == 0
    assert sorted(p.name for p in (work / "stages").iterdir()) == ["0_kernel.py", "1_binding.txt", "2_fused.py", "3_probe.py"]
    assert (work / "stages" / "0_kernel.py").read_text().lstrip().startswith("@triton.jit\ndef scale_blocks(src, dst, count")


# --- check and schema --------------------------------------------------------------------------

def test_check_accepts_a_good_schedule(work, capsys):
    assert main(["check", "s.yaml"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "s.yaml: ok (all_gather of src along dim 0, 2 chunks per rank, order ring)\n"
    assert captured.err == ""


def test_check_accepts_auto(work, capsys):
    (work / "s.yaml").write_text(SCHEDULE.replace("chunks_per_rank: 2", "chunks_per_rank: auto").replace("order: ring", "order: auto"))
    assert main(["check", "s.yaml"]) == 0
    assert capsys.readouterr().out == "s.yaml: ok (all_gather of src along dim 0, chunks per rank chosen at launch, order chosen at launch)\n"


def test_transform_of_an_auto_schedule_is_the_transform_of_any_chunk_count(work, capsys):
    # The rewritten kernel reads the chunk count and order from the runtime's context, so the planner
    # can choose them at launch without a second transform.
    outputs = []
    for chunks, order in (("auto", "auto"), ("2", "ring"), ("5", "local_first")):
        (work / "s.yaml").write_text(SCHEDULE.replace("chunks_per_rank: 2", f"chunks_per_rank: {chunks}").replace("order: ring", f"order: {order}"))
        assert main(["transform", "kern.py", "--schedule", "s.yaml"]) == 0
        outputs.append(capsys.readouterr().out)
    assert "syncopy_device" in outputs[0]
    assert outputs[0] == outputs[1] == outputs[2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SCHEDULE.replace("chunks_per_rank: 2", "chunks_per_rank: 0"), "s.yaml:6: chunks_per_rank: must be a positive integer or auto (got 0)"),
        (SCHEDULE.replace("ring", "[2, 2]"), "s.yaml:7: order: explicit order [2, 2] is not a permutation"),
        (SCHEDULE + "extra: 1\n", "s.yaml:8: extra: unknown key"),
        ("pattern: [all_gather\n", "s.yaml:2: YAML syntax error"),
    ],
)
def test_check_rejects_a_bad_schedule(work, capsys, text, expected):
    (work / "s.yaml").write_text(text)
    assert _fails(["check", "s.yaml"], capsys).startswith(expected)


def test_schema_prints_the_json_schema(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"version", "pattern", "kernel", "tensor", "dim", "chunks_per_rank", "order", "binding"} <= set(schema["properties"])


# --- a real process: nothing but the one line reaches the terminal -----------------------------

def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "syncopy.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_subprocess_error_has_no_traceback(work):
    (work / "s.yaml").write_text(SCHEDULE.replace("kernel: scale_blocks", "kernel: missing_one"))
    proc = _run("transform", "kern.py", "-s", "s.yaml", "-o", "fused.py", cwd=work)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        "kern.py:1:1: kernel 'missing_one' is not in this file; the @triton.jit kernels here are: scale_blocks, "
        "other_kernel; set `kernel:` to one of them\n"
    )
    assert not (work / "fused.py").exists()


def test_subprocess_success_and_check(work):
    proc = _run("transform", "kern.py", "-s", "s.yaml", "-o", "fused.py", cwd=work)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert (work / "fused.py").read_text().count("syncopy_device.wait_chunks(") == 1
    proc = _run("check", "s.yaml", cwd=work)
    assert proc.returncode == 0 and proc.stdout.startswith("s.yaml: ok")


def test_a_reader_that_stops_early_gets_no_traceback(work, capsys, monkeypatch, tmp_path):
    # `syncopy transform K.py -s S.yaml --diff | head`: the pipe closes while the output is written.
    sink = open(tmp_path / "sink", "w")

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        writelines = write

        def fileno(self):
            return sink.fileno()  # where main points stdout afterwards (a pipe's fd in real life)

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    for args in (["transform", "kern.py", "-s", "s.yaml"], ["transform", "kern.py", "-s", "s.yaml", "--diff"]):
        assert main(args) == 141
    assert capsys.readouterr().err == ""
    sink.close()


def test_schema_markdown_prints_the_reference_of_docs(capsys):
    from syncopy.schedule.reference import markdown

    assert main(["schema", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out == markdown() and "| `chunks_per_rank` | int >= 1 \\| `auto` | `1` |" in out


def test_trace_of_a_file_that_is_not_a_trace_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "run.json"
    bad.write_text('{"events": []}')
    assert main(["trace", str(bad), "-o", str(tmp_path / "t.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{bad}: not a Chrome trace (no traceEvents list); write one with trace='run.json' or --trace"
    assert main(["trace", str(bad), "-o", str(tmp_path / "t.txt")]) == 2
    assert capsys.readouterr().err.strip() == f"-o {tmp_path / 't.txt'}: write the picture as .png, .svg or .pdf"
    assert not (tmp_path / "t.png").exists()


def test_run_timeline_with_a_suffix_matplotlib_cannot_write_is_refused_before_any_rank(tmp_path, capsys):
    assert main(["run", "ag_gemm", "--world", "2", "--timeline", str(tmp_path / "t.txt")]) == 2
    assert capsys.readouterr().err.strip() == f"--timeline {tmp_path / 't.txt'}: write the picture as .png, .svg or .pdf"
    assert main(["run", "ag_gemm", "--world", "2", "--trace", str(tmp_path / "missing" / "t.json")]) == 2
    assert "--trace" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["copy_rows", "_copy_rows"])
def test_a_kernel_made_by_triton_jit_of_a_function_transforms(name, tmp_path, capsys):
    """`copy_rows = triton.jit(_copy_rows)`: the schedule may name the kernel or its function; the
    function is rewritten in place and the module-level call left as it was."""
    from pathlib import Path

    kernel = Path(__file__).parents[1] / "kernels" / "assigned_jit.py"
    schedule = tmp_path / "s.yaml"
    schedule.write_text(f"kernel: {name}\npattern: all_gather\ntensor: X\ndim: 0\nchunks_per_rank: 2\n")
    assert main(["transform", str(kernel), "-s", str(schedule)]) == 0
    out = capsys.readouterr().out
    assert "def _copy_rows(X, Y, M, N: tl.constexpr, BR: tl.constexpr, syncopy_ctx," in out
    assert out.rstrip().endswith("copy_rows = triton.jit(_copy_rows)") and "@triton.jit" not in out


def test_checked_transform_says_on_stderr_which_helper_it_cannot_look_inside(tmp_path, capsys):
    # The tutorial-style attention hands its key/value helper tensor descriptors: checked mode cannot
    # check those reads, and the CLI says so in one located line (the fused file is still written).
    import importlib
    import shutil

    kernel = tmp_path / "attn.py"
    shutil.copy(importlib.import_module("tests.kernels.attention_descriptors").__file__, kernel)
    (tmp_path / "s.yaml").write_text("pattern: all_gather\nkernel: attn_stage_branches\ntensor: [desc_k, desc_v]\nchunks_per_rank: 2\n")
    out = tmp_path / "fused.py"
    assert main(["transform", str(kernel), "-s", str(tmp_path / "s.yaml"), "-o", str(out), "--checked"]) == 0
    err = capsys.readouterr().err.splitlines()
    line = next(i for i, text in enumerate(kernel.read_text().splitlines(), 1) if text.startswith("def attn_stage_branches("))
    assert err == [f"syncopy: warning: {kernel}:{line}:1: 'attn_stage_branches': checked mode cannot look inside _attend_stage (it is "
                   "handed the tensor descriptors desc_k and desc_v, and checked mode checks reads through a descriptor only in "
                   "the kernel itself): what it reads or stores of the communicated tensor is not checked"], err
    assert out.exists()
