"""User mistakes found by an audit: each is one line that says where and what to change.

Decorator misuse, `syncopy.templates` after `import syncopy`, `binding:` (rows must be one
expression in names the kernel defines; `before_line` picks the statement the wait goes before),
a scalar `tensor:`, duplicate YAML keys, `world:` against an order list, `dim:` beyond the tensor's
dimensions, and `auto` on a full-form schedule. CLI-visible ones also exit 2 with nothing written.
Launch arguments (a missing one, a list for a tensor, a shard on an unsupported device), timeout_s
checked at decoration, and template ops that stay callable (tests/world/test_launch_errors.py has
the ones that need ranks: a group without this rank, rows past the communicated buffer).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton

import syncopy
from syncopy.cli import main
from syncopy.errors import KernelError, LaunchError, ScheduleError
from syncopy.frontend.source import find_kernel, from_file
from syncopy.passes import transform
from syncopy.schedule import load_schedule, loads

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "templates"

KERNEL = textwrap.dedent(
    '''\
    import triton
    import triton.language as tl


    @triton.jit
    def mm(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid = tl.program_id(0)
        pid_m = pid // tl.cdiv(N, BN)
        pid_n = pid % tl.cdiv(N, BN)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(A + rm[:, None] * sam + (k + rk)[None, :] * sak)
            b = tl.load(B + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
            acc += tl.dot(a, b)
        tl.store(C + rm[:, None] * scm + rn[None, :] * scn, acc)
    '''
)
# Lines of KERNEL: 6 def, 7 pid, 10 rm, 14 the for loop holding the first read of A (15), 18 the store.

SCHEDULE = textwrap.dedent(
    """\
    version: 1
    pattern: all_gather
    kernel: mm
    tensor: A
    dim: 0
    chunks_per_rank: 2
    order: ring
    """
)
ROWS = "pid_m * BM + tl.arange(0, BM)"


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text(KERNEL)
    (tmp_path / "s.yaml").write_text(SCHEDULE)
    return tmp_path


def _with_binding(rows: str, before_line: int | None = None) -> str:
    text = SCHEDULE + f"binding:\n  rows: {rows}\n"
    return text + (f"  before_line: {before_line}\n" if before_line is not None else "")


def _cli_fails(argv, capsys) -> str:
    """Exit 2, one line on stderr, nothing on stdout, no traceback, no output file."""
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    assert not Path("out.py").exists()
    return captured.err.rstrip("\n")


def _transform_fails(capsys) -> str:
    return _cli_fails(["transform", "k.py", "-s", "s.yaml", "-o", "out.py"], capsys)


def _fused(schedule_text: str) -> str:
    return transform(find_kernel(KERNEL, "k.py", "mm"), loads(schedule_text)).code()


# --- the decorator on a plain function -----------------------------------------------------------

def test_overlap_on_a_plain_function_says_to_add_triton_jit():
    with pytest.raises(KernelError) as info:
        @syncopy.overlap(SCHEDULE)
        def mm(A):
            pass
    assert re.fullmatch(r".*test_user_errors\.py:\d+:1: @syncopy\.overlap needs a @triton\.jit kernel: put @triton\.jit "
                        r"under @syncopy\.overlap \(got function 'mm'\)", str(info.value))


def test_overlap_with_the_decorators_swapped_fails_at_decoration():
    with pytest.raises(KernelError, match=r"put @triton\.jit under @syncopy\.overlap \(got function 'mm'\)$"):
        @triton.jit
        @syncopy.overlap(SCHEDULE)
        def mm(A):
            pass


def test_overlap_on_something_else_names_its_type():
    with pytest.raises(KernelError) as info:
        syncopy.overlap(SCHEDULE)(3)
    assert str(info.value) == "@syncopy.overlap needs a @triton.jit kernel: put @triton.jit under @syncopy.overlap (got int)"


# --- syncopy.templates after import syncopy ----------------------------------------------------------

def test_templates_are_reachable_after_import_syncopy_and_loaded_lazily():
    code = ("import sys, syncopy; lazy = 'syncopy.templates' not in sys.modules; "
            "print(lazy, syncopy.templates.ag_gemm.__name__, 'templates' in syncopy.__all__)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "True ag_gemm True\n", "")


# --- binding.rows: one expression, in names the kernel defines -------------------------------------

@pytest.mark.parametrize(("rows", "expected"), [
    pytest.param("pid_m * (BM", "s.yaml:9: binding.rows: 'pid_m * (BM' is not a Python expression ('(' was never closed); "
                 "write one expression in the kernel's names, e.g. pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", id="unclosed"),
    pytest.param("'pid_m, 0'", "s.yaml:9: binding.rows: 'pid_m, 0' is not one value (a tuple); write one expression for the "
                 "row indices along `dim`, e.g. pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", id="tuple"),
    pytest.param("'pid_m # rows'", "s.yaml:9: binding.rows: 'pid_m # rows' is not a Python expression ('(' was never closed); "
                 "write one expression in the kernel's names, e.g. pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", id="comment"),
    pytest.param("'a) + (b'", "s.yaml:9: binding.rows: 'a) + (b' is not a Python expression (unmatched ')'); "
                 "write one expression in the kernel's names, e.g. pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", id="unbalanced"),
])
@pytest.mark.parametrize("command", ["check", "transform"])
def test_binding_rows_must_be_one_expression(work, capsys, rows, expected, command):
    (work / "s.yaml").write_text(_with_binding(rows))
    argv = ["check", "s.yaml"] if command == "check" else ["transform", "k.py", "-s", "s.yaml", "-o", "out.py"]
    assert _cli_fails(argv, capsys) == expected


@pytest.mark.parametrize(("rows", "expected"), [
    pytest.param("foo * BM", "k.py:14:5: binding.rows uses 'foo', which kernel 'mm' does not define; the wait for 'A' goes "
                 "before line 14, so write `rows:` with its parameters and the names it assigns above that line", id="unknown"),
    pytest.param("pid_mm * BM", "k.py:14:5: binding.rows uses 'pid_mm', which kernel 'mm' does not define (did you mean "
                 "'pid_m'?); the wait for 'A' goes before line 14, so write `rows:` with its parameters and the names it "
                 "assigns above that line", id="typo"),
    pytest.param("rm + k", "k.py:14:5: binding.rows uses 'k', which kernel 'mm' assigns only later; the wait for 'A' goes "
                 "before line 14, so write `rows:` with its parameters and the names it assigns above that line",
                 id="loop-variable-after-the-wait"),
])
def test_binding_rows_names_must_exist_at_the_wait(work, capsys, rows, expected):
    (work / "s.yaml").write_text(_with_binding(rows))
    assert _transform_fails(capsys) == expected


def test_binding_rows_may_use_parameters_assignments_and_module_names():
    fused = _fused(_with_binding("rm % M + tl.arange(0, 1) * 0"))
    assert "syncopy_device.chunk_range_of_rows(rm % M + tl.arange(0, 1) * 0, syncopy_ctx)" in fused


# --- binding.before_line: the statement the wait goes before ----------------------------------------

def _wait_line(fused: str) -> int:
    lines = fused.splitlines()
    at = next(i for i, line in enumerate(lines) if "syncopy: wait for the chunks of A" in line)
    return next(i for i in range(at, len(lines)) if lines[i].strip() and not lines[i].lstrip().startswith(("#", "if", "else", "syncopy")))


def test_before_line_at_the_first_read_is_the_default():
    assert _fused(_with_binding(ROWS, 14)) == _fused(_with_binding(ROWS))


def test_before_line_moves_the_wait_up():
    default, early = _fused(_with_binding(ROWS)), _fused(_with_binding(ROWS, 11))
    lines = early.splitlines()
    wait = next(i for i, line in enumerate(lines) if "syncopy: wait for the chunks of A" in line)
    assert lines[wait - 1].strip() == "rm = pid_m * BM + tl.arange(0, BM)"
    assert "rn = pid_n * BN" in "\n".join(lines[wait:])
    assert default != early


@pytest.mark.parametrize(("line", "expected"), [
    pytest.param(19, "k.py:6:1: binding.before_line 19 is outside kernel 'mm' (lines 6-18); use the line of a statement "
                 "directly in the body of 'mm', at most 14 (the statement holding the first read of 'A')", id="past-the-end"),
    pytest.param(999, "k.py:6:1: binding.before_line 999 is outside kernel 'mm' (lines 6-18); use the line of a statement "
                 "directly in the body of 'mm', at most 14 (the statement holding the first read of 'A')", id="far-away"),
    pytest.param(15, "k.py:15:1: binding.before_line 15 does not start a statement directly in the body of 'mm'; use the line "
                 "of a statement directly in the body of 'mm', at most 14 (the statement holding the first read of 'A')",
                 id="inside-the-loop"),
    pytest.param(18, "k.py:18:5: binding.before_line 18 comes after line 14, whose read of 'A' would run before the wait; use "
                 "the line of a statement directly in the body of 'mm', at most 14 (the statement holding the first read of 'A')",
                 id="after-the-read"),
    pytest.param(8, "k.py:8:5: binding.rows uses 'pid_m', which kernel 'mm' assigns only later; the wait for 'A' goes "
                 "before line 8, so write `rows:` with its parameters and the names it assigns above that line",
                 id="before-its-names"),
])
def test_before_line_must_be_a_statement_of_the_kernel_before_the_read(work, capsys, line, expected):
    (work / "s.yaml").write_text(_with_binding(ROWS, line))
    assert _transform_fails(capsys) == expected


def test_before_line_is_refused_for_persistent_kernels():
    ks = from_file(TEMPLATES / "ag_gemm_persistent" / "kernel.py", "ag_gemm_persistent_kernel")
    schedule = load_schedule({"pattern": "all_gather", "tensor": "A", "binding": {"rows": "pid_m * BLOCK_M", "before_line": 30}})
    with pytest.raises(KernelError, match=r"kernel\.py:\d+:5: binding\.before_line is not supported for persistent kernels: the "
                                          r"wait goes at the start of each tile, inside the loop at line \d+; drop before_line$"):
        transform(ks, schedule)


def test_before_line_is_refused_for_producers():
    ks = from_file(TEMPLATES / "gemm_rs" / "kernel.py", "gemm_rs_kernel")
    schedule = load_schedule({"pattern": "reduce_scatter", "tensor": "C", "binding": {"rows": "pid_m * BLOCK_M", "before_line": 20}})
    with pytest.raises(KernelError, match=r"kernel\.py:\d+:1: binding\.before_line applies to the patterns that read the tensor "
                                          r"\(all_gather, all_to_all\); a producer announces its chunks after its stores, so drop "
                                          r"before_line$"):
        transform(ks, schedule)


# --- tensor: a scalar ---------------------------------------------------------------------------------

def test_scalar_tensor_names_the_pointer_arguments(work, capsys):
    (work / "s.yaml").write_text(SCHEDULE.replace("tensor: A", "tensor: N"))
    assert _transform_fails(capsys) == (
        "k.py:6:20: kernel 'mm' never loads or stores through 'N' as a pointer (it is used as a scalar); "
        "set `tensor:` to one of A, B, C"
    )


# --- duplicate keys, world, dim --------------------------------------------------------------------

def test_duplicate_key_names_both_lines(work, capsys):
    (work / "s.yaml").write_text(SCHEDULE + "tensor: B\n")
    assert _cli_fails(["check", "s.yaml"], capsys) == "s.yaml:8: tensor: duplicate key (first on line 4, again on line 8); keep only one of them"


def test_duplicate_nested_key(work, capsys):
    (work / "s.yaml").write_text(SCHEDULE + f"binding:\n  rows: {ROWS}\n  rows: rm\n")
    assert _cli_fails(["check", "s.yaml"], capsys) == (
        "s.yaml:10: binding.rows: duplicate key (first on line 9, again on line 10); keep only one of them")


def test_world_with_a_named_order_is_a_documented_key_checked_at_launch(work, capsys):
    from syncopy.runtime.state.plan import all_gather

    (work / "s.yaml").write_text(SCHEDULE + "world: 3\n")
    assert main(["check", "s.yaml"]) == 0
    with pytest.raises(LaunchError, match=r"^the schedule says `world: 3` \(it is written for 3 ranks\) but the group has 2 ranks"):
        all_gather(load_schedule(str(work / "s.yaml")), 0, 2, 8)


def test_world_contradicting_an_order_list(work, capsys):
    (work / "s.yaml").write_text(SCHEDULE.replace("order: ring", "order: [1, 2]") + "world: 4\n")
    assert _cli_fails(["check", "s.yaml"], capsys) == (
        "s.yaml:7: order: the explicit order [1, 2] lists 2 peer offsets but `world: 4` has 3 peers; "
        "list each of the offsets 1..3 once, or fix `world`")


def test_dim_beyond_the_tensor_is_one_line_at_launch(tmp_path):
    # A pointer kernel does not say how many dimensions its tensor has (it may index a 3-D tensor
    # as rows x flat columns), so the check waits for the launch, where the shard is at hand.
    kernel = tmp_path / "dim_kernel.py"
    kernel.write_text(KERNEL)
    sys.path.insert(0, str(tmp_path))
    try:
        import dim_kernel
    finally:
        sys.path.remove(str(tmp_path))
    fused = syncopy.overlap(SCHEDULE.replace("dim: 0", "dim: 5"))(dim_kernel.mm)
    a, b, c = torch.zeros(4, 4), torch.zeros(4, 4), torch.zeros(8, 4)
    with pytest.raises(LaunchError) as info:  # the argument check of every launch, after dist's own
        fused.binder.bind((a, b, c, 8, 4, 4, 4, 1, 4, 1, 4, 1), dict(BM=4, BN=4, BK=4))
    assert str(info.value) == "schedule dim 5 but 'A' has 2 dimensions; set `dim:` below 2"


# --- auto on the full form ---------------------------------------------------------------------------

FULL = (REPO / "examples" / "explicit_all_gather.yaml").read_text()


def test_order_auto_with_transfers(work, capsys):
    (work / "s.yaml").write_text(FULL.replace("order: explicit", "order: auto"))
    line = _cli_fails(["check", "s.yaml"], capsys)
    assert re.fullmatch(r"s\.yaml:\d+: order: order 'auto' lets the planner choose a named order, but the `transfers:` already "
                        r"fix every transfer; write `order: explicit` \(or drop `order`\), or drop `transfers:` to let the "
                        r"planner choose", line)


def test_order_auto_as_an_overlap_argument_on_the_full_form():
    with pytest.raises(ScheduleError, match=r"^syncopy\.overlap: order: order 'auto' lets the planner choose a named order"):
        syncopy.overlap(str(REPO / "examples" / "explicit_all_gather.yaml"), order="auto")


def test_chunks_per_rank_auto_with_transfers_is_one_line(work, capsys):
    text = re.sub(r"^(units_per_rank|chunks):.*\n", "", FULL, flags=re.M).replace("order: explicit", "order: explicit\nchunks_per_rank: auto")
    (work / "s.yaml").write_text(text)
    line = _cli_fails(["check", "s.yaml"], capsys)
    assert re.fullmatch(r"s\.yaml:\d+: chunks_per_rank: chunks_per_rank 'auto' lets the planner choose the chunk count, but "
                        r"the `transfers:` name chunk indices; give the chunk count the transfers are written for", line)


# --- a real process: the transform that used to end in a libcst traceback ----------------------------

def test_subprocess_bad_binding_has_no_traceback(work):
    (work / "s.yaml").write_text(_with_binding("pid_m * (BM"))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "syncopy.cli", "transform", "k.py", "-s", "s.yaml", "-o", "out.py"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith("s.yaml:9: binding.rows: 'pid_m * (BM' is not a Python expression") and proc.stderr.count("\n") == 1
    assert not (work / "out.py").exists()


@pytest.mark.parametrize("key", ["chunks_per_rank", "order"])
def test_expand_from_python_refuses_auto_naming_the_key(key):
    from syncopy.schedule.expand import expand

    from syncopy.schedule import Schedule

    s = Schedule(**{"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 2, "order": "ring", key: "auto"})
    with pytest.raises(ScheduleError, match=rf"^schedule: {key}: auto is resolved at launch by the planner, so there is nothing fixed to expand; give a fixed {key}$"):
        expand(s, 3)


# --- launch arguments: what _bind refuses before any collective ------------------------------------

@pytest.fixture
def mm_fused(tmp_path, request):
    """`syncopy.overlap(SCHEDULE)` on KERNEL's mm, imported from a file (triton reads its source)."""
    name = f"mm_{request.node.name.replace('[', '_').replace(']', '').replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(KERNEL)
    sys.path.insert(0, str(tmp_path))
    try:
        module = __import__(name)
    finally:
        sys.path.remove(str(tmp_path))
    return syncopy.overlap(SCHEDULE)(module.mm)


