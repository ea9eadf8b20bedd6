"""Overlap on a CPU world: sequential, stream-level and fused AG-GEMM, measured in one run.

    python benchmarks/overlap_cpu.py [--json OUT.json] [--reps N] [--world 2] [--shape 512,128,256] [--chunks 4] [--balance 2]

The same local kernel (`templates/ag_gemm/kernel.py::ag_gemm_kernel`, tensor A gathered
along dim 0) runs three ways on a world of CPU ranks (processes, gloo, the Triton interpreter), each
several times; the report gives medians (per repetition, the slowest rank's wall time: the operator
is done when every rank is), the ratios to sequential, and the planner's prediction for the same
setting (`cpu-gloo` seen through the emulated link) with its error.

1. sequential: the all-gather first, then one launch of the local kernel on the gathered A. The
   gather is the fused operator's own transport (`syncopy.runtime.transport.backends.gloo`: gloo
   point-to-point on syncopy's communication group, the same emulated link, the same threads),
   with one message per peer (`chunks_per_rank: 1`, as a collective sends it, and as the planner
   models a sequential gather), and it is complete (every receive landed, every send done) before
   the kernel starts. It is not `all_gather_into_tensor` plus a sleep: that would charge the link
   from a formula instead of running it, and would leave out the transport's own costs.
2. stream-level overlap (AsyncTP style): the same transport with `--chunks` chunks per rank; the
   receive thread lands chunks while the main thread launches the local kernel once on the local
   shard's rows (there at once, like AsyncTP's first GEMM and the planner's model) and then once per
   remote chunk, in arrival order, as soon as it has landed, on that chunk's rows only
   (A and C row slices, M = the chunk's rows).
3. fused: `syncopy.overlap(schedule, link=Link(...))(ag_gemm_kernel)`, launched like the local
   kernel with this rank's shard of A.

Every result is checked against torch (`all_gather_into_tensor` + `matmul`); C is filled with NaN
before each run, and a wrong result stops the benchmark instead of being reported.

The emulated link. Before the overlap runs each rank times the local kernel on one chunk's rows
(t_chunk, the compute of the tiles that read one chunk; the slowest rank's median is used). The
link is then set so that one chunk's transfer costs `--balance` x t_chunk. It is emulated as
bandwidth (`Link(bandwidth_Bps=chunk_bytes / (balance * t_chunk))`), not as per-message latency: a
latency-only link would charge per message, so the one-message sequential gather would pay a
chunk's cost once instead of `--chunks` times and the comparison would no longer be about overlap.
With bandwidth, moving the shard costs the same however it is cut; chunking adds only the real
per-message costs (gloo, threads, flags), which the fused and stream runs do pay.

Why `--balance 2` by default: on W ranks a rank receives (W-1)/W of A but computes all of it, so
when one chunk's transfer equals one chunk's compute (`--balance 1`) the gather is only (W-1)/W of
the kernel and sequential = (2W-1)/W x compute; fused can at best hide the gather, so fused /
sequential >= W/(2W-1) = 0.67 at W=2. `--balance W/(W-1)` (2 at W=2) makes the gather cost as much
as the kernel, the "both halves equal" case whose limit is 0.5 (plus the fill/tail of one chunk).

The default shape (M,N,K = 512,128,256 fp32, 32x32 tiles: 64 programs per rank) keeps a run to
about half a minute. Under the interpreter every program of the fused kernel pays a fixed ~2 ms
(1.5-2.2 ms measured on the 2-core development machine) for its tile remap, chunk-range lookup and
wait check, whatever K is, against ~10 ms for the tile's own work at K=256; at smaller K that
overhead, not the link, bounds the fused run (K=128 gives fused/sequential ~0.67 where stream-level
overlap gets ~0.57).

`--json OUT` writes the three medians (`sequential_s`, `stream_overlap_s`, `fused_s`) and the setting
as a calibration record (see `syncopy/planner/calibrate.py`), plus, under `records`, that record and
two world-1 records measured in the same run with nothing moving: the local kernel on one chunk's
rows, and all of A through the local kernel (`sequential_s`) and through the fused kernel with
every chunk already present (`fused_s`, each rank its own group of one; the difference is the
per-program cost the planner calls tile_sync_s), so that `python -m syncopy.planner.calibrate
OUT.json` fits the cpu-gloo profile to this machine.
Besides the shipped profile's prediction the script prints that of the profile fitted (in memory)
to those world-1 records, measured before and apart from the overlap runs; when the shipped
profile is off by more than 25% it also prints the profile fitted to every record (this measurement
included, so in sample). Profile files are never written.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton, here and in the ranks

import argparse
import json
import statistics
import sys
import time

EXECUTIONS = ("sequential_s", "stream_overlap_s", "fused_s")
LABELS = {"sequential_s": "sequential", "stream_overlap_s": "stream overlap", "fused_s": "fused"}
BLOCK = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=8)  # cpu-gloo models 32x32 tiles
TOLERANCE = 1e-4  # max |C - reference| / max(1, max |reference|), fp32
TARGET_RATIO, TARGET_ERROR = 0.6, 0.25


def _args(a, b, c, m, n, k):
    return (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def _grid(m, n):
    import triton

    return (triton.cdiv(m, BLOCK["BLOCK_M"]) * triton.cdiv(n, BLOCK["BLOCK_N"]),)


def _check(c, ref, what: str, rank: int) -> None:
    import torch

    err = (c - ref).abs().max().item() if torch.isfinite(c).all() else float("inf")
    scale = max(1.0, ref.abs().max().item())
    if not err / scale <= TOLERANCE:
        raise RuntimeError(
            f"rank {rank}: {what} gave a wrong C (max error {err:.3g}, relative {err / scale:.3g} > {TOLERANCE:g}) "
            "against all_gather_into_tensor + matmul; refusing to report its time"
        )


def _median_time(fn, reps: int) -> float:
    fn()  # warm: the interpreter's first launch binds and caches
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _median_times(fns, reps: int) -> list[float]:
    """Median time of each of `fns`, run in turn `reps` times after one warm-up round."""
    for fn in fns:
        fn()
    import torch.distributed as dist

    from syncopy import progress

    times = [[] for _ in fns]
    shown = progress.wanted() and dist.is_initialized() and dist.get_rank() == 0  # one bar, rank 0's
    for _ in progress.steps(range(reps), "reps", on=shown):
        for fn, out in zip(fns, times):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return [statistics.median(x) for x in times]


def _rank(rank: int, world: int, cfg: dict) -> dict:
    """One rank of the benchmark (run by syncopy.runtime.worlds.processes.spawn)."""
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.runtime.state import plan as planning
    from syncopy.runtime.transport.backends.gloo import GlooBackend
    from syncopy.runtime.state.context import Context
    from syncopy.runtime.transport.link import Link
    from syncopy.schedule import load_schedule
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    def say(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    m, n, k, chunks, reps = cfg["m"], cfg["n"], cfg["k"], cfg["chunks"], cfg["reps"]
    rows = m // world
    torch.manual_seed(1234 + rank)
    a_shard = torch.randn(rows, k)
    torch.manual_seed(99)
    b = torch.randn(k, n)
    gathered = torch.empty(m, k)
    dist.all_gather_into_tensor(gathered, a_shard)
    ref = gathered @ b
    c = torch.empty(m, n)
    spin = 10**9  # only the fused kernel spins; its own launch sets its limit from timeout_s

    # -- nothing moving: one chunk's rows (sets the link), then all of A (world-1 records) --
    sched = {"pattern": "all_gather", "kernel": "ag_gemm_kernel", "tensor": "A", "dim": 0, "order": cfg["order"]}
    plan_c = planning.all_gather(load_schedule({**sched, "chunks_per_rank": chunks}), rank, world, rows)
    lo, hi = plan_c.bounds(rank * chunks)
    chunk_rows = hi - lo
    a_chunk, c_chunk = a_shard[:chunk_rows], torch.empty(chunk_rows, n)
    say(f"[rank 0] timing the local kernel alone on {chunk_rows} rows (one chunk)")
    t_chunk = _median_time(
        lambda: ag_gemm_kernel[_grid(chunk_rows, n)](*_args(a_chunk, b, c_chunk, chunk_rows, n, k), **BLOCK), cfg["calib_reps"])
    _check(c_chunk, a_chunk @ b, "the local kernel on one chunk", rank)
    # All of A through the local kernel and through the fused kernel with every chunk already there
    # (a world of one: each rank its own group): the difference is what the fused kernel's programs
    # pay for their tile remap, chunk-range lookup and wait check, the planner's tile_sync_s.
    # Timed in alternation so that drift in the machine's load hits both alike.
    solo = [dist.new_group([r]) for r in range(world)][rank]  # every rank takes part in creating every group
    present = syncopy.overlap({**sched, "chunks_per_rank": chunks}, timeout_s=cfg["timeout_s"])(ag_gemm_kernel)
    say(f"[rank 0] timing all of A ({m} rows) through the local kernel and through the fused kernel with every chunk present")
    t_full, t_present = _median_times(
        [lambda: ag_gemm_kernel[_grid(m, n)](*_args(gathered, b, c, m, n, k), **BLOCK),
         lambda: present[_grid(m, n)](*_args(gathered, b, c, m, n, k), **BLOCK, group=solo)],
        max(2, cfg["calib_reps"] // 2))
    _check(c, ref, "the fused kernel with every chunk present", rank)
    ag_gemm_kernel[_grid(m, n)](*_args(gathered, b, c, m, n, k), **BLOCK)
    _check(c, ref, "the local kernel on the gathered A", rank)
    t = torch.tensor([t_chunk, t_full, t_present], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    t_chunk, t_full, t_present = t.tolist()
    programs = _grid(m, n)[0]
    say(f"[rank 0] all of A: local kernel {t_full * 1e3:.1f} ms, fused with every chunk present {t_present * 1e3:.1f} ms: "
        f"{(t_present - t_full) / programs * 1e3:.2f} ms more per program ({programs} programs)")
    chunk_bytes = chunk_rows * k * a_shard.element_size()
    link = Link(latency_s=0.0, bandwidth_Bps=chunk_bytes / (cfg["balance"] * t_chunk))
    say(f"[rank 0] one chunk computes in {t_chunk * 1e3:.1f} ms, all of A in {t_full * 1e3:.1f} ms; emulated link "
        f"{link.bandwidth_Bps / 1e6:.3f} MB/s: a {chunk_bytes / 1e3:.0f} kB chunk takes "
        f"{chunk_bytes / link.bandwidth_Bps * 1e3:.1f} ms (balance {cfg['balance']:g})")

    # -- the three executions --
    seq_backend = GlooBackend(dist.group.WORLD, cfg["timeout_s"], link, None)
    seq_ctx = Context(planning.all_gather(load_schedule({**sched, "chunks_per_rank": 1}), rank, world, rows),
                      tuple(a_shard.shape), a_shard.dtype, a_shard.device, 0)
    stream_backend = GlooBackend(dist.group.WORLD, cfg["timeout_s"], link, None)
    stream_ctx = Context(plan_c, tuple(a_shard.shape), a_shard.dtype, a_shard.device, 0)
    fused = syncopy.overlap({**sched, "chunks_per_rank": chunks}, link=link, timeout_s=cfg["timeout_s"])(ag_gemm_kernel)

    def finish(transfer, what):
        transfer.join()
        if transfer.errors or transfer.lost:
            raise RuntimeError(f"rank {rank}: {what}: transfer failed ({transfer.errors or ['lost chunks ' + str(transfer.lost)]})")

    def sequential():
        seq_ctx.begin(spin)
        seq_backend.local(seq_ctx, a_shard)
        finish(seq_backend.start(seq_ctx, seq_ctx.epoch), "sequential gather")  # the whole gather, then compute
        ag_gemm_kernel[_grid(m, n)](*_args(seq_ctx.buffer, b, c, m, n, k), **BLOCK)

    def stream_overlap():
        ctx = stream_ctx
        ctx.begin(spin)
        stream_backend.local(ctx, a_shard)
        transfer = stream_backend.start(ctx, ctx.epoch)
        try:
            base = rank * rows  # the local shard is there at once: one launch over its rows
            a_loc, c_loc = ctx.buffer[base:base + rows], c[base:base + rows]
            ag_gemm_kernel[_grid(rows, n)](*_args(a_loc, b, c_loc, rows, n, k), **BLOCK)
            for g in ctx.plan.arrival:  # then one launch per remote chunk, as it lands
                if not transfer.landed[g].wait(cfg["timeout_s"]):
                    raise RuntimeError(f"rank {rank}: stream overlap: chunk {g} never landed")
                lo, hi = ctx.plan.bounds(g)
                a_g, c_g = ctx.buffer[lo:hi], c[lo:hi]
                ag_gemm_kernel[_grid(hi - lo, n)](*_args(a_g, b, c_g, hi - lo, n, k), **BLOCK)
        finally:
            finish(transfer, "stream overlap")

    def fused_run():
        fused[_grid(m, n)](*_args(a_shard, b, c, m, n, k), **BLOCK)

    runs = {"sequential_s": sequential, "stream_overlap_s": stream_overlap, "fused_s": fused_run}

    def timed(key) -> float:
        c.fill_(float("nan"))
        dist.barrier()
        t0 = time.perf_counter()
        runs[key]()
        elapsed = time.perf_counter() - t0
        _check(c, ref, LABELS[key], rank)
        return elapsed

    say("[rank 0] warm-up: one untimed run of each (builds the fused kernel and its tile order)")
    for key in EXECUTIONS:
        timed(key)
    times = {key: [] for key in EXECUTIONS}
    for rep in range(reps):
        mine = torch.tensor([timed(key) for key in EXECUTIONS], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # the operator is done when the slowest rank is
        for key, value in zip(EXECUTIONS, mine.tolist()):
            times[key].append(value)
        say(f"[rank 0] rep {rep + 1}/{reps}: " + "  ".join(f"{LABELS[key]} {times[key][-1]:.3f} s" for key in EXECUTIONS)
            + f"  (fused/sequential {times['fused_s'][-1] / times['sequential_s'][-1]:.2f}; results checked)")
    return {"times": times, "t_chunk": t_chunk, "t_full": t_full, "t_present": t_present, "chunk_rows": chunk_rows,
            "link": {"latency_s": link.latency_s, "bandwidth_Bps": link.bandwidth_Bps, "jitter_s": link.jitter_s}}


def _cpu_sample():
    """(busy core-seconds of the whole machine, elapsed core-seconds, CPU seconds of this process and its
    reaped children), or None where /proc/stat is not there."""
    import resource

    try:
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    ours = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
    return (total - idle) / tick, total / tick, ours


def _others_share(before, after, wall: float) -> float | None:
    """Fraction of the machine's CPU that processes other than this benchmark used between two samples."""
    if not before or not after or after[1] <= before[1]:
        return None
    others = (after[0] - before[0]) - (after[2] - before[2])
    return max(0.0, others / (after[1] - before[1]))


