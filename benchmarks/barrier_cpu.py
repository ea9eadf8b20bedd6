"""The p2p backend's per-launch barrier: gloo's barrier vs control.NodeBarrier (a file every rank
maps), in one run on real processes of this host.

    python benchmarks/barrier_cpu.py [--json OUT.json] [--worlds 2,4] [--rounds 300]

Every p2p launch starts with a barrier (no rank may push into a peer whose previous kernel still
reads its buffer); its latency is paid by every launch. Per world size, each rank runs `--rounds`
barriers of each kind after a warm-up; the report gives the slowest rank's mean per barrier. The
ranks are CPU processes joined by gloo, as the p2p backend's control group is on a GPU node.
"""
from __future__ import annotations

import argparse
import json
import os
import time


def _measure(rank: int, world: int, rounds: int) -> dict:
    import torch.distributed as dist

    from syncopy.runtime.transport.backends.control import control_group, node_barrier

    group = dist.group.WORLD
    control = control_group(group)
    shm = node_barrier(group, timeout_s=60)
    out = {}
    for name, wait in (("gloo", lambda i: dist.barrier(group=control)), ("node", lambda i: shm.wait(f"round {i}"))):
        for i in range(20):
            wait(i)
        t = time.perf_counter()
        for i in range(rounds):
            wait(i)
        out[name] = (time.perf_counter() - t) / rounds * 1e6
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="OUT", help="write the figures here too")
    p.add_argument("--worlds", default="2,4", help="world sizes, comma-separated (default: 2,4)")
    p.add_argument("--rounds", type=int, default=300, help="timed barriers per kind (default: 300)")
    a = p.parse_args(argv)
    from syncopy.runtime.worlds.processes import spawn

    rows = []
    print(f"barrier latency, {os.cpu_count()} CPUs, {a.rounds} rounds (slowest rank's mean):")
    for world in (int(w) for w in a.worlds.split(",")):
        per_rank = spawn(_measure, world, a.rounds, timeout_s=600)
        gloo, node = max(r["gloo"] for r in per_rank), max(r["node"] for r in per_rank)
        rows.append(dict(world=world, gloo_us=gloo, node_us=node, speedup=gloo / node))
        print(f"  world {world}: gloo {gloo:8.1f} us   node barrier {node:7.1f} us   ({gloo / node:.0f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(cpus=os.cpu_count(), rounds=a.rounds, rows=rows), f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