def _mm_args(a=None, b=None):
    a = torch.zeros(4, 4) if a is None else a
    b = torch.zeros(4, 4) if b is None else b
    return (a, b, torch.zeros(8, 4), 8, 4, 4, 4, 1, 4, 1, 4, 1)


@pytest.mark.parametrize(("args", "meta", "expected"), [
    pytest.param(_mm_args(), dict(BM=4, BN=4), "missing argument 'BK'", id="constexpr"),
    pytest.param(_mm_args()[:-1], dict(BM=4, BN=4, BK=4), "missing argument 'scn'", id="last-positional"),
    pytest.param(_mm_args()[:-2], dict(BN=4, BK=4), "missing arguments 'scm', 'scn', 'BM'", id="several"),
])
def test_missing_argument_is_named(mm_fused, args, meta, expected):
    with pytest.raises(LaunchError) as info:
        mm_fused.binder.bind(args, meta)
    assert str(info.value) == f"launch of 'mm': {expected}; pass every argument the local kernel takes"


def test_constexpr_with_a_default_may_be_left_out(tmp_path):
    (tmp_path / "mm_defaulted.py").write_text(KERNEL.replace("BK: tl.constexpr)", "BK: tl.constexpr = 4)"))
    sys.path.insert(0, str(tmp_path))
    try:
        import mm_defaulted
    finally:
        sys.path.remove(str(tmp_path))
    bound, shard, options, _ = syncopy.overlap(SCHEDULE)(mm_defaulted.mm).binder.bind(_mm_args(), dict(BM=4, BN=4, num_warps=4))
    assert "BK" not in bound and options == {"num_warps": 4} and shard.shape == (4, 4)


