"""tp_mlp on one GPU, a world of one rank: when each tile of op 1 (all-gather + GEMM, the up projection,
which produces H) and of op 2 (GEMM + reduce-scatter, the down projection, which waits for H's chunks)
started, read from the device's %globaltimer by the traced kernels. From its second launch op 2 runs
on the pipeline's side stream beside op 1 (runtime/pipeline/__init__.py, "Streams"), so its first tiles start
on op 1's first finished chunks of H, long before op 1's last tile.

    python benchmarks/pipeline_gpu.py --json OUT.json [--png OUT.png]   # on a CUDA machine
    python benchmarks/pipeline_gpu.py --plot OUT.json --png OUT.png     # draw a saved run anywhere

Prints the placement, the error against torch, and when op 2's first tile and op 1's last tile
started (microseconds from op 1's first tile); the picture has one lane per operator, a mark per tile.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WRAP = 1 << 31  # the kernels' clocks are microseconds modulo 2^31


def run(m: int = 1024, f: int = 4096, chunks: int = 4, launches: int = 3) -> dict:
    import torch
    import torch.distributed as dist
    import triton

    from syncopy import templates
    from syncopy.runtime.streams.occupancy import sm_count
    from syncopy.runtime.worlds.processes import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    n = 32 * min(2, (sm_count(device) - 1) // triton.cdiv(m, 16))  # op 2's programs leave op 1 an SM (place())
    spec = templates.get("tp_mlp")
    op = spec.fused(chunks_per_rank=chunks, timeout_s=20.0, trace=True)
    for seed in range(launches):
        inp = {k: v.to(device) for k, v in spec.module.inputs(0, 1, (m, n, f), torch.float16, seed=seed).items()}
        y = spec.module.launch(op, **inp, group=None)
        op.pipeline.synchronize()
    x, w1, w2 = (inp[k].float() for k in ("x", "w1", "w2"))
    ref = torch.nn.functional.gelu(x @ w1, approximate="tanh").half().float() @ w2
    err = float((y.float() - ref).abs().max()) / max(1.0, float(ref.abs().max()))
    up, down = op.pipeline.last_traces
    t0 = min(up.clock_starts)
    rec = {"device": torch.cuda.get_device_name(), "shape": [m, n, f], "chunks_per_rank": chunks, "max_rel_err": err,
           "side": op.pipeline.placement.side, "why": op.pipeline.placement.why,
           "op1_starts_us": sorted((t - t0) % WRAP for t in up.clock_starts),
           "op2_starts_us": sorted((t - t0) % WRAP for t in down.clock_starts)}
    dist.destroy_process_group()
    return rec


def summary(rec: dict) -> str:
    one, two = rec["op1_starts_us"], rec["op2_starts_us"]
    before = sum(1 for t in two if t < one[-1])
    return (f"{rec['device']}: tp_mlp {rec['shape'][0]}x{rec['shape'][1]}x{rec['shape'][2]} (m, n, f), world 1, "
            f"{rec['chunks_per_rank']} chunks of H; op 2 beside op 1: {rec['side']} ({rec['why']}); max relative error "
            f"{rec['max_rel_err']:.1e}\n  op 1: {len(one)} tiles started {one[0]}..{one[-1]} us; op 2: {len(two)} tiles started "
            f"{two[0]}..{two[-1]} us; {before} of op 2's tiles started before op 1's last tile")


def plot(rec: dict, path: str) -> None:
    """Tiles started per microsecond, one panel per operator (the device clock counts microseconds)."""
    import collections

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 3.6), sharex=True)
    lanes = (("op2_starts_us", "op 2: GEMM + reduce-scatter\n(waits for H's chunks)", "tab:orange"),
             ("op1_starts_us", "op 1: all-gather + GEMM\n(writes H)", "tab:blue"))
    for ax, (key, label, color) in zip(axes, lanes):
        per_us = collections.Counter(int(t) for t in rec[key])
        ax.bar(list(per_us), list(per_us.values()), width=0.9, color=color)
        ax.set_ylabel(f"{label}\ntiles started ({len(rec[key])})", fontsize=8)
        ax.axvline(rec["op1_starts_us"][-1], color="tab:blue", linestyle=":", linewidth=1)  # op 1's last tile
    axes[-1].set_xlabel("us from op 1's first tile (device %globaltimer); dotted: op 1's last tile started")
    m, n, f = rec["shape"]
    axes[0].set_title(f"tp_mlp on one GPU ({rec['device']}), {m}x{n}x{f}, {rec['chunks_per_rank']} chunks of H: "
                      "op 2's tiles start as H's chunks finish, while op 1's still start", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the tile starts here")
    p.add_argument("--png", help="draw them here (matplotlib)")
    p.add_argument("--plot", metavar="JSON", help="draw a saved run instead of running")
    a = p.parse_args(argv)
    if a.plot:
        with open(a.plot) as fh:
            rec = json.load(fh)
    else:
        os.environ.setdefault("TRITON_INTERPRET", "0")
        rec = run()
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(rec, fh)
    print(summary(rec), flush=True)
    if a.png:
        try:
            plot(rec, a.png)
        except ImportError as exc:
            print(f"no picture: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
