"""Rank functions for the CPU-world tests (run by `syncopy.runtime.worlds.processes.spawn`, one process per rank).

Every function here is module level so that `spawn` can pickle it by name; each returns plain data
(lists, dicts, numbers, strings, `Trace` dataclasses) for the test process to assert on. Numerics are
checked against the torch reference (`dist.all_gather_into_tensor` of the shards, then torch math),
never against another syncopy path.

The kernels:
    grouped  tests/kernels/grouped_gemm.py::matmul_grouped  tensor lhs, 1-D grid, grouped tile swizzle
    gemm2d   tests/kernels/gemm2d.py::gemm_2d              tensor a,   2-D grid
    rms      tests/kernels/rownorm.py::rms_rows            tensor X,   one program per row
"""
from __future__ import annotations

import functools
import sys
import time
import traceback


def once(fn):
    """Memoise a world-spawning helper in the test process, failures included, so the several tests
    that read one spawned world neither spawn it again nor wait for a broken one again."""
    memo: dict = {}

    @functools.wraps(fn)
    def wrapper(*args):
        if args not in memo:
            try:
                memo[args] = (True, fn(*args))
            except Exception as exc:
                memo[args] = (False, exc)
        ok, value = memo[args]
        if not ok:
            raise value
        return value

    return wrapper


def run_jobs(rank: int, world: int, jobs: dict) -> dict:
    """Several rank functions in one spawned world, in order (a spawn costs seconds: process start,
    imports, a first compile per process): `jobs` is {name: (function, args)}, the function a name
    in this module or "module:name"; returns {name: ("ok", result) or ("error", text)}. After each
    job the ranks tell each other whether it ran: once a job raised on some rank (its peers may be
    out of step, waiting in a collective it never reached), the later jobs do not run and say why,
    so the first failure is the one the tests report."""
    import importlib

    out, seconds, stopped = {}, {}, None
    names = list(jobs)
    for name, (fn, args) in jobs.items():
        if stopped is not None:
            out[name] = ("error", f"not run: {stopped}")
            continue
        start = time.perf_counter()
        module, _, attr = fn.rpartition(":")
        try:
            out[name] = ("ok", getattr(importlib.import_module(module) if module else sys.modules[__name__], attr)(rank, world, *args))
        except Exception as exc:  # the test of this job reports it with the rank
            out[name] = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
        if name != names[-1]:  # (after the last, the group may be broken on purpose: a job that timed out)
            stopped = _out_of_step(name, out[name][0] == "ok")  # also the barrier: the next job starts together
        seconds[name] = round(time.perf_counter() - start, 2)
    out["seconds"] = ("ok", seconds)  # where a world's time goes: job(per_rank, "seconds")
    return out


def _out_of_step(name: str, ran: bool) -> str | None:
    """Whether job `name` ran on every rank (None) or why the world's later jobs must not run."""
    import torch.distributed as dist

    flags = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(flags, ran)
    except Exception as exc:
        return f"the ranks lost step after job {name!r} ({type(exc).__name__}: {exc})"
    failed = [r for r, ok in enumerate(flags) if not ok]
    return f"job {name!r} failed on rank(s) {failed}" if failed else None


def job(per_rank: list[dict], name: str) -> list:
    """One job's per-rank results from `run_jobs`, raising (naming the rank and its error) where it failed."""
    failed = [f"rank {rank}: {jobs[name][1]}" for rank, jobs in enumerate(per_rank) if jobs[name][0] != "ok"]
    if failed:
        raise RuntimeError(f"job {name} failed:\n" + "\n".join(failed))
    return [jobs[name][1] for jobs in per_rank]

# --------------------------------------------------------------------------------------------------
# Shapes and tolerances (small: the Triton interpreter is slow and CI has two cores)
# --------------------------------------------------------------------------------------------------
GEMM_N, GEMM_K = 32, 24          # K=24 with TK/BI=16: two inner iterations, the second one masked
GEMM_TILE = 16                   # TM/TN/TK and BR/BC/BI
RMS_COLS, RMS_BLOCK = 12, 8      # two column blocks, the second one masked
RMS_EPS = 1e-6
TOL = {"float32": 1e-4, "float16": 1e-2}  # max |fused - reference| / max(1, max |reference|)

KERNEL_TENSOR = {"grouped": "lhs", "gemm2d": "a", "rms": "X"}


def explicit_order(world: int) -> list[int]:
    """An explicit order of peer offsets that is neither ring nor local_first where the world allows."""
    return {1: [], 2: [1], 3: [2, 1], 4: [3, 1, 2]}.get(world, list(range(world - 1, 0, -1)))


def schedule(kernel: str, chunks: int, order) -> dict:
    return {"pattern": "all_gather", "tensor": KERNEL_TENSOR[kernel], "dim": 0, "chunks_per_rank": chunks, "order": order}