def test_list_where_a_tensor_goes_is_one_line(mm_fused):
    with pytest.raises(LaunchError) as info:
        mm_fused.binder.bind(_mm_args(b=[0.0] * 16), dict(BM=4, BN=4, BK=4))
    assert str(info.value) == ("launch of 'mm': argument 'B' is a list, which a Triton kernel cannot take; pass a torch "
                               "tensor (or a number, for a scalar argument)")


def test_shard_on_an_unsupported_device_says_which_devices_work(mm_fused):
    # backend="auto" (the default): the message must not blame a backend the user never chose.
    with pytest.raises(LaunchError) as info:
        mm_fused.binder.bind(_mm_args(a=torch.zeros(4, 4, device="meta")), dict(BM=4, BN=4, BK=4))
    assert str(info.value) == ("'A' is on a meta device, which syncopy cannot launch on; pass CPU tensors (gloo backend) "
                               "or CUDA tensors (p2p or nccl backend)")


# --- overlap(timeout_s=...) is checked at decoration ------------------------------------------------

@pytest.mark.parametrize("timeout_s", [-1, 0, 0.0, "5", float("inf"), float("nan"), True, None, 1e10],
                         ids=["negative", "zero", "zero-float", "string", "inf", "nan", "bool", "none", "too-long"])