def _predictions(profile, record) -> dict[str, float]:
    from syncopy.planner.calibrate import predict

    return predict(profile, record)


def _print_prediction(title: str, predicted: dict, measured: dict) -> dict[str, float]:
    errors = {key: predicted[key] / measured[key] - 1.0 for key in EXECUTIONS}
    print(f"{title}:")
    for key in EXECUTIONS:
        print(f"  {LABELS[key]:15s} predicted {predicted[key]:7.3f} s   measured {measured[key]:7.3f} s   error {errors[key]:+6.1%}")
    print(f"  fused/sequential predicted {predicted['fused_s'] / predicted['sequential_s']:.2f}")
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Measure sequential, stream-level and fused AG-GEMM on a CPU world (gloo, Triton interpreter, "
        "emulated link) and compare with the planner's prediction.")
    parser.add_argument("--json", metavar="OUT", default=None, help="write medians and the setting (a calibration record) here")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions of each execution (default 5)")
    parser.add_argument("--world", type=int, default=2, help="CPU ranks (default 2)")
    parser.add_argument("--shape", default="512,128,256", help="M,N,K of the gathered GEMM (default 512,128,256)")
    parser.add_argument("--chunks", type=int, default=4, help="chunks per rank (default 4)")
    parser.add_argument("--order", default="ring", choices=("ring", "local_first", "bidirectional_ring"), help="arrival order (default ring)")
    parser.add_argument("--balance", type=float, default=None,
                        help="one chunk's emulated transfer / the compute of the tiles that read it "
                        "(default W/(W-1): the gather costs as much as the kernel; see the module docstring)")
    parser.add_argument("--calib-reps", type=int, default=3, help="repetitions when timing the kernel alone (default 3)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the world is given up (default 600)")
    args = parser.parse_args(argv)

    from syncopy.planner.workloads import parse_shape

    try:
        m, n, k = parse_shape(args.shape)
    except ValueError as exc:
        parser.error(str(exc))
    if args.world < 2:
        parser.error("--world must be 2 or more: with one rank nothing is communicated")
    if args.reps < 1 or args.calib_reps < 1:
        parser.error("--reps and --calib-reps must be 1 or more")
    if m % args.world:
        parser.error(f"M={m} is not a multiple of --world {args.world}; the shards must be equal")
    rows = m // args.world
    if args.chunks < 1 or args.chunks > rows:
        parser.error(f"--chunks must be between 1 and the {rows} rows of a shard")
    balance = args.balance if args.balance is not None else args.world / (args.world - 1)
    if balance <= 0:
        parser.error("--balance must be positive")

    from syncopy.planner.calibrate import EmulatedLink, Measurement, fit
    from syncopy.planner.hardware import load_profile
    from syncopy.runtime.worlds.processes import spawn

    cfg = dict(m=m, n=n, k=k, chunks=args.chunks, order=args.order, reps=args.reps, balance=balance,
               calib_reps=args.calib_reps, timeout_s=60.0)
    print(f"overlap_cpu: AG-GEMM M,N,K={m},{n},{k} fp32 on {args.world} CPU ranks (gloo, Triton interpreter), "
          f"{args.chunks} chunks per rank, order {args.order}, {args.reps} reps", flush=True)
    busy = _cpu_sample()
    time.sleep(0.5)
    before = _cpu_sample()
    if busy and before and (before[0] - busy[0]) / max(1e-9, before[1] - busy[1]) > 0.25:
        print(f"warning: {(before[0] - busy[0]) / (before[1] - busy[1]):.0%} of the machine's CPU is busy before "
              "starting; other processes slow the ranks (see the check after the run)", flush=True)
    start = time.perf_counter()
    results = spawn(_rank, args.world, cfg, timeout_s=args.timeout)
    wall = time.perf_counter() - start
    res = results[0]
    medians = {key: statistics.median(res["times"][key]) for key in EXECUTIONS}
    print(f"done in {wall:.0f} s")
    others = _others_share(before, _cpu_sample(), wall)
    if others is not None:
        print(f"other processes used {others:.0%} of the machine's CPU during the run"
              + (" (more than 10%: the cores were shared, rerun on a quiet machine for numbers worth comparing)"
                 if others > 0.10 else ""))

    setting = {"template": "ag_gemm", "world": args.world, "shape": [m, n, k], "dtype": "fp32",
               "chunks_per_rank": args.chunks, "order": args.order, "backend": "gloo", "link": res["link"]}
    record = {**setting, **medians}
    compute_records = [  # world 1, nothing moves: what the compute and per-program terms are fitted on
        {"template": "ag_gemm", "world": 1, "shape": [res["chunk_rows"], n, k], "dtype": "fp32", "chunks_per_rank": 1,
         "backend": "gloo", "sequential_s": res["t_chunk"], "note": "local kernel alone on one chunk's rows"},
        {"template": "ag_gemm", "world": 1, "shape": [m, n, k], "dtype": "fp32", "chunks_per_rank": args.chunks,
         "backend": "gloo", "sequential_s": res["t_full"], "fused_s": res["t_present"],
         "note": "all of A: local kernel (sequential_s) and fused kernel with every chunk present (fused_s)"},
    ]

    print()
    print(f"medians of {args.reps} reps (slowest rank per rep):")
    for key in EXECUTIONS:
        print(f"  {LABELS[key]:15s} {medians[key]:7.3f} s   (min {min(res['times'][key]):.3f}, max {max(res['times'][key]):.3f})")
    ratios = {"fused/sequential": medians["fused_s"] / medians["sequential_s"],
              "stream_overlap/sequential": medians["stream_overlap_s"] / medians["sequential_s"]}
    for name, value in ratios.items():
        print(f"  {name:26s} {value:.3f}")
    # With the gather as long as the kernel (the default balance) and a core per rank, fused can at best
    # hide the gather behind the kernel and pay one chunk's compute after the last chunk lands.
    if abs(balance - args.world / (args.world - 1)) < 1e-9 and args.world <= (os.cpu_count() or 1):
        wc = args.world * args.chunks
        print(f"  (ideal fused/sequential at this balance, one chunk of tail: {(wc + 1) / (2 * wc):.3f})")

    measurement = Measurement.model_validate(record)
    profile = load_profile("cpu-gloo")
    predicted = _predictions(profile, measurement)
    print()
    errors = _print_prediction(f"planner, cpu-gloo + emulated link (latency {res['link']['latency_s']:g} s, "
                               f"bandwidth {res['link']['bandwidth_Bps'] / 1e6:.3f} MB/s)", predicted, medians)
    worst = max(abs(e) for e in errors.values())
    # What `chunks_per_rank: auto` would run with here (the same resolution the fused operator does).
    from syncopy.planner.auto import resolve
    from syncopy.runtime.transport.link import Link

    auto = resolve("all_gather", "auto", "auto", world=args.world, shard_shape=(m // args.world, k), dim=0, dtype="float32",
                   others=[(k, n), (m, n)], hardware=profile, link=Link(**res["link"]))
    print(f"  chunks_per_rank/order auto would run {auto.chunks_per_rank} chunks per rank, order {auto.order} "
          f"(predicted fused {auto.fused_s:.3f} s)")
    # Calibrated in memory only: the profile files are never written.
    compute_only = [Measurement.model_validate(r) for r in compute_records]
    fitted = fit(profile, compute_only)
    calibrated = {"compute_only": {"predicted": _predictions(fitted, measurement)}}
    calibrated["compute_only"]["errors"] = _print_prediction(
        "planner, cpu-gloo fitted in memory to this run's world-1 timings (nothing moving; out of sample "
        "for the overlap runs)", calibrated["compute_only"]["predicted"], medians)
    if worst > TARGET_ERROR:
        print(f"  the shipped profile is off by up to {worst:.0%} (> {TARGET_ERROR:.0%}); fitting it to every record as well:")
        fitted_all = fit(profile, compute_only + [measurement])
        calibrated["all_records"] = {"predicted": _predictions(fitted_all, measurement)}
        calibrated["all_records"]["errors"] = _print_prediction(
            "planner, cpu-gloo fitted to every record of this run (in sample: this measurement included)",
            calibrated["all_records"]["predicted"], medians)

    print()
    ok_ratio = ratios["fused/sequential"] <= TARGET_RATIO
    print(f"target fused/sequential <= {TARGET_RATIO}: {'met' if ok_ratio else 'NOT met'} ({ratios['fused/sequential']:.3f}); "
          f"shipped-profile prediction within {TARGET_ERROR:.0%}: {'yes' if worst <= TARGET_ERROR else 'no'} (worst {worst:.1%})")

    if args.json:
        out = {**record, "hardware": "cpu-gloo", "records": [record, *compute_records], "others_cpu_share": others,
               "repetitions": res["times"], "ratios": ratios, "balance": balance,
               "chunk_compute_s": res["t_chunk"], "kernel_compute_s": res["t_full"], "present_compute_s": res["t_present"],
               "auto": {"chunks_per_rank": auto.chunks_per_rank, "order": auto.order, "fused_s": auto.fused_s},
               "prediction": {"profile": "cpu-gloo", "predicted": predicted, "errors": errors, "calibrated": calibrated}}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json} (python -m syncopy.planner.calibrate {args.json} fits cpu-gloo to it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