def _kernel(name: str):
    if name == "grouped":
        from tests.kernels.grouped_gemm import matmul_grouped

        return matmul_grouped
    if name == "gemm2d":
        from tests.kernels.gemm2d import gemm_2d

        return gemm_2d
    if name == "rms":
        from tests.kernels.rownorm import rms_rows

        return rms_rows
    if name.startswith("tag"):
        from tests.world import tile_kernels

        return getattr(tile_kernels, {"tag1d": "tag_tiles_1d", "tag2d": "tag_tiles_2d", "tag3d": "tag_tiles_3d"}[name])
    raise KeyError(name)


def _dtype(name: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16}[name]


# --------------------------------------------------------------------------------------------------
# One problem per kernel: inputs, launch, torch reference
# --------------------------------------------------------------------------------------------------
class Problem:
    """Inputs of one launch on one rank. `shard` is this rank's slice of the communicated tensor;
    every other tensor is the same on all ranks (seeded without the rank)."""

    def __init__(self, kernel: str, rank: int, world: int, rows: int, dtype: str, seed: int, *,
                 n: int = GEMM_N, k: int = GEMM_K, tile: int = GEMM_TILE, tile_m: int | None = None):
        import torch

        self.kernel, self.world, self.rows = kernel, world, rows
        self.m = world * rows
        self.n, self.k, self.tile, self.tile_m = n, k, tile, tile_m or tile
        dt = _dtype(dtype)
        g_shard = torch.Generator().manual_seed(seed * 1009 + rank * 7 + 1)
        g_common = torch.Generator().manual_seed(seed * 1009 + 999_983)
        if kernel in ("grouped", "gemm2d"):
            self.shard = torch.randn(rows, k, generator=g_shard).to(dt)
            self.b = torch.randn(k, n, generator=g_common).to(dt)
            self.out = torch.full((self.m, n), float("nan"), dtype=dt)
        elif kernel == "rms":
            self.shard = (torch.randn(rows, RMS_COLS, generator=g_shard) * (1 + rank)).to(dt)
            self.w = torch.randn(RMS_COLS, generator=g_common).to(dt)
            self.out = torch.full((self.m, RMS_COLS), float("nan"), dtype=dt)
        else:
            raise KeyError(kernel)

    def launch(self, fn, **extra) -> None:
        """Launch `fn` (a FusedKernel or its `.reference`) the way the local kernel is launched;
        `extra` (e.g. group=) is passed through."""
        import triton

        m, n, k, t, tm = self.m, self.n, self.k, self.tile, self.tile_m
        if self.kernel == "grouped":
            a, b, c = self.shard, self.b, self.out
            grid = (triton.cdiv(m, tm) * triton.cdiv(n, t),)
            fn[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     TM=tm, TN=t, TK=t, GROUP=2, **extra)
        elif self.kernel == "gemm2d":
            a, b, c = self.shard, self.b, self.out
            grid = (triton.cdiv(m, tm), triton.cdiv(n, t))
            fn[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     BR=tm, BC=t, BI=t, **extra)
        else:
            fn[(m,)](self.shard, self.w, self.out, self.shard.stride(0), RMS_COLS, RMS_EPS, BLOCK=RMS_BLOCK, **extra)

    def reference(self):
        """all_gather_into_tensor of the shards, then torch math in float32."""
        import torch
        import torch.distributed as dist

        gathered = torch.empty((self.m,) + tuple(self.shard.shape[1:]), dtype=self.shard.dtype)
        dist.all_gather_into_tensor(gathered, self.shard.contiguous())
        x = gathered.float()
        if self.kernel in ("grouped", "gemm2d"):
            return x @ self.b.float()
        return x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + RMS_EPS) * self.w.float()

    def error(self, ref=None) -> float:
        """max |out - reference| / max(1, max |reference|); NaN anywhere (a poisoned row) counts as inf.
        Computing the reference is a collective: pass `ref` where only some ranks get here."""
        import torch

        ref = self.reference() if ref is None else ref
        diff = torch.nan_to_num((self.out.float() - ref).abs(), nan=float("inf"))
        return float(diff.max().item() / max(1.0, ref.abs().max().item()))


