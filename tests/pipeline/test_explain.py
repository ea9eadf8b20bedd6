"""`syncopy explain`: the instruction graph one rank runs, as text or DOT, and one-line mistakes."""
from __future__ import annotations

import pytest

from syncopy import explain
from syncopy.cli import main


def test_explain_tp_mlp_shows_the_down_projection_waiting_on_the_up_projections_signals(capsys):
    assert main(["explain", "tp_mlp", "--world", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "rank 0 of 2: 36 instructions (5 alloc, 4 copy, 4 send, 2 recv, 2 reduce, 12 signal, 2 launch, 5 free)"
    announced = [line.split()[0] for line in lines if "'C' chunk" not in line and "for the next operator" in line]
    assert len(announced) == 4
    (down,) = [line for line in lines if "launch [mlp_down_kernel]" in line]
    assert down.endswith(f"waits {','.join(announced)} (device)")
    (up,) = [line for line in lines if "launch [mlp_up_kernel]" in line]
    assert up.endswith("after 1,2,3  waits 4,5,7,9 (device)")  # its own chunks and the peer's two


def test_the_graph_is_built_once_per_arguments():
    assert explain.for_template("gemm_rs", 3, 1) is explain.for_template("gemm_rs", 3, 1)


def test_every_send_of_a_relay_comes_after_its_chunk_landed():
    g = explain.for_template("ag_gemm", 4, 2)
    by_id = {n.id: n for n in g.nodes}
    for n in (n for n in g.nodes if n.kind == "send"):
        chunk = n.what.split()[1]
        assert any(by_id[a].kind == "signal" and f"chunk {chunk} " in by_id[a].what for a in n.after), n


def test_explain_dot(capsys):
    assert main(["explain", "ag_gemm", "--world", "3", "--rank", "2", "--dot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('digraph "rank 2" {') and '[style=dashed, label="tiles wait"]' in out and out.rstrip().endswith("}")


def test_explain_a_rank_outside_the_world_is_one_line(capsys):
    assert main(["explain", "ag_gemm", "--world", "2", "--rank", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--rank 2: not a rank of --world 2; pass 0..1" in err


def test_explain_a_kernel_file_lists_each_rewrite_kept_as_written_at_its_line(capsys):
    # Issue 30 A: an unproven loop order is kept as written, and `syncopy explain` says so at the loop.
    from pathlib import Path

    case = Path(__file__).parents[1] / "golden" / "loop_written_unguarded_softmax"
    kernel = str(case / "kernel.py")
    assert main(["explain", kernel, "--schedule", str(case / "schedule.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"kernel padded_attention of {kernel}, all_gather of KV:"
    loop = next(i for i, line in enumerate((case / "kernel.py").read_text().splitlines(), 1) if line.strip().startswith("for "))
    assert lines[1].startswith(f"  {kernel}:{loop}: syncopy: this loop keeps its written order (each iteration waits for its "
                               "own chunks): it carries 'acc' from iteration to iteration (rescaled by exp(max before - max "
                               "after) without the first-block guard")


@pytest.mark.parametrize("argv, message", [
    (["explain", "ag_gemm"], "syncopy explain ag_gemm: a template's graph needs --world N (the number of ranks)"),
    (["explain", "k.py"], "syncopy explain k.py: a kernel file needs --schedule S.yaml (the schedule naming its kernel)"),
], ids=["template-without-world", "kernel-without-schedule"])
def test_explain_without_what_it_needs_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
