"""Host time of a warm loopback launch, Python part only, on CPU: the fused kernel's launch and the
stream operations are stubbed (counted), so what is timed is syncopy's own work per launch
(binding, caches, the enqueue sequence). `--profile` prints cProfile's top entries.

    TRITON_INTERPRET=1 python benchmarks/host_launch_cpu.py [--launches 1500] [--repeats 5] [--profile]

The GPU numbers (real driver calls and Triton's launcher) come from gpu_bench.py `host_launch`.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
import triton

import syncopy
from syncopy.runtime.worlds.loopback import LoopbackWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

WORLD, ROWS, N, K, CHUNKS = 4, 16, 16, 16, 4
META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)


class _NoKernel:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


class _CountingOps:
    """Every stream operation is a counted no-op; events are always done."""

    device_type = "cpu"

    def __init__(self):
        self.calls = 0

    @staticmethod
    def handle(stream):
        return stream

    @staticmethod
    def done(event):
        return True

    def __getattr__(self, name):
        def op(*args, **kwargs):
            self.calls += 1

        return op


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--launches", type=int, default=1500)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args(argv)
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=CHUNKS, order="ring"))(ag_gemm_kernel)
    lw = LoopbackWorld(fk, WORLD, 0, device="cpu")
    shards = [torch.randn(ROWS, K) for _ in range(WORLD)]
    b, m = torch.randn(K, N), ROWS * WORLD
    c, s = torch.empty(m, N), shards[0]
    grid = (triton.cdiv(m, 16) * triton.cdiv(N, 16),)
    args = (s, b, c, m, N, K, s.stride(0), s.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    lw.launch(grid, args, dict(META), shards)  # cold: context, probe, order
    fk.kernel._built = fk.kernel.built._replace(fused=_NoKernel())
    ops = lw.ops = lw.engine.ops = _CountingOps()
    loops = list(lw.loops.values())
    for loop in loops:
        loop.errors.ops = ops

    def run():  # each launch reads the error words of the one before (done: the stub's events always are)
        for _ in range(a.launches):
            lw.launch(grid, args, dict(META), shards, sync=False)

    run()
    times = []
    for _ in range(a.repeats):
        t0, ops.calls = time.perf_counter(), 0
        run()
        times.append((time.perf_counter() - t0) / a.launches * 1e6)
    print(f"warm launch, Python part: {min(times):.1f} us (best of {a.repeats}), {ops.calls / a.launches:.0f} stream operations "
          f"(world {WORLD}, {CHUNKS} chunks per rank)")
    if a.profile:
        prof = cProfile.Profile()
        prof.runcall(run)
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
