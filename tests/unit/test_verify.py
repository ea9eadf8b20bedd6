"""`syncopy verify` without a world: bad input is one line and exit 2 before any rank starts; the
comparison is NaN-aware; a difference is exit 1 with the world, rank, condition, launch and element."""
from __future__ import annotations

import pytest
import torch

from syncopy import cli, verifier

KERNEL, SCHEDULE, EXAMPLE = "examples/verify/mm.py", "examples/verify/mm.yaml", "examples/verify/mm_example.py:make"


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("argv, says", [
    ([KERNEL, "--example", EXAMPLE], "examples/verify/mm.py: a kernel file needs --schedule S.yaml"),
    ([KERNEL, "--schedule", SCHEDULE], "give --example EXAMPLE.py:FN, where FN(rank, world, launch) returns (grid, args, kwargs)"),
    ([KERNEL, "--schedule", SCHEDULE, "--example", "examples/verify/mm_example.py"],
     "--example examples/verify/mm_example.py: give FILE.py:FUNCTION"),
    ([KERNEL, "--schedule", SCHEDULE, "--example", "nowhere.py:make"], "--example nowhere.py:make: cannot read nowhere.py"),
    (["missing.py", "--schedule", SCHEDULE, "--example", EXAMPLE], "missing.py: cannot read the kernel file"),
    ([KERNEL, "--schedule", SCHEDULE, "--example", EXAMPLE, "--world", "1"], "--world 1: verify worlds of 2 ranks or more"),
    ([KERNEL, "--schedule", SCHEDULE, "--example", EXAMPLE, "--world", "two"], "--world two: give world sizes, comma-separated"),
    ([KERNEL, "--schedule", SCHEDULE, "--example", EXAMPLE, "--launches", "0"], "--launches 0: give at least one launch"),
    (["no_such_template"], "unknown template 'no_such_template'"),
    (["ag_gemm", "--world", "2", "--launches", "1", "--json", "no/such/dir/out.json"], "--json no/such/dir/out.json: the directory"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_rank_starts(argv, says, capsys, monkeypatch):
    monkeypatch.setattr(verifier, "_spawn", lambda *a: pytest.fail("a rank started"))
    assert cli.main(["verify", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says in err, err
    assert "Traceback" not in err


def test_a_schedule_without_kernel_is_located(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(verifier, "_spawn", lambda *a: pytest.fail("a rank started"))
    schedule = tmp_path / "s.yaml"
    schedule.write_text("pattern: all_gather\ntensor: A\ndim: 0\nchunks_per_rank: 2\n")
    assert cli.main(["verify", KERNEL, "--schedule", str(schedule), "--example", EXAMPLE]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{schedule}" in err and "add `kernel: NAME` (the @triton.jit function to verify)" in err, err


def test_a_template_takes_no_schedule_or_example(capsys):
    assert cli.main(["verify", "ag_gemm", "--example", EXAMPLE]) == 2
    assert "a template brings its kernel, schedule and inputs; drop --schedule and --example" in capsys.readouterr().err


def test_a_difference_is_exit_1_and_names_world_rank_condition_launch_and_element(capsys, monkeypatch):
    record = {"rank": 1, "conditions": {
        "reordered": [{"launch": 0, "differences": []},
                      {"launch": 1, "differences": ["C: rows 16..31 (chunks 2..3, from rank 1) 256 elements differ, first [16, 0]: "
                                                    "fused nan, reference 4.21618"]}],
        "held": [{"launch": 0, "differences": [], "waited": [2, 3], "unwaited": []}],
        "checked": [{"launch": 0, "differences": []}]}}
    ok = {"rank": 0, "conditions": {c: [{"launch": 0, "differences": []}] for c in ("reordered", "held", "checked")}}

    def fake(target, world):
        return [ok, record]
    monkeypatch.setattr(verifier, "_spawn", fake)
    assert cli.main(["verify", KERNEL, "--schedule", SCHEDULE, "--example", EXAMPLE, "--world", "2"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("world 2  reordered  DIFFERS on rank 1  (2 launches on 2 ranks")
    assert out[1].startswith("world 2  held       ok")
    assert ("  world 2 rank 1 reordered launch 1: C: rows 16..31 (chunks 2..3, from rank 1) 256 elements differ, "
            "first [16, 0]: fused nan, reference 4.21618") in out
    assert out[-1].startswith("verdict: DIFFERS")


@pytest.mark.parametrize("got, want, tol, same", [
    ([1.0, float("nan")], [1.0, 2.0], 1e-4, False),  # NaN where the reference has a number: a difference
    ([1.0, float("nan")], [1.0, float("nan")], 1e-4, True),  # NaN where the reference has NaN: the same
    ([1.0, 2.00001], [1.0, 2.0], 1e-4, True),  # within the tolerance of the largest magnitude
    ([1.0, 2.1], [1.0, 2.0], 1e-4, False),
    ([float("inf")], [float("inf")], 1e-4, True),
    ([float("-inf")], [float("inf")], 1e-4, False),
])
def test_the_comparison_sees_nan_and_keeps_its_tolerance(got, want, tol, same):
    found = verifier._mismatch(torch.tensor(got), torch.tensor(want), tol)
    assert (found is None) == same, found


def test_integers_compare_exactly_and_the_first_element_is_named():
    found = verifier._mismatch(torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 2], [3, 5]]), 0.1)
    assert found == "1 elements differ, first [1, 1]: fused 4, reference 5"


def test_a_note_says_when_no_launch_reuses_an_earlier_ones_buffers(capsys, monkeypatch):
    note = "--example x.py:make: no two launches have the same shapes, so none reuses the buffers and flags of an earlier one"
    ok = {"rank": 0, "notes": [note], "conditions": {c: [{"launch": 0, "differences": []}] for c in ("reordered", "held", "checked")}}
    monkeypatch.setattr(verifier, "_spawn", lambda target, world: [ok, {**ok, "rank": 1}])
    assert cli.main(["verify", KERNEL, "--schedule", SCHEDULE, "--example", EXAMPLE, "--world", "2"]) == 0
    assert capsys.readouterr().out.splitlines().count(f"note: {note}") == 1  # once, not per rank
