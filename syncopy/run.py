"""`syncopy run NAME --world N`: a template end to end on a CPU world, verified against torch.

Ranks are started with torch's own launcher (`torch.distributed.launcher.elastic_launch`, the
machinery behind torchrun); inside an existing torchrun world (RANK/WORLD_SIZE set) that world is used.

User mistakes are found in the parent before any rank starts where they can be (`check_arguments`).
What only a launch can find (a chunk count larger than a shard, say) is a SyncopyError in the ranks:
each writes its one line to a report folder and exits with USER_ERROR_EXIT, the launcher stops the
others, and the parent raises one SyncopyError naming the rank, instead of the launcher's traceback.

A soak (`--random-shapes`, `--iters`) and injected faults (`--inject`) are what a run survives: every
launch gets fresh inputs (and with --random-shapes a fresh row count), a NaN-poisoned receive buffer,
and a check of every element against torch. Its outcome is one of

    ok        every element matches torch
    wrong     the launch returned, but some element does not (a silent wrong result: never acceptable)
    refused   the drawn shard has fewer rows than the schedule has chunks: a one-line LaunchError (soak);
              the same inputs then run on an operator of one chunk per rank, the user's fallback, and
              that launch's outcome is the record's (it carries `refused`)
    timeout   SyncopyTimeout (a chunk never came); the group is broken, the run stops
    corrupt   SyncopyCorruptChunk (--verify-chunks found a chunk changed in flight)
    error     another SyncopyError (a peer dropped out, a transfer failed); the run stops

and after each launch the ranks agree on what happened (a collective on the default group, bounded)
before they compute the reference, so that one rank's failure never leaves the others in a collective.
"""
from __future__ import annotations

import contextlib
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from syncopy.errors import SyncopyError
from syncopy.launcher import launcher_log as _launcher_log

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: `syncopy run` moves CPU tensors: gloo is the only backend that does (auto picks it).
BACKENDS = ("auto", "gloo")
#: The exit status of a rank that stopped on a SyncopyError (its message is in the report folder).
USER_ERROR_EXIT = 3
#: Outcomes after which the operator's group is broken: the run stops there.
FATAL = ("timeout", "error")


@dataclass(frozen=True)
class RunOptions:
    """What `syncopy run` runs: the template, its problem and schedule overrides, the soak, the faults."""

    name: str
    shape: tuple[int, int, int] | None = None
    dtype: str = "fp32"
    chunks: int | str | None = None
    order: str | list[int] | None = None
    iters: int = 2
    backend: str = "auto"
    random_shapes: bool = False  # a fresh row count per launch (the soak)
    seed: int = 0
    faults: object = None  # syncopy.runtime.transport.link.Faults
    timeout_s: float | None = None  # None: the operator's default
    verify_chunks: bool = False
    slow_link_ms: float = 0.0  # > 0: an emulated slow link (see slow_link)
    progress: bool = False  # rank 0 draws a progress bar (a terminal)
    trace: str | None = None  # a Chrome / Perfetto trace file of every rank's launches (rank 0 writes it)
    routing: str | None = None  # a2a_gemm: uniform, random or skewed (fresh split sizes every launch); None: the template's
    launch_stamp: str | None = None  # set in the rank an injected kill stops: where it writes each launch's start time


@dataclass
class RunResult:
    """Every rank's report (`ranks`, by rank) and the ranks that died without one (rank -> exit code)."""

    ranks: list[dict]
    died: dict[int, int] = field(default_factory=dict)
    #: --inject kill: seconds from the start of the killed rank's last launch to the launcher's report of it
    kill_detected_s: float | None = None


#: In the report folder: the wall time at which the rank an injected kill stops began its latest launch.
KILL_STAMP = "killed-rank.start"


def _rank_main(opts: RunOptions, report_dir=None):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if report_dir is not None and opts.faults is not None and opts.faults.kill is not None \
            and str(opts.faults.kill[0]) == os.environ.get("RANK"):
        opts = replace(opts, launch_stamp=str(Path(report_dir, KILL_STAMP)))  # the parent times the detection from it
    try:
        return _rank_body(opts)
    except SyncopyError as exc:
        rank = os.environ.get("RANK", "?")
        if report_dir is None:  # a torchrun world: each process's own CLI prints its line
            raise SyncopyError(f"rank {rank}: {exc}") from None
        Path(report_dir, f"{rank}.txt").write_text(str(exc))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(USER_ERROR_EXIT)  # no traceback, no process-group teardown: the launcher stops the peers