def test_timeout_must_be_a_positive_number_of_seconds(timeout_s):
    with pytest.raises(LaunchError) as info:
        syncopy.overlap(SCHEDULE, timeout_s=timeout_s)
    assert str(info.value) == (f"timeout_s must be a positive number of seconds, at most 1e+09 (got {timeout_s!r}); "
                               "e.g. timeout_s=60")


def test_timeout_is_checked_on_a_fused_kernel_made_directly():
    from syncopy.api import FusedKernel

    with pytest.raises(LaunchError, match=r"^timeout_s must be a positive number of seconds, at most 1e\+09 \(got -5\)"):
        FusedKernel(syncopy.templates.get("ag_gemm").kernel(), syncopy.templates.get("ag_gemm").schedule(), timeout_s=-5)


@pytest.mark.parametrize("timeout_s", [0.5, 60, 1e9])
def test_timeout_accepts_seconds(timeout_s):
    syncopy.overlap(SCHEDULE, timeout_s=timeout_s)


# --- template ops: callable however often, and after their folder's modules are imported ------------

def test_template_ops_stay_ops_after_their_modules_are_imported():
    import importlib

    import syncopy.templates as T

    names = list(T.available())
    for name in names:
        importlib.import_module(f"syncopy.templates.{name}.kernel")
        importlib.import_module(f"syncopy.templates.{name}.template")
        op = getattr(T, name)
        assert callable(op) and op.__name__ == name and op.__doc__ == T.get(name).module.launch.__doc__
        assert op.kernel.__name__ == f"syncopy.templates.{name}.kernel"  # the folder's modules stay reachable
    import syncopy.templates.ag_gemm.kernel as kernel_module
    from syncopy.templates import ag_gemm

    assert kernel_module.__name__ == "syncopy.templates.ag_gemm.kernel" and ag_gemm is T.ag_gemm


