"""PREDICTED speedups of syncopy's templates on the tensor-parallel layers of real models.

Everything printed here comes from syncopy.planner (an alpha-beta + roofline cost model and a
discrete-event simulator with published peak figures), not from a measurement. It answers: for
the GEMMs a tensor-parallel Llama-3 or an expert-parallel Mixtral layer runs, how much would a
fused kernel gain over running the collective and then the kernel, and over stream-level
overlap (one GEMM per chunk, AsyncTP style), at the chunk count the planner picks?

Layers (Megatron-style tensor parallelism with sequence parallelism, `tokens` tokens in flight):
    attn.qkv   ag_gemm    M=tokens  K=hidden          N=(heads + 2 kv_heads) * 128 / TP
    attn.o     gemm_rs    M=tokens  K=heads * 128/TP  N=hidden       (gemm_ar without SP)
    mlp.up     ag_gemm    M=tokens  K=hidden          N=2 * ffn / TP (gate and up fused)
    mlp.down   gemm_rs    M=tokens  K=ffn / TP        N=hidden       (gemm_ar without SP)
    norm       ag_rmsnorm M=tokens  N=hidden
    moe        a2a_gemm   M=2 * tokens / EP (top-2)   K=hidden  N=2 * ffn  (Mixtral-8x7B, EP=TP)
    attn.cp    ag_attention  long context, 16 * tokens in all, context parallel over CP=TP ranks:
                          M=16 * tokens keys  N=16 * tokens / CP * heads / kv_heads query rows  K=kv_heads * 128
                          (grouped-query heads folded into the query rows; non-causal)

    python benchmarks/model_shapes.py [--json] [--tokens 8192] [--hardware h100-nvlink ...]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from syncopy import progress  # noqa: E402
from syncopy.planner import choose_for, load_profile, make_workload  # noqa: E402

GPU_PROFILES = ("h100-nvlink", "h200-nvlink", "a100-nvlink", "h100-pcie")
PAPER = {"average": 1.3, "best": 4.7}  # Syncopate, measured end to end on its own workloads
HEAD_DIM = 128
LONG = 16  # the long-context attention layer sees this many times `tokens` in all (context parallelism)

LLAMA3 = {  # Llama-3 configs (hidden size, MLP size, attention heads, KV heads)
    "Llama-3-8B": (4096, 14336, 32, 8),
    "Llama-3-70B": (8192, 28672, 64, 8),
    "Llama-3-405B": (16384, 53248, 128, 8),
}
MIXTRAL = ("Mixtral-8x7B", 4096, 14336)  # hidden, expert MLP size; 8 experts, top-2


def layers(tokens: int, tps=(2, 4, 8)) -> list[dict]:
    """Every (model, layer, template, TP, shape) the table covers."""
    rows = []
    for tp in tps:
        for model, (hidden, ffn, heads, kv) in LLAMA3.items():
            for layer, template, (m, n, k) in [
                ("attn.qkv", "ag_gemm", (tokens, (heads + 2 * kv) * HEAD_DIM // tp, hidden)),
                ("attn.o", "gemm_rs", (tokens, hidden, heads * HEAD_DIM // tp)),
                ("attn.o", "gemm_ar", (tokens, hidden, heads * HEAD_DIM // tp)),
                ("mlp.up", "ag_gemm", (tokens, 2 * ffn // tp, hidden)),
                ("mlp.down", "gemm_rs", (tokens, hidden, ffn // tp)),
                ("mlp.down", "gemm_ar", (tokens, hidden, ffn // tp)),
                ("norm", "ag_rmsnorm", (tokens, hidden, 1)),
                ("attn.cp", "ag_attention", (LONG * tokens, LONG * tokens // tp * heads // kv, kv * HEAD_DIM)),
            ]:
                rows.append({"model": model, "layer": layer, "template": template, "tp": tp, "shape": (m, n, k)})
        name, hidden, ffn = MIXTRAL
        rows.append({"model": name, "layer": "moe", "template": "a2a_gemm", "tp": tp, "shape": (2 * tokens // tp, 2 * ffn, hidden)})
    return rows


def predict(tokens: int, hardware: list[str]) -> list[dict]:
    """One record per (layer, profile): the plan's JSON plus where it came from."""
    profiles = [load_profile(h) for h in hardware]
    records = []
    for row in progress.steps(layers(tokens), f"planning {len(hardware)} profile(s)"):
        workload = make_workload(row["template"], *row["shape"], dtype="bf16")
        for profile in profiles:
            plan = choose_for(workload, profile, row["tp"]).to_json()
            plan.pop("candidates")
            records.append({**row, "shape": list(row["shape"]), **plan})
    return records