def _collective_bound_s(timeout_s: float | None) -> float:
    """How long the run's own collectives (outcomes, references) may wait for a peer: a peer may be
    in a launch that waits for its chunks (bounded by the transfers' join), plus slack for a loaded host."""
    from syncopy.runtime.transport.backends.control import wait_bound

    return wait_bound(timeout_s if timeout_s is not None else 60.0) + 60.0


def _rank_body(opts: RunOptions) -> dict:
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    from syncopy import templates

    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=_collective_bound_s(opts.timeout_s)))
    torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, DTYPES[opts.dtype])
    t = templates.get(opts.name)
    mod = t.module
    extra = {"timeout_s": opts.timeout_s} if opts.timeout_s is not None else {}
    if opts.slow_link_ms > 0:
        extra["link"] = slow_link(opts.slow_link_ms)
    options = dict(order=opts.order, backend=opts.backend, poison_receive=True, faults=opts.faults,
                   verify_chunks=opts.verify_chunks, **extra)
    fused = t.fused(chunks_per_rank=opts.chunks, **options, **({"trace": opts.trace} if opts.trace else {}))
    fallback = None  # one chunk per rank, for shards with fewer rows than `chunks` (made at the first refusal)
    schedule = t.schedule(chunks_per_rank=opts.chunks)
    chunks = schedule.chunks_per_rank
    shapes = random.Random(opts.seed)  # the same draws on every rank
    launches, out, inp = [], None, {}
    with _progress(opts.progress and rank == 0, opts.name, opts.iters) as advance:
        for it in range(opts.iters):
            shape = tuple(opts.shape) if opts.shape else mod.DEFAULT_SHAPE
            if opts.random_shapes:
                shape = _draw_shape(shapes, shape, schedule.pattern, world)
            routed = {"routing": opts.routing} if opts.routing is not None else {}
            inp = mod.inputs(rank, world, shape, dtype, seed=opts.seed * 100_003 + it, **routed)
            record, out = _one_launch(fused, mod, inp, opts, chunks, world)
            if record["outcome"] == "refused":
                fallback = fallback or t.fused(chunks_per_rank=1, **options)
                refusal = record["error"]
                record, out = _one_launch(fallback, mod, inp, opts, 1, world)
                record["refused"] = refusal
            record.update(it=it, shape=list(shape))
            launches.append(record)
            statuses = _agree(record["outcome"])
            if statuses is None:  # a peer is gone: no reference can be computed with it
                record["note"] = "a peer did not report this launch's outcome (it died)"
                advance(record)
                break
            _check_result(record, out, mod.reference(**inp), mod.TOLERANCE[dtype])
            advance(record)
            if any(s in FATAL for s in statuses):
                break
    resolution = fused.last_resolution
    return {"rank": rank, "launches": launches, "max_err": max((r.get("max_err", 0.0) for r in launches), default=0.0),
            "ok": all(r["outcome"] == "ok" for r in launches),
            "inputs": {k: tuple(v.shape) for k, v in inp.items() if isinstance(v, torch.Tensor)},
            "output": tuple(out.shape) if isinstance(out, torch.Tensor) else None,
            "planner": planner_lines(resolution) if resolution is not None else None,
            # Per-shape state: one context (buffers, signal pad, plan) per distinct shard shape, made
            # collectively at its first launch and reused when the shape comes back.
            "contexts": sum(len(op.contexts.table) for op in (fused, fallback) if op is not None),
            "shapes": len({tuple(r["shape"]) for r in launches})}


def planner_lines(resolution) -> str:
    """What `--chunks auto` / `--order auto` chose, and, where the planner predicts the fused kernel
    slower than the unfused sequence at any chunk count, that it still runs fused and why."""
    line = resolution.describe()
    if resolution.fused_s <= resolution.sequential_s:
        return line
    return (f"{line}\nplanner: sequential is predicted faster at this size (overlap does not pay); auto chooses among "
            f"fused plans only, and {resolution.chunks_per_rank} chunk(s) per rank is the fastest of them; `syncopy run` runs "
            "it fused anyway, since checking the fused kernel is its job; in your own code launch the unfused sequence at "
            "this size (fused.reference[grid](...): the collective, then your kernel)")


