"""Single-GPU benchmarks on the loopback world (peers = copy-engine copies from pinned host memory).

(a) wait overhead: the fused AG-GEMM with every flag already up vs the original kernel on the
    gathered A, several shapes;
(b) overlap: sequential (copy every remote chunk, then the kernel), stream-level (one kernel per
    chunk on a second stream as each chunk lands, the AsyncTP way) and fused (one kernel, tiles
    waiting on their chunks), world 4;
(c) the cost of one poll of a flag that never rises, in the three forms a wait could take (a
    block-wide acquire atomic: one thread loads, block barrier + shared-memory broadcast; every
    thread's own acquire load; the latter plus a %globaltimer read), on one program and on one per
    SM; and how long a wait with a 1 ms poll budget (api.GPU_POLL_S per poll) really takes. Compiled
    waits use the first form (syncopy/device.py says why).

    python benchmarks/gpu_bench.py [--json OUT.json] [--quick]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import triton
import triton.language as tl

import syncopy
from syncopy import device as dev
from syncopy.api import _spin_limit, slot_records, slot_tiles
from syncopy.runtime.loopback import LoopbackWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

META = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)


def _time(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e))
    return statistics.median(out)


def _wall(fn, reps: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def _args(a, b, c, m, n, k):
    return (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def wait_overhead(shapes, world=4, chunks=4):
    rows_out = []
    for m, n, k in shapes:
        rows = m // world
        fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=chunks))(ag_gemm_kernel)
        shards = [torch.randn(rows, k, dtype=torch.float16) for _ in range(world)]
        peers = [s.pin_memory() for s in shards]
        full = torch.cat(shards).cuda()
        b = torch.randn(k, n, dtype=torch.float16, device="cuda")
        c = torch.empty(m, n, dtype=torch.float16, device="cuda")
        grid = (triton.cdiv(m, META["BLOCK_M"]) * triton.cdiv(n, META["BLOCK_N"]),)
        lw = LoopbackWorld(fk, world)
        shard0 = full[:rows].contiguous()
        lw.launch(grid, _args(shard0, b, c, m, n, k), dict(META), peers, presignal=True)
        assert torch.allclose(c.float(), full.float() @ b.float(), atol=1.0, rtol=2e-2)
        ctx = next(iter(lw.contexts.values()))
        _, fused, _, _ = fk._built
        call = dict(zip(["A", "B", "C", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"], _args(ctx.buffer, b, c, m, n, k)))
        call.update({key: v for key, v in META.items() if key not in ("num_warps", "num_stages")})
        order, _, _ = fk._order(ctx, grid, call, None)
        dummy = torch.zeros(1, dtype=torch.int32, device="cuda")
        launch = {key: v for key, v in META.items() if key in ("num_warps", "num_stages")}
        t_orig = _time(lambda: ag_gemm_kernel[grid](*_args(full, b, c, m, n, k), **META))
        t_fused = _time(lambda: fused[grid](**call, **fk._extra(ctx, order, dummy), **launch))
        # Breakdown: ranges computed in the kernel (no probe table), and no tile reorder at all.
        t_computed = _time(lambda: fused[grid](**call, **fk._extra(ctx, order, dummy, table=False), **launch))
        n_tiles = grid[0]
        records = dict(zip(slot_tiles(order, n_tiles), slot_records(order, n_tiles)))  # tile -> its record
        identity = torch.tensor([x for tile in range(n_tiles) for x in records[tile]] + list(range(n_tiles)),
                                dtype=torch.int32, device="cuda")
        t_identity = _time(lambda: fused[grid](**call, **fk._extra(ctx, identity, dummy), **launch))
        tflops = 2 * m * n * k / (t_orig * 1e-3) / 1e12
        rows_out.append(dict(m=m, n=n, k=k, original_ms=t_orig, fused_all_present_ms=t_fused, overhead=t_fused / t_orig - 1, original_tflops=tflops,
                             fused_ranges_in_kernel_ms=t_computed, fused_grid_order_ms=t_identity))
    return rows_out


def overlap(m, n, k, world=4, chunks=4, reps=10):
    rows = m // world
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=chunks))(ag_gemm_kernel)
    shards = [torch.randn(rows, k, dtype=torch.float16) for _ in range(world)]
    peers = [s.pin_memory() for s in shards]
    full = torch.cat(shards).cuda()
    b = torch.randn(k, n, dtype=torch.float16, device="cuda")
    c = torch.empty(m, n, dtype=torch.float16, device="cuda")
    gathered = torch.empty(m, k, dtype=torch.float16, device="cuda")
    grid = (triton.cdiv(m, META["BLOCK_M"]) * triton.cdiv(n, META["BLOCK_N"]),)
    side = torch.cuda.Stream()
    lw = LoopbackWorld(fk, world)
    shard0 = full[:rows].contiguous()
    bounds = [(src * rows + i * rows // chunks, src * rows + (i + 1) * rows // chunks) for src in range(1, world) for i in range(chunks)]

    def sequential():
        gathered[:rows].copy_(shard0)
        for lo, hi in bounds:
            gathered[lo:hi].copy_(peers[lo // rows][lo - (lo // rows) * rows : hi - (lo // rows) * rows], non_blocking=True)
        ag_gemm_kernel[grid](*_args(gathered, b, c, m, n, k), **META)

    def stream_level():
        # Local rows first on the compute stream; each remote chunk: copy on `side`, then a GEMM on its rows.
        gathered[:rows].copy_(shard0)
        cur = torch.cuda.current_stream()
        g0 = (triton.cdiv(rows, META["BLOCK_M"]) * triton.cdiv(n, META["BLOCK_N"]),)
        ag_gemm_kernel[g0](*_args(gathered[:rows], b, c[:rows], rows, n, k), **META)
        for lo, hi in bounds:
            with torch.cuda.stream(side):
                gathered[lo:hi].copy_(peers[lo // rows][lo - (lo // rows) * rows : hi - (lo // rows) * rows], non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(side)
            cur.wait_event(ev)
            gi = (triton.cdiv(hi - lo, META["BLOCK_M"]) * triton.cdiv(n, META["BLOCK_N"]),)
            ag_gemm_kernel[gi](*_args(gathered[lo:hi], b, c[lo:hi], hi - lo, n, k), **META)

    def fused():
        lw.launch(grid, _args(shard0, b, c, m, n, k), dict(META), peers, sync=False)

    def copies_only():
        for lo, hi in bounds:
            gathered[lo:hi].copy_(peers[lo // rows][lo - (lo // rows) * rows : hi - (lo // rows) * rows], non_blocking=True)

    def copies_timed(poll) -> float:
        """ms of the copies alone (events on the copy stream), optionally while every SM polls a flag."""
        flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        out = torch.zeros(sms, dtype=torch.int32, device="cuda")
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            if poll:  # ~3x the copies' time of block-wide acquire polls on every SM, on the compute stream
                poll[(sms,)](flag, out, 15000 if poll is _poll_block else 7000)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(side):
                s.record(side)
                copies_only()
                e.record(side)
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    t_comm = _wall(copies_only, reps)
    t_comp = _wall(lambda: ag_gemm_kernel[grid](*_args(full, b, c, m, n, k), **META), reps)
    res = dict(m=m, n=n, k=k, world=world, chunks=chunks, comm_ms=t_comm, compute_ms=t_comp,
               sequential_ms=_wall(sequential, reps), stream_overlap_ms=_wall(stream_level, reps), fused_ms=_wall(fused, reps))
    res["comm_events_ms"], res["comm_while_polling_ms"] = copies_timed(None), copies_timed(_poll_block)
    res["comm_while_polling_backoff_ms"] = copies_timed(_poll_block_backoff)
    # Where a fused launch's time goes (GPU events and host stamps) when the host issues the copies
    # before the kernel (the default), after it, or from a thread beside its launch; and the wall
    # time of each order.
    res["fused_by_copies_ms"], res["fused_timelines_ms"] = {}, {}
    for mode in LoopbackWorld.COPIES:
        res["fused_by_copies_ms"][mode] = _wall(lambda: lw.launch(grid, _args(shard0, b, c, m, n, k), dict(META), peers, sync=False,
                                                                  copies=mode), reps)
        lw.launch(grid, _args(shard0, b, c, m, n, k), dict(META), peers, timeline=True, copies=mode)
        tl = lw.timeline_ms()
        landed = [v for name, v in tl.items() if isinstance(name, int)]
        res["fused_timelines_ms"][mode] = dict(kernel_launched=tl["kernel"], first_chunk=min(landed), last_chunk=max(landed),
                                               end=tl["end"], host=tl["host"])
    fused()
    torch.cuda.synchronize()
    res["fused_max_err"] = (c.float() - full.float() @ b.float()).abs().max().item()
    res["fused_over_sequential"] = res["fused_ms"] / res["sequential_ms"]
    res["stream_over_sequential"] = res["stream_overlap_ms"] / res["sequential_ms"]
    return res


@triton.jit
def _poll_block(flag, out, n):
    acc = 0
    for _ in range(n):
        acc += tl.atomic_add(flag, 0, sem="acquire", scope="sys")
    tl.store(out + tl.program_id(0), acc)


@triton.jit
def _poll_block_backoff(flag, out, n):
    """_poll_block with a ~256 ns nanosleep between polls (the backoff candidate)."""
    acc = 0
    for _ in range(n):
        acc += tl.atomic_add(flag, 0, sem="acquire", scope="sys")
        acc += tl.inline_asm_elementwise("nanosleep.u32 256;\n mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(out + tl.program_id(0), acc)


@triton.jit
def _poll_thread(flag, out, n):
    acc = 0
    for _ in range(n):
        acc += dev._ld_acquire_sys(flag)
    tl.store(out + tl.program_id(0), acc)


@triton.jit
def _poll_thread_timer(flag, out, n):
    acc = 0
    for _ in range(n):
        acc += dev._ld_acquire_sys(flag) + (dev._globaltimer() & 1).to(tl.int32)
    tl.store(out + tl.program_id(0), acc)


@triton.jit
def _bounded_wait(signals, ctx):
    dev.wait_chunks(signals, ctx, 0, 0)


def poll_cost(polls: int = 20000, bound_s: float = 1e-3) -> dict:
    """ns per poll of a flag that never rises, per form and grid; and a wait bounded at `bound_s`."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = torch.zeros(sms, dtype=torch.int32, device="cuda")
    rows = []
    for form, kernel in (("block atomic (barrier + broadcast)", _poll_block), ("block atomic + 256 ns backoff", _poll_block_backoff),
                         ("per-thread ld.acquire.sys", _poll_thread),
                         ("per-thread ld.acquire.sys + globaltimer", _poll_thread_timer)):
        for programs in (1, sms):
            ms = _time(lambda: kernel[(programs,)](flag, out, polls), reps=5)
            rows.append(dict(form=form, programs=programs, polls=polls, ns_per_poll=ms * 1e6 / polls))
    ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64, device="cuda")
    ctx[dev.CTX_EPOCH.value] = 1
    ctx[dev.CTX_SPIN_LIMIT.value] = _spin_limit(bound_s, "cuda")
    signals = torch.zeros(dev.SIG_HEADER + 1, dtype=torch.int32, device="cuda")

    def wait():
        signals.zero_()
        _bounded_wait[(sms,)](signals, ctx)

    waited_ms = _time(wait, reps=5)
    return dict(rows=rows, bound_ms=bound_s * 1e3, bounded_wait_ms=waited_ms, timed_out=bool(signals[0].item()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    dev = torch.cuda.get_device_name()
    shapes = [(4096, 4096, 4096), (8192, 8192, 4096)] if not a.quick else [(2048, 2048, 2048)]
    out = {"device": dev, "torch": torch.__version__, "triton": triton.__version__,
           "wait_overhead": wait_overhead(shapes)}
    out["overlap"] = [overlap(8192, 8192, 4096, chunks=c) for c in ((2, 4) if not a.quick else (2,))]
    print(f"device: {dev} (torch {torch.__version__}, triton {triton.__version__})")
    print("wait overhead (fp16 AG-GEMM, all flags up, world 4 x 4 chunks):")
    for r in out["wait_overhead"]:
        print(f"  {r['m']}x{r['n']}x{r['k']}: original {r['original_ms']:.3f} ms ({r['original_tflops']:.0f} TFLOP/s), "
              f"fused {r['fused_all_present_ms']:.3f} ms, overhead {r['overhead'] * 100:+.1f}% "
              f"(ranges computed in-kernel {r['fused_ranges_in_kernel_ms']:.3f} ms, grid order {r['fused_grid_order_ms']:.3f} ms)")
    print("overlap on the loopback world (H2D copy engine as the link):")
    for r in out["overlap"]:
        print(f"  {r['m']}x{r['n']}x{r['k']} world {r['world']} chunks {r['chunks']}: comm {r['comm_ms']:.2f} ms, compute {r['compute_ms']:.2f} ms | "
              f"sequential {r['sequential_ms']:.2f}, stream-level {r['stream_overlap_ms']:.2f}, fused {r['fused_ms']:.2f} ms "
              f"(fused/sequential {r['fused_over_sequential']:.2f}, max err {r['fused_max_err']:.3f})")
        for mode, t in r["fused_timelines_ms"].items():
            host = ", ".join(f"{name} {ms:.3f}" for name, ms in t["host"].items())
            print(f"    copies {mode:6s} the kernel: fused {r['fused_by_copies_ms'][mode]:.2f} ms | kernel reached at {t['kernel_launched']:.3f} ms, "
                  f"first chunk landed {t['first_chunk']:.3f}, last {t['last_chunk']:.3f}, kernel done {t['end']:.3f} | host ms: {host}")
        print(f"    copies alone {r['comm_events_ms']:.3f} ms, "
              f"while every SM polls {r['comm_while_polling_ms']:.3f} ms "
              f"(with a 256 ns backoff {r['comm_while_polling_backoff_ms']:.3f} ms)")
    try:
        out["poll_cost"] = poll_cost()
    except Exception as exc:  # keep (a) and (b) whatever happens here
        out["poll_cost"] = {"error": f"{type(exc).__name__}: {exc}"}
    pc = out["poll_cost"]
    print("poll cost (a flag that never rises):")
    if "error" in pc:
        print(f"  failed: {pc['error']}")
    else:
        for r in pc["rows"]:
            print(f"  {r['form']:42s} {r['programs']:4d} programs: {r['ns_per_poll']:8.1f} ns/poll")
        print(f"  a wait with a {pc['bound_ms']:.1f} ms poll budget took {pc['bounded_wait_ms']:.3f} ms "
              f"on {torch.cuda.get_device_properties(0).multi_processor_count} programs (timed out: {pc['timed_out']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
