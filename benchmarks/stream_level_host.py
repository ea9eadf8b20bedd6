"""Is the stream-level AG-GEMM baseline host-bound on this machine? The decomposition gpu_bench.py
compares against (a GEMM on the local rows, then per remote chunk: a copy on a side stream, an
event, a GEMM on its rows) costs 13 Triton launches, 12 copies and 24 event calls per call. This
prints its host time per call against its GPU time per call back to back, and the same work
replayed as one CUDA graph (no host bound), with one chunk's GEMM and copy alone.

    python benchmarks/stream_level_host.py [--json OUT]     (needs a CUDA device)

On the H100 of 2026-11-26 (benchmarks/results/h100-2026-11-26-s8): host 1022-1146 us per call
against GPU 1034-1141 us (host-bound); replayed as a graph 1020 us per call.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench as gb  # noqa: E402

from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel  # noqa: E402


def _host_us(fn, n: int = 30) -> float:
    """Median host time of one call, call to return (the GPU drained between calls)."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", metavar="OUT")
    a = p.parse_args(argv)
    meta = gb.META
    m, n, k, world, chunks = 8192, 8192, 4096, 4, 4
    rows = m // world
    peers = [torch.randn(rows, k, dtype=torch.float16).pin_memory() for _ in range(world)]
    full = torch.cat(peers).cuda()
    b = torch.randn(k, n, dtype=torch.float16, device="cuda")
    c = torch.empty(m, n, dtype=torch.float16, device="cuda")
    gathered = torch.empty(m, k, dtype=torch.float16, device="cuda")
    side = torch.cuda.Stream(priority=-1)
    shard0 = full[:rows].contiguous()
    bounds = [(src * rows + i * rows // chunks, src * rows + (i + 1) * rows // chunks) for src in range(1, world) for i in range(chunks)]
    moves = [(gathered[lo:hi], peers[lo // rows][lo - (lo // rows) * rows: hi - (lo // rows) * rows]) for lo, hi in bounds]
    tiles = lambda r: (triton.cdiv(r, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731

    def stream_level():  # as gpu_bench.ag_gemm_case's
        cur = torch.cuda.current_stream()
        side.wait_stream(cur)
        gathered[:rows].copy_(shard0)
        ag_gemm_kernel[tiles(rows)](*gb._args(gathered[:rows], b, c[:rows], rows, n, k), **meta)
        for (lo, hi), (dst, src) in zip(bounds, moves):
            with torch.cuda.stream(side):
                dst.copy_(src, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(side)
            cur.wait_event(ev)
            ag_gemm_kernel[tiles(hi - lo)](*gb._args(gathered[lo:hi], b, c[lo:hi], hi - lo, n, k), **meta)

    (lo, hi), (dst, src) = bounds[0], moves[0]
    one_gemm = lambda: ag_gemm_kernel[tiles(hi - lo)](*gb._args(gathered[lo:hi], b, c[lo:hi], hi - lo, n, k), **meta)  # noqa: E731
    out = dict(device=torch.cuda.get_device_name(), m=m, n=n, k=k, world=world, chunks=chunks)
    out["host_us"], out["gpu_us"] = _host_us(stream_level), gb._pipelined(stream_level, iters=20) * 1e3
    print(f"stream-level: host {out['host_us']:.0f} us per call, GPU {out['gpu_us']:.0f} us per call back to back")
    out["chunk_gemm_gpu_us"], out["chunk_gemm_host_us"] = gb._pipelined(one_gemm, iters=50) * 1e3, _host_us(one_gemm)
    out["chunk_copy_gpu_us"] = gb._pipelined(lambda: dst.copy_(src, non_blocking=True), iters=50) * 1e3
    print(f"one chunk's GEMM: GPU {out['chunk_gemm_gpu_us']:.1f} us, host {out['chunk_gemm_host_us']:.1f} us; "
          f"one chunk's copy: GPU {out['chunk_copy_gpu_us']:.1f} us")
    replay = gb._graphed(stream_level)
    out["graph_host_us"], out["graph_gpu_us"] = _host_us(replay), gb._pipelined(replay, iters=20) * 1e3
    print(f"stream-level as a CUDA graph: host {out['graph_host_us']:.0f} us per replay, GPU {out['graph_gpu_us']:.0f} us per replay back to back")
    c.zero_()
    replay()
    torch.cuda.synchronize()
    ref = full.float() @ b.float()
    out["graph_max_rel_err"] = ((c.float() - ref).abs().max() / ref.abs().max()).item()
    print(f"graph result: max relative error {out['graph_max_rel_err']:.1e}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