def summary(records: list[dict], hardware: list[str]) -> dict:
    """Mean, geometric mean, best and worst predicted speedup per profile."""
    out = {}
    for h in hardware:
        speedups = [r["speedup"] for r in records if r["hardware"] == h]
        versus_stream = [r["speedup_vs_stream"] for r in records if r["hardware"] == h]
        out[h] = {
            "mean": statistics.fmean(speedups),
            "geomean": math.exp(statistics.fmean(math.log(s) for s in speedups)),
            "best": max(speedups),
            "worst": min(speedups),
            "mean_vs_stream": statistics.fmean(versus_stream),
        }
    return out


def table(records: list[dict], hardware: list[str]) -> list[list[str]]:
    """Header and rows: one row per layer, one column per profile ("1.42x c4 ring")."""
    header = ["model", "layer", "template", "TP", "M,N,K"] + list(hardware)
    by_key: dict[tuple, dict[str, dict]] = {}
    for r in records:
        key = (r["model"], r["layer"], r["template"], r["tp"], ",".join(map(str, r["shape"])))
        by_key.setdefault(key, {})[r["hardware"]] = r
    rows = []
    for key, plans in by_key.items():
        cells = [f"{plans[h]['speedup']:.2f}x c{plans[h]['chunks_per_rank']} {_short(plans[h]['order'])}" for h in hardware]
        rows.append([key[0], key[1], key[2], str(key[3]), key[4]] + cells)
    return [header] + rows


def _short(order: str) -> str:
    return {"ring": "ring", "bidirectional_ring": "bidir", "local_first": "direct"}[order]


def render(rows: list[list[str]]) -> str:
    """Plain-text table (rich is used instead when it is installed)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    line = lambda r: "  ".join(c.ljust(w) if i < 5 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(rows[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in rows[1:]])


def print_report(records: list[dict], hardware: list[str], tokens: int) -> None:
    rows = table(records, hardware)
    title = f"PREDICTIONS (syncopy.planner cost model, not measurements): fused vs sequential, bf16, {tokens} tokens"
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        print("cell: predicted speedup over sequential, chosen chunks_per_rank, order\n")
        print(render(rows))
    else:
        t = Table(title=title, caption="cell: predicted speedup over sequential, chosen chunks_per_rank, order")
        for i, name in enumerate(rows[0]):
            t.add_column(name, justify="right" if i >= 5 else "left")
        for row in rows[1:]:
            t.add_row(*row)
        Console().print(t)
    print()
    for h, s in summary(records, hardware).items():
        print(
            f"{h:12s} predicted speedup: mean {s['mean']:.2f}x, geomean {s['geomean']:.2f}x, best {s['best']:.2f}x, "
            f"worst {s['worst']:.2f}x; over stream-level overlap: mean {s['mean_vs_stream']:.2f}x"
        )
    print(
        f"for context, Syncopate reports (measured, end to end, its own workloads): {PAPER['average']}x average, "
        f"up to {PAPER['best']}x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the records and summary as JSON")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens in flight per layer (default 8192)")
    parser.add_argument("--hardware", nargs="+", default=list(GPU_PROFILES), help="profiles (default: the GPU ones)")
    args = parser.parse_args(argv)
    try:
        records = predict(args.tokens, args.hardware)
    except ValueError as exc:
        print(f"model_shapes: {exc}", file=sys.stderr)
        return 2
    if args.json:
        doc = {
            "label": "PREDICTIONS from syncopy.planner, not measurements",
            "tokens": args.tokens,
            "dtype": "bf16",
            "paper": {**PAPER, "note": "Syncopate's reported end-to-end speedups, for context"},
            "summary": summary(records, args.hardware),
            "records": records,
        }
        print(json.dumps(doc, indent=2))
    else:
        print_report(records, args.hardware, args.tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