def test_template_op_called_twice_gives_the_same_one_line_error():
    import torch.distributed as dist

    import syncopy.templates as T

    assert not dist.is_initialized()
    a = torch.zeros(4, 4)
    for _ in range(2):  # the second call used to find the folder's module: "'module' object is not callable"
        with pytest.raises(LaunchError) as info:
            T.ag_gemm(a, a)
        assert str(info.value) == ("torch.distributed is not initialised; call dist.init_process_group (gloo on CPU) "
                                   "before launching")


def test_ranks_that_disagree_are_told_what_differs():
    from syncopy.runtime.launch import contexts
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 2, "order": "ring"})(ag_gemm_kernel)
    assert fk.contexts.shard_difference(1, ((17, 12), "torch.float32"), 0, ((16, 12), "torch.float32")) == (
        "rank 1 passed 'A' with shape [17, 12] torch.float32 but rank 0 passed [16, 12] torch.float32; all_gather needs the "
        "same size along dim 0 on every rank (pad the last shard)")
    assert fk.contexts.shard_difference(1, ((16, 12), "torch.float16"), 0, ((16, 12), "torch.float32")) == (
        "rank 1 passed 'A' as torch.float16 but rank 0 passed torch.float32 (both [16, 12]); all_gather needs the same dtype "
        "on every rank: cast every rank's 'A' to one dtype")
    other = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 4, "order": "ring"})(ag_gemm_kernel)
    assert contexts._schedule_difference(1, other.schedule.key(), 0, fk.schedule.key()) == (
        "rank 1 launched with chunks_per_rank: 4 but rank 0 with chunks_per_rank: 2; every rank must use the same schedule "
        "(the same file and the same overlap() overrides)")
