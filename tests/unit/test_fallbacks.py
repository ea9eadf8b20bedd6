"""No silent fallback (issue 31, item 5): a kernel whose analysis falls back to what costs overlap (a
tile that waits for every chunk, tiles kept in their launch order) says so once per operator, at its
first launch, as a SyncopyFallbackWarning naming the kernel's line and why; `strict=True` and
`syncopy transform --strict` refuse it in one located line instead; a kernel without one says nothing."""
from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest

import syncopy
from syncopy.cli import main
from syncopy.schedule import Schedule, load_schedule
from tests.golden import golden_worlds as gw
from tests.kernels import sequence_loops

GOLDEN = Path(gw.__file__).parent
CASES = {
    "waits_data_rows": (11, "'gather_rows': tiles keep their launch order: the rows of its first read depend on loaded data, "
                            "which changes from launch to launch"),
    "waits_helper_rows": (26, "'two_helpers': wait for every chunk of X: syncopy cannot bound the rows a helper called here reads "
                              "(_wrapped_block reads rows it cannot bound before the call: the rows read are not affine in the loop counter)"),
}


def _operator(case: str, **options):
    sched = load_schedule(GOLDEN / case / "schedule.yaml")
    return syncopy.overlap(sched, **options)(gw._local_kernel(case, sched.kernel))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fallback_is_said_once_per_operator_with_its_line(case):
    line, says = CASES[case]
    op = _operator(case)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        op.build()
        op.build()  # a later launch builds nothing: said once
    assert [(w.category, str(w.message)) for w in seen] == [
        (syncopy.SyncopyFallbackWarning, f"{GOLDEN / case / 'kernel.py'}:{line}: {says} (pass strict=True to refuse this)")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_strict_refuses_a_fallback_in_one_located_line(case):
    line, says = CASES[case]
    with pytest.raises(syncopy.KernelError) as got:
        _operator(case, strict=True).build()
    name, reason = says.split(": ", 1)
    assert str(got.value) == (f"{GOLDEN / case / 'kernel.py'}:{line}:1: {name} would run with less overlap than asked: {reason} "
                              "(strict=True refuses what costs overlap; `syncopy explain KERNEL.py --schedule S.yaml` lists "
                              "every decision)")


# flash-linear-attention's recurrence steps its pointers by `H * K`, both constexprs: the wait stays
# before the loop (every row of the sequence before the first step), and says how to get it per step.
_LINES = inspect.getsource(sequence_loops).splitlines()
STEPPED_LINE = 1 + _LINES.index("    for _ in range(0, T):", _LINES.index("def linear_recurrence_constexpr_steps(q, k, v, o, T, "
                                                                         "H: tl.constexpr, K: tl.constexpr):"))
STEPPED = ("'linear_recurrence_constexpr_steps': one wait before the loop for every row of k it reads: its pointer steps "
           "by constexprs only (H * K per iteration), so syncopy cannot tell which rows each iteration reads; pass the "
           "stride as a runtime argument (as Mamba's `p += stride_chunk`, which is recognised) and each iteration waits "
           "for its own chunks")


def _stepped(**options):
    sched = Schedule(pattern="all_gather", kernel="linear_recurrence_constexpr_steps", tensor="k", dim=1,
                     chunks_per_rank=2, order="ring")
    return syncopy.overlap(sched, **options)(sequence_loops.linear_recurrence_constexpr_steps)


def test_a_loop_stepped_by_constexprs_only_is_said_with_the_loop_line():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        op = _stepped()
        op.build()
        op.build()
    assert [(w.category, str(w.message)) for w in seen] == [
        (syncopy.SyncopyFallbackWarning, f"{sequence_loops.__file__}:{STEPPED_LINE}: {STEPPED} (pass strict=True to refuse this)")]


def test_strict_refuses_a_loop_stepped_by_constexprs_only():
    with pytest.raises(syncopy.KernelError) as got:
        _stepped(strict=True).build()
    name, reason = STEPPED.split(": ", 1)
    assert str(got.value) == (f"{sequence_loops.__file__}:{STEPPED_LINE}:1: {name} would run with less overlap than asked: "
                              f"{reason} (strict=True refuses what costs overlap; `syncopy explain KERNEL.py --schedule "
                              "S.yaml` lists every decision)")


def test_a_loop_stepped_by_its_block_or_a_runtime_stride_says_nothing():
    """A GEMM's `a_ptrs += BK` walks its block's own axis; Mamba's `+= stride_states_chunk` waits per step."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for case in ("loop_as_written_gemm", "loop_seq_scan_stepped", "loop_seq_recurrence_stepped"):
            _operator(case, strict=True).build()
        gemm = load_schedule(GOLDEN / "loop_as_written_gemm" / "schedule.yaml").model_copy(update={"tensor": "A", "loop_order": None})
        syncopy.overlap(gemm, strict=True)(gw._local_kernel("loop_as_written_gemm", gemm.kernel)).build()


def test_a_kernel_without_fallback_says_nothing_and_passes_strict():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _operator("gemm_2d_launch").build()
        _operator("gemm_2d_launch", strict=True).build()


def test_transform_strict_exits_2_with_the_line_and_writes_nothing(tmp_path, capsys):
    case = "waits_helper_rows"
    out = tmp_path / "fused.py"
    assert main(["transform", str(GOLDEN / case / "kernel.py"), "-s", str(GOLDEN / case / "schedule.yaml"), "--strict",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{GOLDEN / case / 'kernel.py'}:26:1: 'two_helpers' would run with less "
                                                   "overlap than asked: wait for every chunk of X"), err
    assert not out.exists()
    assert main(["transform", str(GOLDEN / case / "kernel.py"), "-s", str(GOLDEN / case / "schedule.yaml"), "-o", str(out)]) == 0