def slow_link(ms: float):
    """`--slow-link MS`: each chunk costs MS ms plus up to MS ms of jitter, each rank's sends start up to
    2.5 MS ms late, and chunks land one at a time in random order (Link.reorder), so tiles start
    before their chunks are there and a tile that read rows it did not wait for reads NaN."""
    from syncopy.runtime.transport.link import Link

    return Link(latency_s=ms / 1e3, jitter_s=ms / 1e3, start_s=2.5 * ms / 1e3, reorder=True)


def _one_launch(fused, mod, inp: dict, opts: RunOptions, chunks, world: int) -> tuple[dict, object]:
    """Launch once; (its record, its output or None). A SyncopyError is an outcome, except where it is
    the user's mistake: a fixed shape the schedule cannot cut (raised, one line, as before)."""
    from syncopy.errors import FaultError, LaunchError, SyncopyCorruptChunk, SyncopyTimeout

    if opts.launch_stamp is not None:
        Path(opts.launch_stamp).write_text(repr(time.time()))  # wall time: the parent process reads it
    start = time.perf_counter()
    try:
        out = mod.launch(fused, **inp)
    except SyncopyTimeout as exc:
        return {"outcome": "timeout", "error": str(exc), "s": time.perf_counter() - start}, None
    except SyncopyCorruptChunk as exc:
        return {"outcome": "corrupt", "error": str(exc), "s": time.perf_counter() - start}, None
    except FaultError:
        raise  # --inject names a send this run never makes: the user's mistake, one line
    except LaunchError as exc:
        if opts.random_shapes and _refused_as_expected(exc, inp, fused, chunks, world):
            return {"outcome": "refused", "error": str(exc), "s": time.perf_counter() - start}, None
        if not opts.random_shapes and opts.faults is None:
            raise
        return {"outcome": "error", "error": str(exc), "s": time.perf_counter() - start}, None
    return {"outcome": "ok", "s": time.perf_counter() - start}, out


def _refused_as_expected(exc, inp: dict, fused, chunks, world: int) -> bool:
    """A shard with fewer rows than chunks per rank is refused in one line naming chunks_per_rank."""
    return isinstance(chunks, int) and "chunks_per_rank is" in str(exc) and _shard_rows(inp, fused, world) < chunks


def _shard_rows(inp: dict, fused, world: int) -> int:
    """The rows along the schedule's dim of each rank's part of the communicated tensor."""
    s = fused.schedule
    pattern, dim = s.pattern, s.dim
    # Every template's first input has the communicated tensor's rows: the gathered or exchanged shard
    # itself, or (reduce_scatter, all_reduce) A, whose rows are the output's.
    first = next(v for v in inp.values() if hasattr(v, "shape"))
    rows = first.shape[dim]
    if pattern in ("reduce_scatter", "all_to_all"):
        return rows // world
    if pattern == "all_reduce":
        return -(-rows // world)
    return rows


def _draw_shape(rng: random.Random, limit: tuple[int, int, int], pattern: str, world: int) -> tuple[int, int, int]:
    """`limit` (the template's default shape, or --shape) with a fresh row count: one row per rank in
    about one draw of eight, a shard smaller than most chunk counts in another, else uniform up to
    `limit`'s rows. M counts rows per rank except for reduce_scatter, where it is the output's rows
    (world shards of the same size)."""
    m, n, k = limit
    per_rank = m // world if pattern == "reduce_scatter" else m
    pick = rng.random()
    rows = 1 if pick < 0.125 else rng.randint(1, 3) if pick < 0.25 else rng.randint(1, max(1, per_rank))
    return (rows * world if pattern == "reduce_scatter" else rows, n, k)


def _agree(outcome: str) -> list[str] | None:
    """Every rank's outcome of this launch (a collective: each rank waits for all), None if a peer is gone."""
    import torch.distributed as dist

    statuses = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(statuses, outcome)
    except RuntimeError:
        return None
    return statuses


def _check_result(record: dict, out, ref, tolerance: float) -> None:
    """Count the output's elements that differ from torch's (NaN counts); a returned launch with any is wrong."""
    if out is None:
        return
    diff = (out.float() - ref.float()).abs()
    scale = max(1.0, ref.float().abs().max().item()) if ref.numel() else 1.0
    bad = int((~(diff <= tolerance * scale)).sum().item())
    record["max_err"] = float("inf") if bad and not diff.isfinite().all() else (diff.max().item() / scale if diff.numel() else 0.0)
    record["wrong_elements"] = bad
    if bad:
        record["outcome"] = "wrong"


@contextlib.contextmanager
def _progress(on: bool, name: str, total: int):
    """A rich progress bar of launches (rank 0, on a terminal); `advance(record)` after each launch."""
    if not on:
        yield lambda record: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    counts = {"wrong": 0, "timeout": 0, "corrupt": 0, "error": 0}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[status]}"))
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(f"soak {name}", total=total, status="")

        def advance(record):
            if record["outcome"] in counts:
                counts[record["outcome"]] += 1
            bar.update(task, advance=1, status=", ".join(f"{v} {k}" for k, v in counts.items()))

        yield advance


