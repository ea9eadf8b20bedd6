"""Where the host time of a warm fused launch goes (a CUDA machine): each driver call the launch makes,
timed alone, and the launch itself under cProfile.

    python benchmarks/host_profile.py [--quick] [--json OUT] [--profile-top 30]

Prints, in microseconds of host time (call to return, median of bursts; the GPU is synchronised
between bursts so that no call waits for a full queue):
  - each stream operation of `runtime/streamops.CudaOps` a loopback launch makes (a chunk copy from
    pinned memory, a 4-byte copy, a write-value, a batch of write-values, an event record, a stream
    wait on an event, an event query), and `torch.cuda.current_stream()`;
  - the bare Triton launch of the local kernel and the fused launch on the loopback world, with and
    without the GPU idle before each call (a launch whose host time grows with the queue waits for
    the device somewhere);
  - the fused launch's functions by own time (cProfile), so that the next cut is measured, not guessed.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402

from gpu_bench import warm_launch_case  # noqa: E402
from syncopy.runtime.streams import streamops  # noqa: E402


def timed(fn, calls: int = 200, burst: int = 20, idle: bool = False) -> float:
    """Median host microseconds of `fn()`; the GPU is synchronised between bursts (and before every
    call with `idle`)."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(calls // burst):
        for _ in range(burst):
            if idle:
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def stream_ops(chunk_bytes: int) -> dict:
    """Each driver call of a launch, alone (see module doc)."""
    ops = streamops.cuda_ops()
    side, flags = torch.cuda.Stream(), torch.cuda.Stream()
    hs, hf = ops.handle(side), ops.handle(flags)
    src = torch.empty(chunk_bytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(chunk_bytes, dtype=torch.uint8, device="cuda")
    words = torch.zeros(64, dtype=torch.int32, device="cuda")
    mirror = torch.zeros(1, dtype=torch.int32).pin_memory()
    ev = ops.event()
    batch = ops.batch([(words.data_ptr() + 4 * i, None) for i in range(8)])
    n = [0]

    def step():
        n[0] += 1
        return n[0]

    res = {
        "copy_chunk_h2d": timed(lambda: ops.copy(dst.data_ptr(), src.data_ptr(), chunk_bytes, hs), calls=100, burst=10),
        "copy_4_bytes_h2d": timed(lambda: ops.copy(words.data_ptr(), mirror.data_ptr(), 4, hs)),
        "write32": timed(lambda: ops.write32(words.data_ptr(), step(), hs)),
        "write_batch_8": timed(lambda: ops.write_batch(batch, step(), hs)),
        "event_record": timed(lambda: ops.record(ev, hs)),
        "wait_event": timed(lambda: ops.wait_event(hf, ev)),
        "event_query": timed(lambda: ops.done(ev)),
        "current_stream": timed(lambda: torch.cuda.current_stream()),
    }

    def chunk_own_stream():  # what flags="own-stream" issues per chunk
        ops.copy(dst.data_ptr(), src.data_ptr(), chunk_bytes, hs)
        ops.record(ev, hs)
        ops.wait_event(hf, ev)
        ops.write32(words.data_ptr(), step(), hf)

    res["chunk_own_stream"] = timed(chunk_own_stream, calls=100, burst=10)
    return res


def launches(m: int, n: int, k: int, world: int, chunks: int, top: int) -> dict:
    fused, bare, lw = warm_launch_case(m, n, k, world, chunks)
    fused()
    lw.synchronize()
    res = {
        "bare_us": timed(bare, calls=80, burst=8),
        "bare_idle_us": timed(bare, calls=40, burst=8, idle=True),
        "fused_us": timed(fused, calls=80, burst=8),
        "fused_idle_us": timed(fused, calls=40, burst=8, idle=True),
    }
    lw.synchronize()
    prof = cProfile.Profile()
    for _ in range(5):  # 40 launches in bursts of 8; the synchronisations are not profiled
        prof.enable()
        for _ in range(8):
            fused()
        prof.disable()
        torch.cuda.synchronize()
    lw.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    res["profile_tottime"] = text.getvalue()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(top)
    res["profile_cumulative"] = text.getvalue()
    return res


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2048x2048x1024 instead of 8192x8192x4096")
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--profile-top", type=int, default=30)
    a = parser.parse_args(argv)
    m, n, k = (2048, 2048, 1024) if a.quick else (8192, 8192, 4096)
    world, chunks = 4, 4
    print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__}, triton {triton.__version__})", flush=True)
    out = {"device": torch.cuda.get_device_name(), "shape": [m, n, k], "world": world, "chunks": chunks}
    out["stream_ops_us"] = stream_ops(m // world // chunks * k * 2)
    for name, us in out["stream_ops_us"].items():
        print(f"  {name:<18} {us:8.1f} us", flush=True)
    out.update(launches(m, n, k, world, chunks, a.profile_top))
    print(f"  bare Triton launch {out['bare_us']:.1f} us ({out['bare_idle_us']:.1f} with the GPU idle); fused launch "
          f"{out['fused_us']:.1f} us ({out['fused_idle_us']:.1f} idle)", flush=True)
    print(out["profile_tottime"], flush=True)
    print(out["profile_cumulative"], flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
