"""What `verify_chunks=True` costs on a CPU world: the same template operator with and without chunk
checksums, launched alternately on one world (so both see the same load), and the checksum's own
throughput (CRC-32 and packing on the sender, unpacking and CRC-32 on the receiver) per MiB.

    TRITON_INTERPRET=1 python benchmarks/verify_cost_cpu.py [--world 2] [--shape 256,32,64] [--reps 10] [--template ag_gemm] [--json OUT]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rank(rank: int, world: int, name: str, shape: tuple, reps: int) -> dict:
    import torch

    from syncopy import templates

    torch.set_num_threads(1)
    t = templates.get(name)
    mod = t.module
    ops = {"plain": t.fused(poison_receive=True), "verify": t.fused(poison_receive=True, verify_chunks=True)}
    times: dict[str, list[float]] = {k: [] for k in ops}
    for it in range(reps + 1):
        inp = mod.inputs(rank, world, shape, torch.float32, seed=it)
        for key in (("plain", "verify") if it % 2 else ("verify", "plain")):  # neither always goes first
            op = ops[key]
            start = time.perf_counter()
            out = mod.launch(op, **inp)
            if it:  # launch 0 builds the kernel and the context
                times[key].append(time.perf_counter() - start)
            ref = mod.reference(**inp)
            assert torch.allclose(out, ref, rtol=1e-3, atol=1e-3), f"rank {rank} {key}: wrong result"
    return {k: statistics.median(v) for k, v in times.items()}


def checksum_throughput(mib: int = 16, reps: int = 5) -> dict:
    """Seconds per MiB of the sender's crc + pack and the receiver's check + unpack (one core)."""
    import torch

    from syncopy.runtime.transport.backends import checksum

    data = torch.randn(mib * (1 << 20) // 4)
    send, recv = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        message = checksum.pack(data, checksum.crc(data))
        t1 = time.perf_counter()
        _, ok = checksum.check(message)
        torch.empty_like(data).copy_(checksum.payload(message, data))
        t2 = time.perf_counter()
        assert ok
        send.append((t1 - t0) / mib)
        recv.append((t2 - t1) / mib)
    return {"send_ms_per_mib": round(min(send) * 1e3, 3), "recv_ms_per_mib": round(min(recv) * 1e3, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--template", default="ag_gemm")
    p.add_argument("--shape", default="256,32,64", help="M,N,K as `syncopy run --shape` takes them")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json", metavar="OUT", help="also write the figures printed as JSON")
    args = p.parse_args(argv)
    from syncopy.runtime.worlds.processes import spawn

    shape = tuple(int(x) for x in args.shape.split(","))
    results = spawn(_rank, args.world, args.template, shape, args.reps, timeout_s=900)
    plain = max(r["plain"] for r in results)  # the operator is done when every rank is
    verify = max(r["verify"] for r in results)
    print(f"{args.template} world {args.world} shape {args.shape}, median of {args.reps} launches (slowest rank): "
          f"plain {plain * 1e3:.1f} ms, verify_chunks {verify * 1e3:.1f} ms ({(verify / plain - 1) * 100:+.1f}%)")
    tp = checksum_throughput()
    print(f"checksums alone: sender {tp['send_ms_per_mib']} ms/MiB (CRC-32 + pack), receiver {tp['recv_ms_per_mib']} ms/MiB "
          "(check + unpack)")
    if args.json:
        import json
        import os

        figures = {"template": args.template, "world": args.world, "shape": args.shape, "reps": args.reps,
                   "plain_ms": round(plain * 1e3, 1), "verify_chunks_ms": round(verify * 1e3, 1),
                   "verify_over_plain_pct": round((verify / plain - 1) * 100, 1), **tp,
                   "load_average_1min": round(os.getloadavg()[0], 1)}
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
