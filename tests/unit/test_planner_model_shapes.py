"""benchmarks/model_shapes.py: every template appears, output is labelled as predictions."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "model_shapes.py"


@pytest.fixture(scope="module")
def model_shapes():
    spec = importlib.util.spec_from_file_location("model_shapes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_layers_cover_every_template_at_every_tp(model_shapes):
    rows = model_shapes.layers(8192)
    assert {r["template"] for r in rows} == {"ag_gemm", "gemm_rs", "gemm_ar", "a2a_gemm", "ag_rmsnorm", "ag_attention"}
    assert {r["tp"] for r in rows} == {2, 4, 8}
    qkv_70b_tp8 = next(r for r in rows if r["model"] == "Llama-3-70B" and r["layer"] == "attn.qkv" and r["tp"] == 8)
    assert qkv_70b_tp8["shape"] == (8192, (64 + 16) * 128 // 8, 8192)
    cp_8b_tp4 = next(r for r in rows if r["model"] == "Llama-3-8B" and r["layer"] == "attn.cp" and r["tp"] == 4)
    assert cp_8b_tp4["shape"] == (16 * 8192, 16 * 8192 // 4 * 32 // 8, 8 * 128)  # keys, query rows x GQA group, K width


def test_json_is_labelled_and_summarised(model_shapes, capsys):
    assert model_shapes.main(["--json", "--tokens", "1024", "--hardware", "a100-nvlink"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["label"].startswith("PREDICTIONS") and doc["paper"]["average"] == 1.3 and doc["paper"]["best"] == 4.7
    assert doc["summary"]["a100-nvlink"]["best"] >= doc["summary"]["a100-nvlink"]["mean"] >= 1.0
    assert all({"speedup", "chunks_per_rank", "order", "model", "layer", "tp"} <= set(r) for r in doc["records"])


def test_text_table_is_labelled(model_shapes, capsys):
    records = [r for r in model_shapes.predict(1024, ["h100-pcie"]) if r["tp"] == 8]
    model_shapes.print_report(records, ["h100-pcie"], 1024)
    out = capsys.readouterr().out
    assert out.startswith("PREDICTIONS") and "Syncopate reports" in out and "Mixtral-8x7B" in out
