"""`syncopy plan`: text and JSON output, and one-line errors with exit status 2."""
import argparse
import json

import pytest

from syncopy.planner import command
from syncopy.planner.hardware import profile_names
from syncopy.planner.workloads import TEMPLATES


def plan(capsys, *argv):
    parser = argparse.ArgumentParser(prog="syncopy plan")
    command.add_arguments(parser)
    status = command.run(parser.parse_args(list(argv)))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_text_report(capsys):
    status, out, err = plan(capsys, "ag_gemm", "--world", "8", "--shape", "8192,4096,4096", "--hardware", "h100-pcie")
    assert status == 0 and err == ""
    assert out.startswith("syncopy plan ag_gemm: all_gather of A rows, then A @ B  [PREDICTION")
    for label in ("sequential", "stream overlap", "fused", "speedup", "choice", "why"):
        assert f"\n  {label} " in out
    assert "chunks_per_rank: " in out and "order: " in out and "h100-pcie" in out


def test_json_report(capsys):
    argv = ["gemm_rs", "--world", "4", "--shape", "8192,8192,2048", "--hardware", "a100-nvlink", "--dtype", "fp16", "--json"]
    status, out, _ = plan(capsys, *argv)
    data = json.loads(out)
    assert status == 0
    for key in ("sequential_ms", "stream_overlap_ms", "fused_ms", "chunks_per_rank", "order", "speedup", "reason", "hardware"):
        assert key in data
    assert data["hardware"] == "a100-nvlink" and data["dtype"] == "fp16" and data["shape"] == [8192, 8192, 2048]
    assert data["speedup"] == pytest.approx(data["sequential_ms"] / data["fused_ms"])
    assert isinstance(data["chunks_per_rank"], int) and data["order"] in ("ring", "bidirectional_ring", "local_first")


@pytest.mark.parametrize("hardware", profile_names())
@pytest.mark.parametrize("template", list(TEMPLATES))
def test_every_template_on_every_profile(capsys, template, hardware):
    shape = "512,256,256" if hardware == "cpu-gloo" else "8192,4096,4096"
    status, out, _ = plan(capsys, template, "--world", "4", "--shape", shape, "--hardware", hardware, "--json")
    assert status == 0 and json.loads(out)["fused_ms"] > 0


def test_rmsnorm_takes_two_dimensions(capsys):
    status, out, _ = plan(capsys, "ag_rmsnorm", "--world", "2", "--shape", "4096,8192")
    assert status == 0 and "M=4096 N=8192" in out


def test_a_user_profile_file(capsys, tmp_path):
    from syncopy.planner.hardware import load_profile, save_profile

    path = save_profile(load_profile("h100-nvlink").replace(("name",), "my-box"), tmp_path / "box.yaml")
    status, out, _ = plan(capsys, "ag_gemm", "--world", "2", "--shape", "4096,4096,4096", "--hardware", str(path), "--json")
    assert status == 0 and json.loads(out)["hardware"] == "my-box"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ag_gem", "--world", "2", "--shape", "64,64,64"], "unknown template 'ag_gem'; use one of ag_gemm"),
        (["ag_gemm", "--world", "2", "--shape", "64,64,64", "--hardware", "b200"], "unknown hardware profile 'b200'"),
        (["ag_gemm", "--world", "2", "--shape", "64x64x64"], "shape '64x64x64' is not M,N,K"),
        (["ag_gemm", "--world", "2", "--shape", "64,64"], "shape '64,64' is not M,N,K"),
        (["ag_gemm", "--world", "2", "--shape", "64,0,64"], "as positive integers"),
        (["ag_gemm", "--world", "0", "--shape", "64,64,64"], "world is 0"),
        (["ag_gemm", "--world", "16", "--shape", "64,64,64"], "--world <= 8"),
        (["ag_gemm", "--world", "2", "--shape", "64,64,64", "--backend", "mpi"], "has no backend 'mpi'"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_status_2(capsys, argv, message):
    status, out, err = plan(capsys, *argv)
    assert status == 2 and out == ""
    assert err.startswith("syncopy plan: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_planner_knows_every_shipped_template():
    from syncopy import templates

    assert {n for n, t in templates.available().items() if not t.pipeline} <= set(TEMPLATES)  # the planner plans one operator


def test_a_huge_shape_is_planned_at_once(capsys):
    # The planner's cost does not grow with M (it once looped over M's row tiles: minutes and GBs
    # here); test_planner_simulate counts its steps, this is the user's command end to end.
    status, out, err = plan(capsys, "ag_gemm", "--world", "8", "--shape", "1000000000,8,8")
    assert status == 0 and err == ""
    assert "M=1000000000 N=8 K=8" in out


@pytest.mark.parametrize("template", ["ag_gemm", "gemm_rs", "ag_rmsnorm"])
def test_an_absurd_shape_is_one_line_and_status_2(capsys, template):
    status, out, err = plan(capsys, template, "--world", "8", "--shape", "1000000000000,1000000000,8")
    assert status == 2 and out == ""
    assert err.startswith("syncopy plan: shape 1000000000000,1000000000,8: ") and "more than the planner's limit" in err
    assert err.count("\n") == 1 and "Traceback" not in err