def _order_problems(fused, label: str) -> list[str]:
    """Every tile-order table the runtime built must be a permutation of the grid."""
    out = []
    for ctx, _ in fused.contexts.table.values():
        for key, (order, ranges, exec_order) in ctx.orders.items():
            from syncopy.runtime.launch.order import slot_records, slot_tiles

            n = len(ranges)
            grid = key[0]
            tiles = slot_tiles(order, n)
            if sorted(tiles) != list(range(n)):
                out.append(f"{label}: order table for {key} is not a permutation of 0..{n - 1}: {tiles}")
            # The record the kernel reads for each slot is that tile's program ids and chunk range.
            for s, (rec, tile) in enumerate(zip(slot_records(order, n), tiles)):
                pids = (tile % grid[0], (tile // grid[0]) % grid[1], tile // (grid[0] * grid[1]))
                if rec != (*pids, *ranges[tile]):
                    out.append(f"{label}: slot {s} record {rec} is not tile {tile} = {pids} with range {ranges[tile]}")
                    break
            if sorted(exec_order) != list(range(n)):
                out.append(f"{label}: execution order for {key} is not a permutation of 0..{n - 1}: {exec_order}")
    return out


# --------------------------------------------------------------------------------------------------
# 1. The correctness matrix
# --------------------------------------------------------------------------------------------------
def run_matrix(rank: int, world: int, cases: list[dict], timeout_s: float = 60.0) -> dict:
    """Run every case on this rank. A case is {id, kernel, chunks, order, variants: [(rows, dtype)]}:
    one fused operator per case, launched twice (epochs 1 and 2, fresh data each time) for each
    variant, the variants interleaved so that their contexts coexist. Returns
    {"errors": [(label, err, tol)], "problems": [str], "waits": [(label, remote tiles, tiles that waited)]}."""
    import syncopy

    errors, problems, waits = [], [], []
    for ci, case in enumerate(cases):
        try:
            fused = syncopy.overlap(schedule(case["kernel"], case["chunks"], case["order"]), poison_receive=True,
                                    timeout_s=timeout_s, trace=True)(_kernel(case["kernel"]))
            for epoch in (1, 2):
                for vi, (rows, dtype) in enumerate(case["variants"]):
                    label = f"{case['id']} rows={rows} {dtype} epoch{epoch}"
                    p = Problem(case["kernel"], rank, world, rows, dtype, seed=ci * 100 + vi * 10 + epoch)
                    p.launch(fused)
                    errors.append((label, p.error(), TOL[dtype]))
                    waits.append((label, *remote_tiles_waited(fused.last_trace, rank, case["chunks"])))
            problems += _order_problems(fused, case["id"])
        except Exception as exc:  # keep going: the test names every failing case
            errors.append((f"{case['id']} raised", float("inf"), 0.0))
            problems.append(f"{case['id']}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
    return {"errors": errors, "problems": problems, "waits": waits}


def remote_tiles_waited(trace, rank: int, chunks_per_rank: int) -> tuple[int, int, int]:
    """In one traced all-gather launch: (tiles that read a peer's chunk, those of them whose rows
    landed only after the kernel had started, those that started while a later chunk was still in
    flight). A tile of the second kind could not have had its rows without its wait; of the third,
    read rows it did not wait for would have been NaN. With an instant link both are 0."""
    mine = range(rank * chunks_per_rank, (rank + 1) * chunks_per_rank)
    remote = landed_late = in_flight = 0
    for tile, _, arrived in trace.tile_starts:
        lo, hi = trace.tile_ranges[tile]
        reads = range(lo, hi + 1)
        if all(g in mine for g in reads):
            continue
        remote += 1
        landed_late += max(trace.arrivals[g] for g in reads) > trace.kernel_s[0]
        in_flight += arrived < trace.total_chunks
    return remote, landed_late, in_flight


# --------------------------------------------------------------------------------------------------
# 2. Ragged shards the size users meet them
# --------------------------------------------------------------------------------------------------
RAGGED_TILE_M = 64  # run_big_ragged's row tile


def run_big_ragged(rank: int, world: int, rows: int, chunks: int, kernels: list[str]) -> dict:
    """A GEMM with a tiny N/K and 64-row tiles on shards of `rows` rows (ragged w.r.t. the tile and
    the chunk count): tiles straddle chunk and rank boundaries. Two launches each."""
    import syncopy

    out = {"errors": [], "seconds": {}}
    for kernel in kernels:
        t = time.perf_counter()
        fused = syncopy.overlap(schedule(kernel, chunks, "ring"), poison_receive=True)(_kernel(kernel))
        for epoch in (1, 2):
            p = Problem(kernel, rank, world, rows, "float32", seed=epoch, n=16, k=16, tile=16, tile_m=RAGGED_TILE_M)
            p.launch(fused)
            out["errors"].append((f"{kernel} rows={rows} chunks={chunks} epoch{epoch}", p.error(), TOL["float32"]))
        out["seconds"][kernel] = time.perf_counter() - t
    return out


# --------------------------------------------------------------------------------------------------
# 3. Overlap evidence
# --------------------------------------------------------------------------------------------------
def run_overlap(rank: int, world: int, kernel: str, chunks: int, latency_s: float, rows: int) -> dict:
    """Launch twice with an emulated link latency and tracing; return the traces, the plan's expected
    remote arrival order and the numerical errors."""
    import syncopy
    from syncopy.runtime.transport.link import Link

    fused = syncopy.overlap(schedule(kernel, chunks, "ring"), trace=True, poison_receive=True,
                            link=Link(latency_s=latency_s))(_kernel(kernel))
    import torch.distributed as dist

    fused.build()
    traces, errors = [], []
    for epoch in (1, 2):
        p = Problem(kernel, rank, world, rows, "float32", seed=50 + epoch)
        dist.barrier()  # start together: a rank that launches late finds its chunks already there
        p.launch(fused)
        errors.append((f"{kernel} epoch{epoch}", p.error(), TOL["float32"]))
        traces.append(fused.last_trace)
    (ctx, _), = fused.contexts.table.values()
    return {"traces": traces, "errors": errors, "arrival_plan": list(ctx.plan.arrival),
            "local_chunks": [rank * chunks + i for i in range(chunks)]}


# --------------------------------------------------------------------------------------------------
# 4. Tile-order bijection
# --------------------------------------------------------------------------------------------------
def run_tile_tags(rank: int, world: int, rows: int, chunks: int, orders: list) -> list[dict]:
    """For 1-D, 2-D and 3-D grids: launch a kernel whose programs count their own runs, twice, and
    compare what each tile read with the local kernel on the all-gathered tensor."""
    import torch
    import torch.distributed as dist
    import triton

    import syncopy
    from syncopy.runtime.launch.order import slot_tiles

    nc, br, bc = 16, 4, 8
    br3 = 2 * br  # the 3-D grid's row tiles: its programs, 3 a tile, are most of this job's time
    m = world * rows
    results = []
    for order in orders:
        for name, grid, rows_of_tile in (("tag1d", (triton.cdiv(m, br),), br), ("tag2d", (triton.cdiv(m, br), nc // bc), br),
                                         ("tag3d", (triton.cdiv(m, br3), nc // bc, 3), br3)):
            kernel = _kernel(name)
            meta = {"NC": nc, "BR": rows_of_tile} if name == "tag1d" else {"NC": nc, "BR": rows_of_tile, "BC": bc}
            fused = syncopy.overlap({"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": chunks,
                                     "order": order}, trace=True, poison_receive=True)(kernel)
            n = 1
            for g in grid:
                n *= g
            for epoch in (1, 2):
                g_shard = torch.Generator().manual_seed(rank * 31 + epoch)
                x = torch.randn(rows, nc, generator=g_shard)
                out = torch.full((n,), float("nan"))
                count = torch.zeros(n, dtype=torch.int32)
                fused[grid](x, out, count, m, **meta)
                full = torch.empty(m, nc)
                dist.all_gather_into_tensor(full, x)
                ref_out = torch.zeros(n)
                ref_count = torch.zeros(n, dtype=torch.int32)
                kernel[grid](full, ref_out, ref_count, m, **meta)
                tr = fused.last_trace
                results.append({
                    "id": f"{name} grid={grid} order={order} epoch{epoch}",
                    "n": n,
                    "count": count.tolist(),
                    "err": float(torch.nan_to_num((out - ref_out).abs(), nan=float("inf")).max().item()),
                    "tables": [(slot_tiles(order_t, n), exec_order) for ctx, _ in fused.contexts.table.values()
                               for order_t, _, exec_order in ctx.orders.values()],
                    "trace": tr,
                })
    return results


# --------------------------------------------------------------------------------------------------
# 5. Faults
# --------------------------------------------------------------------------------------------------
def _exc_info(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "str": str(exc), "rank": getattr(exc, "rank", None),
            "chunk": getattr(exc, "chunk", None), "epoch": getattr(exc, "epoch", None)}


def stay_until_reported(rank: int, reporting, most_s: float, tag: str = "reported") -> None:
    """Keep this rank alive, its connections open, until every rank of `reporting` has its result
    (each says so through the group's store), `most_s` at most: a peer that exits before the others
    have seen what they test would change what they see (its connections close). This rank reports
    too if it is one of them. Waits no longer than the slowest peer needs, where a sleep would wait
    as long as it could ever need."""
    from datetime import timedelta

    import torch.distributed as dist

    if rank in reporting:
        say_reported(rank, tag)
    others = [f"{tag}/{r}" for r in reporting if r != rank]
    try:
        if others:
            dist.distributed_c10d._get_default_store().wait(others, timedelta(seconds=most_s))
    except Exception:  # a peer that never reported: go on after most_s, as the sleep did
        pass


def say_reported(rank: int, tag: str = "reported") -> None:
    """This rank has its result (see stay_until_reported)."""
    import torch.distributed as dist

    dist.distributed_c10d._get_default_store().set(f"{tag}/{rank}", "1")


def _epochs(fused) -> list[int]:
    """The launch count of each context of `fused` (a launch that begins moves its context's epoch)."""
    return [ctx.epoch for ctx, _ in fused.contexts.table.values()]


def run_drop(rank: int, world: int, order, drop: tuple[int, int], chunks: int, timeout_s: float) -> dict:
    """Rank `drop[0]` never sends its chunk `drop[1]`. Returns what the launch did on this rank, how
    long it took, what a relaunch of the broken operator says, and whether a fresh operator on a
    re-created process group works afterwards."""
    import torch
    import torch.distributed as dist

    import syncopy
    from syncopy.runtime.transport.link import Faults

    out: dict = {}
    p = Problem("grouped", rank, world, 37, "float32", seed=3)
    fused = syncopy.overlap(schedule("grouped", chunks, order), poison_receive=True, timeout_s=timeout_s,
                            faults=Faults.of(drop=[drop]))(_kernel("grouped"))
    ref = p.reference()  # a collective on the user's group: before the launch, on every rank
    fused.build()
    dist.barrier()
    t = time.perf_counter()
    try:
        p.launch(fused)
        out["launch"] = {"type": None}
    except Exception as exc:  # SyncopyTimeout expected where the dropped chunk is needed
        out["launch"] = _exc_info(exc)
    out["seconds"] = time.perf_counter() - t
    if out["launch"]["type"] is None:
        out["err"] = p.error(ref)
    else:
        # The operator is broken now: a relaunch must refuse at once, without any communication.
        # "At once" is counted, not timed: no launch began (the epochs of its contexts stand still).
        epochs = _epochs(fused)
        try:
            p.launch(fused)
            out["relaunch"] = {"type": None}
        except Exception as exc:
            out["relaunch"] = _exc_info(exc)
        out["relaunch_epochs"] = (epochs, _epochs(fused))
    # Recovery the way the error message says: re-create the process group, build a fresh operator.
    dist.barrier()
    pg = dist.new_group(ranks=list(range(world)), backend="gloo")
    fresh = syncopy.overlap(schedule("grouped", chunks, order), poison_receive=True, timeout_s=timeout_s)(_kernel("grouped"))
    q = Problem("grouped", rank, world, 37, "float32", seed=4)
    ref = q.reference()
    try:
        q.launch(fresh, group=pg)
        out["recovery"] = {"type": None, "err": q.error(ref)}
    except Exception as exc:
        out["recovery"] = _exc_info(exc)
    torch.distributed.barrier()
    return out


def run_delay_and_launch_errors(rank: int, world: int, delay_s: float) -> dict:
    """A delayed chunk still gives the right result; launches that contradict the schedule raise
    LaunchError on every rank."""
    import syncopy
    from syncopy.runtime.transport.link import Faults

    out: dict = {}
    # Shard shapes that differ between ranks (rank 1 brings one more row).
    fused = syncopy.overlap(schedule("rms", 2, "ring"), poison_receive=True, timeout_s=20)(_kernel("rms"))
    p = Problem("rms", rank, world, 8 + (rank == 1), "float32", seed=1)
    try:
        p.launch(fused)
        out["shapes"] = {"type": None}
    except Exception as exc:
        out["shapes"] = _exc_info(exc)
    out["shape_mine"] = list(p.shard.shape)
    # More chunks than shard rows.
    fused = syncopy.overlap(schedule("rms", 4, "ring"), poison_receive=True, timeout_s=20)(_kernel("rms"))
    p = Problem("rms", rank, world, 3, "float32", seed=1)
    try:
        p.launch(fused)
        out["chunks"] = {"type": None}
    except Exception as exc:
        out["chunks"] = _exc_info(exc)
    # An explicit order that lists the wrong number of peers for this world.
    fused = syncopy.overlap(schedule("rms", 1, list(range(1, world + 1))), poison_receive=True, timeout_s=20)(_kernel("rms"))
    p = Problem("rms", rank, world, 6, "float32", seed=1)
    try:
        p.launch(fused)
        out["order"] = {"type": None}
    except Exception as exc:
        out["order"] = _exc_info(exc)
    # The GPU backends on CPU tensors: refused before anything moves, naming the fix.
    for name in ("p2p", "nccl"):
        fused = syncopy.overlap(schedule("rms", 2, "ring"), backend=name, timeout_s=20)(_kernel("rms"))
        p = Problem("rms", rank, world, 6, "float32", seed=1)
        try:
            p.launch(fused)
            out[f"backend {name}"] = {"type": None}
        except Exception as exc:
            out[f"backend {name}"] = _exc_info(exc)
    # A delayed chunk: rank 0's chunk 0 leaves `delay_s` late, every epoch.
    fused = syncopy.overlap(schedule("grouped", 2, "ring"), trace=True, poison_receive=True, timeout_s=20,
                            faults=Faults.of(delay={(0, 0): delay_s}))(_kernel("grouped"))
    import torch.distributed as dist

    fused.build()
    out["delay"] = []
    for epoch in (1, 2):
        p = Problem("grouped", rank, world, 37, "float32", seed=10 + epoch)
        dist.barrier()  # so that the delay, not rank skew, decides when chunk 0 lands
        t = time.perf_counter()
        p.launch(fused)
        out["delay"].append({"seconds": time.perf_counter() - t, "err": p.error(), "trace": fused.last_trace})
    return out


# --------------------------------------------------------------------------------------------------
# Producer patterns: reduce_scatter and all_reduce (the templates' kernels and a row kernel)
# --------------------------------------------------------------------------------------------------
def _producer_fused(case: dict, **options):
    import syncopy
    from syncopy import templates

    t = templates.get(case["template"])
    sched = t.schedule(chunks_per_rank=case["chunks"], order=case["order"])
    return syncopy.overlap(sched, poison_receive=True, **options)(t.kernel())


def run_producer_matrix(rank: int, world: int, cases: list[dict]) -> list[dict]:
    """Each case: template (gemm_rs | gemm_ar), chunks, order, dtype, shape, one_shot; two launches
    of one operator with fresh inputs (no reset in between), each against the torch reference."""
    import torch

    from syncopy import templates

    out = []
    for case in cases:
        mod = templates.get(case["template"]).module
        dtype = _dtype(case["dtype"])
        fused = _producer_fused(case, trace=True, one_shot_max_bytes=10**12 if case.get("one_shot") else 0)
        errs, algorithms = [], set()
        for epoch in range(2):
            inp = mod.inputs(rank, world, case["shape"], dtype, seed=epoch + 1)
            got = mod.launch(fused, **inp)
            ref = mod.reference(**inp)
            scale = max(1.0, ref.float().abs().max().item())
            errs.append((got.float() - ref.float()).abs().max().item() / scale)
            ctx, _ = next(iter(fused.contexts.table.values()))
            algorithms.add(ctx.plan.algorithm)
        tol = mod.TOLERANCE[dtype]
        out.append({"case": case, "errs": errs, "ok": all(e <= tol for e in errs), "algorithms": sorted(algorithms),
                    "epochs": fused.last_trace.epoch, "shape": list(got.shape)})
    return out


def run_producer_overlap(rank: int, world: int, latency_s: float) -> list:
    """gemm_rs with a slow link: traces of two launches (chunks sent while tiles still run)."""
    from syncopy import templates
    from syncopy.runtime.transport.link import Link

    import torch

    case = {"template": "gemm_rs", "chunks": 2, "order": "ring"}
    mod = templates.get("gemm_rs").module
    fused = _producer_fused(case, trace=True, link=Link(latency_s=latency_s))
    traces, errs = [], []
    for epoch in range(2):
        inp = mod.inputs(rank, world, (128, 32, 16), torch.float32, seed=epoch)
        got = mod.launch(fused, **inp, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        ref = mod.reference(**inp)
        errs.append((got - ref).abs().max().item())
        traces.append(fused.last_trace)
    return {"traces": traces, "errs": errs}


def run_producer_drop(rank: int, world: int, drop: tuple[int, int], timeout_s: float) -> dict:
    """Rank drop[0] never sends its contribution to chunk drop[1]: its owner times out, naming it."""
    import torch

    from syncopy import templates
    from syncopy.runtime.transport.link import Faults

    case = {"template": "gemm_rs", "chunks": 2, "order": "local_first"}
    mod = templates.get("gemm_rs").module
    fused = _producer_fused(case, faults=Faults.of(drop=[drop]), timeout_s=timeout_s)
    inp = mod.inputs(rank, world, (48, 16, 16), torch.float32)
    t = time.perf_counter()
    try:
        mod.launch(fused, **inp, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        res = {"type": None}
    except Exception as exc:
        res = _exc_info(exc)
    res["seconds"] = time.perf_counter() - t
    return res


# --------------------------------------------------------------------------------------------------
# 6. The full schedule form: an explicit chunk list, written verbatim
# --------------------------------------------------------------------------------------------------
def run_explicit(rank: int, world: int, example: str, rows: int, in_order: bool = False) -> dict:
    """Run gemm2d under the explicit schedule in `example` (a YAML file), under the ring written out
    by `expand`, and launch a plan written for another world size. Two epochs each, traced; returns
    per label the errors, traces and the plan's arrival order, flags per chunk and flag positions.
    `in_order`: the operators get the harness's in-order slow link (else the process's default link)."""
    import syncopy
    from syncopy.schedule import load_schedule
    from syncopy.schedule.expand import expand

    link = {}
    if in_order:
        from tests.world.harness import IN_ORDER

        link = {"link": IN_ORDER}
    out: dict = {}
    schedules = {"example": load_schedule(example),
                 "expanded-ring": expand(load_schedule(schedule("gemm2d", 2, "ring")), world)}
    for label, sched in schedules.items():
        fused = syncopy.overlap(sched, trace=True, poison_receive=True, timeout_s=60, **link)(_kernel("gemm2d"))
        errors, traces = [], []
        for epoch in (1, 2):
            p = Problem("gemm2d", rank, world, rows, "float32", seed=70 + epoch)
            p.launch(fused)
            errors.append((f"{label} epoch{epoch}", p.error(), TOL["float32"]))
            traces.append(fused.last_trace)
        (ctx, _), = fused.contexts.table.values()
        out[label] = {"errors": errors, "traces": traces, "arrival": list(ctx.plan.arrival),
                      "flags": {g: list(ctx.plan.flags(g)) for g in range(ctx.n_chunks)},
                      "position": ctx.plan.position(), "problems": _order_problems(fused, label)}
    wrong = syncopy.overlap(expand(load_schedule(schedule("gemm2d", 1, "ring")), world + 1), **link)(_kernel("gemm2d"))
    try:
        Problem("gemm2d", rank, world, rows, "float32", seed=1).launch(wrong)
        out["wrong_world"] = {"type": None}
    except Exception as exc:
        out["wrong_world"] = _exc_info(exc)
    return out


# --------------------------------------------------------------------------------------------------
# 6. chunks_per_rank: auto
# --------------------------------------------------------------------------------------------------
def run_auto(rank: int, world: int, rows_list: list[int], bandwidth_Bps: float) -> dict:
    """One operator whose schedule fixes `chunks_per_rank: 1` and says `order: auto`, built with
    `overlap(..., chunks_per_rank="auto")` and an emulated link: launched (twice, traced) for each
    shard row count in `rows_list`. Returns per row count what the planner chose, the errors against
    the torch reference and the trace's planner line. Rank 1 names another hardware profile in
    its environment: rank 0's choice must win everywhere."""
    import os

    import syncopy
    from syncopy.planner.auto import HARDWARE_ENV
    from syncopy.runtime.transport.link import Link

    if rank == 1:
        os.environ[HARDWARE_ENV] = "h100-nvlink"

    sched = {**schedule("grouped", 1, "ring"), "order": "auto"}
    fused = syncopy.overlap(sched, chunks_per_rank="auto", trace=True, poison_receive=True,
                            link=Link(bandwidth_Bps=bandwidth_Bps))(_kernel("grouped"))
    out = {}
    for rows in rows_list:
        errors = []
        for epoch in (1, 2):
            p = Problem("grouped", rank, world, rows, "float32", seed=70 + epoch)
            p.launch(fused)
            errors.append((f"auto rows={rows} epoch{epoch}", p.error(), TOL["float32"]))
        out[rows] = {"errors": errors, "chunks": fused.resolved_chunks_per_rank, "order": fused.resolved_order,
                     "resolution": fused.last_resolution, "planned": fused.last_trace.planned,
                     "summary": fused.last_trace.summary(),
                     "plan_chunks": next(ctx.plan.chunks_per_rank for key, (ctx, _) in fused.contexts.table.items() if key[1][0] == rows)}
    return out


def run_producer_descriptors(rank: int, world: int, rows: int) -> list:
    """reduce_scatter and all_reduce of a kernel that stores through a tensor descriptor."""
    import torch
    import torch.distributed as dist
    import triton

    import syncopy
    from tests.kernels.desc_out import mm_desc_out

    g = torch.Generator().manual_seed(rank)
    m, n, k = rows, 32, 32
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    full = a @ b
    dist.all_reduce(full)
    out = []
    for pattern in ("reduce_scatter", "all_reduce"):
        fused = syncopy.overlap({"pattern": pattern, "tensor": "C", "chunks_per_rank": 2}, poison_receive=True)(mm_desc_out)
        part = m // world
        c = torch.empty(part if pattern == "reduce_scatter" else m, n)
        ref = full[rank * part:(rank + 1) * part] if pattern == "reduce_scatter" else full
        for _ in range(2):
            fused[(triton.cdiv(m, 16), triton.cdiv(n, 16))](a, b, c, m, n, k, BM=16, BN=16, BK=16)
            out.append((pattern, (c - ref).abs().max().item()))
    return out


def run_kill(rank: int, world: int, order, kill: tuple[int, int], timeout_s: float, producer: bool = False) -> dict:
    """Rank kill[0] dies (exits at once) where it would send its chunk kill[1]: what the others see,
    and how long it took them. The killed rank returns nothing (spawn reports its exit code)."""
    import torch

    from syncopy import templates
    from syncopy.runtime.transport.link import Faults

    name = "gemm_rs" if producer else "ag_gemm"
    t = templates.get(name)
    if producer:
        fused = _producer_fused({"template": name, "chunks": 2, "order": order}, faults=Faults.of(kill=kill), timeout_s=timeout_s)
    else:
        fused = t.fused(chunks_per_rank=2, order=order, timeout_s=timeout_s, faults=Faults.of(kill=kill))
    start = time.perf_counter()
    try:
        for epoch in range(2):
            t.module.launch(fused, **t.module.inputs(rank, world, (16 if producer else 8, 16, 16), torch.float32, seed=epoch))
        res = {"type": None}
    except Exception as exc:
        res = _exc_info(exc)
    res["seconds"] = time.perf_counter() - start
    # Stay up while the other survivors find out: only rank kill[0] drops out.
    stay_until_reported(rank, [r for r in range(world) if r != kill[0]], 2 * timeout_s + 30)
    return res


def run_absent_first_launch(rank: int, world: int, timeout_s: float) -> dict:
    """After a first operator every rank ran, rank world-1 never launches the second (it sleeps past
    everyone's bound): the others' first launch of it must fail in bounded time, naming what was missed."""
    import torch

    from syncopy import templates

    t = templates.get("ag_gemm")
    # A first operator that every rank launches: the group's control plane exists from here on.
    t.module.launch(t.fused(chunks_per_rank=1, timeout_s=timeout_s), **t.module.inputs(rank, world, (4, 16, 16), torch.float32))
    if rank == world - 1:
        # Alive and silent until the others have given up on it (not dead: they must time out, not see a close).
        stay_until_reported(rank, range(world - 1), control_bound(timeout_s) + 60)
        return {"type": "absent"}
    fused = t.fused(chunks_per_rank=2, timeout_s=timeout_s)
    start = time.perf_counter()
    try:
        t.module.launch(fused, **t.module.inputs(rank, world, (8, 16, 16), torch.float32))
        res = {"type": None}
    except Exception as exc:
        res = _exc_info(exc)
    res["seconds"] = time.perf_counter() - start
    say_reported(rank)  # frees the absent rank once every other rank has its error
    return res


def control_bound(timeout_s: float) -> float:
    from syncopy.runtime.transport.backends.control import wait_bound

    return wait_bound(timeout_s)


def run_shapes_diverge_then_retry(rank: int, world: int, timeout_s: float) -> dict:
    """Both ranks launch 16 rows, then 8; then rank 0 launches 8 rows while rank 1 launches 16 (both
    shapes known, both contexts warm): each rank says what it launches before any chunk moves
    (runtime/launch/agreement.py), so both refuse at once, naming the shapes, and the group is still
    whole: the same operator, a fresh one on the same group, and one on a new group all launch right."""
    import torch
    import torch.distributed as dist

    from syncopy import templates

    t = templates.get("ag_gemm")
    fused = t.fused(chunks_per_rank=2, timeout_s=timeout_s)
    for rows in (16, 8):
        t.module.launch(fused, **t.module.inputs(rank, world, (rows, 16, 16), torch.float32))
    out = {}
    try:
        t.module.launch(fused, **t.module.inputs(rank, world, (8 if rank == 0 else 16, 16, 16), torch.float32))
        out["diverged"] = {"type": None}
    except Exception as exc:
        out["diverged"] = _exc_info(exc)

    def err(op, group=None) -> float:
        inp = t.module.inputs(rank, world, (8, 16, 16), torch.float32, seed=3)
        got = t.module.launch(op, **inp, group=group)
        return float((got - t.module.reference(**inp, group=group)).abs().nan_to_num(float("inf")).max())

    out["same_operator_err"] = err(fused)
    out["same_group_err"] = err(t.fused(chunks_per_rank=2, timeout_s=timeout_s))
    pg = dist.new_group(ranks=list(range(world)), backend="gloo")
    out["new_group_err"] = err(t.fused(chunks_per_rank=2, timeout_s=timeout_s), pg)
    return out


# --------------------------------------------------------------------------------------------------
# The reordering link of the tests (tests/world/harness.py): the oracle for unwaited reads
# --------------------------------------------------------------------------------------------------
def run_reorder_oracle(rank: int, world: int, launches: int) -> list[dict]:
    """Watch every flag this rank raises under Link(reorder=True) with poisoned receive buffers: the
    chunk's rows must be in place when its flag rises and every chunk not landed yet must still be
    all NaN. Returns per launch the order remote chunks landed in, the planned one and the violations."""
    import torch

    import syncopy
    from syncopy.runtime.state.context import Context
    from syncopy.runtime.transport.link import Link

    log: list[dict] = []
    land = Context.land

    def watched(ctx, chunk):
        if not log or log[-1]["epoch"] != ctx.epoch:
            log.append({"epoch": ctx.epoch, "landed": [], "planned": list(ctx.plan.arrival), "bad": []})
        rec = log[-1]
        local = chunk // ctx.plan.chunks_per_rank == ctx.plan.rank
        if not local:
            rec["landed"].append(chunk)
            if torch.isnan(ctx.chunk_view(chunk)).any():
                rec["bad"].append(f"chunk {chunk}: flag raised before its rows were in place")
            for g in set(ctx.plan.arrival) - set(rec["landed"]):
                if not torch.isnan(ctx.chunk_view(g)).all():
                    rec["bad"].append(f"chunk {g}: rows visible before its flag rose (while landing {chunk})")
        land(ctx, chunk)

    Context.land = watched
    try:
        fused = syncopy.overlap(schedule("rms", 2, "ring"), poison_receive=True,
                                link=Link(latency_s=0.004, jitter_s=0.004, reorder=True))(_kernel("rms"))
        for epoch in range(launches):
            p = Problem("rms", rank, world, 6, "float32", seed=90 + epoch)
            p.launch(fused)
            log[-1]["err"] = p.error()
    finally:
        Context.land = land  # the world's later jobs (run_jobs) land chunks unwatched
    return log