#: Outcomes of a launch that returned an output (checked against torch, and timed).
RETURNED = ("ok", "wrong")


def rank_times(launches: list[dict]) -> dict:
    """One rank's launch times, as the summary counts them: `first_s` (the first launch, which also
    builds the kernel; None unless it returned), `later_s` (the median of the later launches that
    returned; None if none did), `later` (how many), and `failed` (outcome -> count of the launches
    that did not return: a failed launch's time is how long it took to fail, not a launch time)."""
    returned = [x for x in launches if x["outcome"] in RETURNED]
    later = sorted(x["s"] for x in returned if x["it"] > 0)
    failed: dict[str, int] = {}
    for x in launches:
        if x["outcome"] not in RETURNED:
            failed[x["outcome"]] = failed.get(x["outcome"], 0) + 1
    first = next((x["s"] for x in returned if x["it"] == 0), None)
    return {"first_s": first, "later_s": later[len(later) // 2] if later else None, "later": len(later), "failed": failed}


def summarize(result: RunResult) -> dict:
    """The run's figures: launches (collective launches), wrong (launches with a wrong element on some
    rank) and wrong_elements, timeouts, corrupt, refused, errors, died, and p50/p99 of launch times (ms)
    over every rank's returned launches but the first (which also builds the kernel)."""
    by_it: dict[int, set[str]] = {}
    wrong_elements = 0
    times = []
    for r in result.ranks:
        for launch in r["launches"]:
            by_it.setdefault(launch["it"], set()).update([launch["outcome"], *(["refused"] if "refused" in launch else [])])
            wrong_elements += launch.get("wrong_elements", 0)
            if launch["outcome"] in RETURNED and launch["it"] > 0:  # the first launch also builds the kernel
                times.append(launch["s"])
    kinds = list(by_it.values())
    times.sort()
    ms = (lambda q: round(times[min(len(times) - 1, int(q * len(times)))] * 1e3, 1)) if times else (lambda q: None)
    return {"launches": len(by_it), "wrong": sum("wrong" in k for k in kinds), "wrong_elements": wrong_elements,
            "timeouts": sum("timeout" in k for k in kinds), "corrupt": sum("corrupt" in k for k in kinds),
            "refused": sum("refused" in k for k in kinds), "errors": sum("error" in k for k in kinds),
            "died": sorted(result.died), "p50_ms": ms(0.5), "p99_ms": ms(0.99),
            "shapes": max((r.get("shapes", 0) for r in result.ranks), default=0),
            "contexts_held": max((r.get("contexts", 0) for r in result.ranks), default=0)}


def first_failure(result: RunResult) -> dict | None:
    """The first launch that did not end ok or refused on some rank: {it, rank, outcome, s, error}
    (s: seconds from that launch's start to its error on that rank, the detection time), or None.
    A rank an injected kill stopped leaves no records: {rank, outcome "died", s} with s from the start
    of its launch to the launcher's report (it: None)."""
    if result.died and not result.ranks:
        rank, code = min(result.died.items())
        return {"it": None, "rank": rank, "outcome": "died", "s": result.kill_detected_s,
                "error": f"rank {rank} died (exit code {code}); the launcher stopped the others"}
    found = [(launch["it"], r["rank"], launch) for r in result.ranks for launch in r["launches"]
             if launch["outcome"] != "ok"]
    if not found:
        return None
    it, rank, launch = min(found, key=lambda f: (f[0], f[2]["outcome"] == "wrong", f[1]))
    return {"it": it, "rank": rank, "outcome": launch["outcome"], "s": round(launch["s"], 3), "error": launch.get("error", "")}


_INJECT_KINDS = {"drop": 2, "delay": 3, "kill": 2, "corrupt": 2}
_INJECT_HELP = "KIND=SRC:CHUNK, KIND one of drop, kill, corrupt, or delay=SRC:CHUNK:MS; e.g. --inject drop=0:1,delay=1:0:500"


def parse_inject(text: str):
    """`--inject drop=SRC:CHUNK,delay=SRC:CHUNK:MS,kill=SRC:CHUNK,corrupt=SRC:CHUNK` as Faults (one
    line naming the option for a mistake). Several drops, delays and corrupts may be given, one kill."""
    from syncopy.runtime.transport.link import Faults

    faults: dict[str, list] = {kind: [] for kind in _INJECT_KINDS}
    for item in text.split(","):
        kind, _, where = item.strip().partition("=")
        parts = where.split(":")
        if kind not in _INJECT_KINDS or len(parts) != _INJECT_KINDS[kind] or not all(p.strip().isdigit() for p in parts):
            raise SyncopyError(f"--inject {text}: {item.strip()!r} is not {_INJECT_HELP}")
        faults[kind].append(tuple(int(p) for p in parts))
    if len(faults["kill"]) > 1:
        raise SyncopyError(f"--inject {text}: one kill per run (a killed rank sends nothing more); keep one kill=SRC:CHUNK")
    return Faults.of(drop=faults["drop"], delay={(s, c): ms / 1e3 for s, c, ms in faults["delay"]},
                     kill=faults["kill"][0] if faults["kill"] else None, corrupt=faults["corrupt"])


def check_arguments(name: str, world: int, shape, dtype: str, chunks, order, iters: int, backend: str) -> None:
    """Raise a one-line SyncopyError, naming the `syncopy run` option, for what is wrong before launch."""
    from syncopy import templates

    t = templates.get(name)  # unknown names fail here, before any process starts
    if world < 1:
        raise SyncopyError(f"--world {world}: a world has at least one rank; pass --world N with N >= 1")
    if iters < 1:
        raise SyncopyError(f"--iters {iters}: run the kernel at least once; pass --iters N with N >= 1")
    if dtype not in DTYPES:
        raise SyncopyError(f"--dtype {dtype}: unknown element type; use one of {', '.join(DTYPES)}")
    if dtype == "bf16":
        raise SyncopyError("--dtype bf16: `syncopy run` runs its ranks' kernels under the Triton interpreter, which computes "
                           "bfloat16 on raw bits (every result would be wrong); use fp32 or fp16 (bf16 runs on GPUs)")
    if backend not in BACKENDS:
        what = "moves CUDA tensors, but `syncopy run` uses CPU ranks" if backend in ("p2p", "nccl") else "unknown backend"
        raise SyncopyError(f"--backend {backend}: {what}; use {' or '.join(BACKENDS)}")
    if chunks is not None and chunks != "auto" and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1):
        raise SyncopyError(f"--chunks {chunks}: give a positive chunk count per rank, or auto")
    if isinstance(order, list) and sorted(order) != list(range(1, world)):
        example = ",".join(str(o) for o in range(1, world)) or "(none: a world of one rank has no peers)"
        raise SyncopyError(f"--order {','.join(map(str, order))}: list each peer offset 1..{world - 1} exactly once "
                           f"for --world {world} (e.g. {example}), or use a named order")
    if shape is not None:
        _check_shape(name, shape, t.module.DEFAULT_SHAPE)


def _check_shape(name: str, shape, default) -> None:
    # A template that ignores K says so with K = 0 in its default shape (ag_rmsnorm); there K may be 0.
    k_unused = default[2] == 0
    if len(shape) != 3 or min(shape[:2]) < 1 or shape[2] < (0 if k_unused else 1):
        text = ",".join(map(str, shape))
        if k_unused:
            raise SyncopyError(f"--shape {text}: give M and N of at least 1 (K is unused by {name}: 0 or more)")
        raise SyncopyError(f"--shape {text}: every dimension must be at least 1 (a zero-size problem checks nothing); give positive M,N,K")


def _check_routing(opts: RunOptions) -> None:
    """--routing names one of the template's routings (a2a_gemm's ROUTINGS); other templates take none."""
    if opts.routing is None:
        return
    from syncopy import templates

    routings = getattr(templates.get(opts.name).module, "ROUTINGS", ())
    if not routings:
        raise SyncopyError(f"--routing {opts.routing}: template {opts.name} has no token routing (a2a_gemm has); drop --routing")
    if opts.routing not in routings:
        raise SyncopyError(f"--routing {opts.routing}: {opts.name} routes tokens {', '.join(routings)}; use one of those")


def _check_soak(opts: RunOptions, world: int) -> None:
    if opts.slow_link_ms < 0:
        raise SyncopyError(f"--slow-link {opts.slow_link_ms:g}: give a chunk's cost in milliseconds, 0 or more, e.g. --slow-link 4")
    if opts.timeout_s is not None and not 0 < opts.timeout_s <= 1e9:
        raise SyncopyError(f"--timeout {opts.timeout_s:g}: give a positive number of seconds, e.g. --timeout 10")
    faults = opts.faults
    if faults is not None:
        named = [*faults.drop, *faults.corrupt, *(k for k, _ in faults.delay_s), *([faults.kill] if faults.kill else [])]
        for src, _ in named:
            if not 0 <= src < world:
                raise SyncopyError(f"--inject: rank {src} is not in a world of {world} ranks; name a rank 0..{world - 1}")
        # A template whose faults are routed to several operators (tp_mlp) refuses a fault none of
        # them makes here, once: from the ranks, whichever reported first would name itself.
        from syncopy import templates

        check = getattr(templates.get(opts.name).module, "check_faults", None)
        if check is not None:
            check(faults, world, opts.chunks, opts.order)


def run(name: str, world: int, shape=None, dtype="fp32", chunks=None, order=None, iters=2, backend="auto", **soak) -> RunResult:
    """Run template `name` on `world` CPU ranks (or the current torchrun world); per-rank results.

    `soak`: the other fields of RunOptions (random_shapes, seed, faults, timeout_s, verify_chunks, progress).
    Raises SyncopyError (one line) for bad arguments, before any rank starts, and for a rank that
    stopped on a SyncopyError (`rank R: message`).
    """
    check_arguments(name, world, shape, dtype, chunks, order, iters, backend)
    opts = RunOptions(name, tuple(shape) if shape else None, dtype, chunks, order, iters, backend, **soak)
    _check_soak(opts, world)
    _check_routing(opts)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return RunResult([_rank_main(opts)])
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ["TRITON_INTERPRET"] = "1"
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=world, run_id=f"syncopy-{os.getpid()}",
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.1,
                          start_method="spawn")
    with tempfile.TemporaryDirectory(prefix="syncopy-run-") as report_dir, _launcher_log() as log:
        try:
            results = elastic_launch(config, _rank_main)(opts, report_dir)
        except ChildFailedError as exc:
            reports = sorted(Path(report_dir).glob("*.txt"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
            killed = _killed(exc, opts)
            if killed:  # --inject kill: the rank died as told; the launcher stopped the others
                return RunResult([], killed, _since_stamp(Path(report_dir, KILL_STAMP)))
            if not reports:  # not a user mistake: show what the launcher saw
                log.replay()
                raise
            rank = reports[0].stem
            raise SyncopyError(f"rank {rank}: {reports[0].read_text()}") from None
    return RunResult([results[r] for r in sorted(results)])


def _since_stamp(stamp: Path) -> float | None:
    """Seconds from the wall time in `stamp` (a rank's launch start) to now; None if it never launched."""
    try:
        return round(time.time() - float(stamp.read_text()), 3)
    except (OSError, ValueError):
        return None


def _killed(exc, opts: RunOptions) -> dict[int, int]:
    """The ranks an injected kill stopped (rank -> exit code), from the launcher's failures."""
    from syncopy.runtime.transport.link import Faults

    if opts.faults is None or opts.faults.kill is None:
        return {}
    return {int(f.local_rank): f.exitcode for f in exc.failures.values() if f.exitcode == Faults.KILLED_EXIT}
