"""`syncopy verify`: a fused kernel against its own unfused self on CPU worlds, under adversarial arrival.

    syncopy verify KERNEL.py --schedule S.yaml --example EXAMPLE.py:FN [--world 2,3] [--launches 3] [--seed N]
    syncopy verify TEMPLATE [--world 2,3] [--launches 3] [--seed N]
    syncopy.verify("kernel.py", schedule="s.yaml", example="example.py:make", worlds=(2, 3))

`FN(rank, world, launch)` returns `(grid, args, kwargs)` for that rank's launch, as the user would make
it: the communicated tensor at its per-rank size, everything else as for the kernel itself. Each world
is its own set of processes (gloo, the Triton interpreter); in each rank every launch's arguments are
made once, run through the unfused kernel (`fused.reference`: the collective, then the user's own
kernel), and then through the fused kernel under every condition, on fresh copies:

    reordered  a slow link that lets chunks land one at a time in a random order (other launches and
               seeds: other orders), each rank's sends starting late by a random amount; every receive
               buffer NaN (integers: a sentinel) until its chunk's flag rises
    held       consumers: every remote chunk kept out, its flag down, until a program of the kernel is
               seen polling that flag (or for a bound: reported as released unwaited), buffers poisoned
    checked    checked mode: every read of a communicated tensor (each listed tensor) checks that its
               chunks landed, every producer store that its chunk was not announced yet
    (producers, every condition) each chunk's partial rows as the link took them when its flag rose,
               compared with the kernel's final rows: a chunk announced before its last store differs

A launch agrees when every tensor argument matches the reference's (NaN where the reference has NaN;
tolerance by dtype, since tiles and arrival-order loops may sum in another order; integers exactly)
and no chunk was taken early. A difference names the world, rank, condition, launch, tensor, rows,
chunk and the first differing element. Exit status 0: everything agrees; 1: a difference or an error
of the fused kernel; 2: bad input (one line, nothing run).

Under the interpreter bfloat16 is computed on raw bits: verify kernels in fp32 or fp16 on CPU.
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from syncopy.errors import SyncopyError

#: The conditions, in the order they run. Consumers (all_gather, all_to_all) run all three; producers
#: (reduce_scatter, all_reduce) all but `held` (their chunks are taken at their flag, not waited for).
CONDITIONS = ("reordered", "held", "checked")
PRODUCERS = ("reduce_scatter", "all_reduce")
#: Relative tolerance by element type (of the largest reference magnitude, at least 1): the fused
#: kernel may visit tiles and loop iterations in another order, so sums may round differently.
TOLERANCE = {"float32": 1e-4, "float64": 1e-9, "float16": 1e-2, "bfloat16": 5e-2}
#: How long `held` keeps a chunk no program polls: far above a tile's time under the interpreter.
HOLD_S = 2.0


@dataclass(frozen=True)
class Target:
    """What is verified: a kernel file's kernel with its schedule and example, or a template."""

    kernel: str | None = None  # KERNEL.py
    schedule: str | None = None  # S.yaml
    example: str | None = None  # EXAMPLE.py:FN
    template: str | None = None
    launches: int = 3
    seed: int = 0
    timeout_s: float = 30.0

    @property
    def name(self) -> str:
        return self.template or f"{self.kernel}"


@dataclass
class Difference:
    world: int
    rank: int
    condition: str
    launch: int
    what: str  # one line: which tensor, rows, chunk, first element; or the error

    def line(self) -> str:
        return f"world {self.world} rank {self.rank} {self.condition} launch {self.launch}: {self.what}"


@dataclass
class Verdict:
    """What `syncopy verify` found: per world, per rank, per condition, the launches' records."""

    target: Target
    worlds: dict[int, list[dict]] = field(default_factory=dict)  # world -> per rank {"rank", "conditions": {...}}
    seconds: dict[int, float] = field(default_factory=dict)  # world -> wall seconds of its processes

    @property
    def differences(self) -> list[Difference]:
        out = []
        for world, ranks in sorted(self.worlds.items()):
            for r in ranks:
                for cond, launches in r["conditions"].items():
                    for rec in launches:
                        for what in rec.get("differences", []):
                            out.append(Difference(world, r["rank"], cond, rec["launch"], what))
        return out

    @property
    def ok(self) -> bool:
        return bool(self.worlds) and not self.differences

    def lines(self) -> list[str]:
        """Per world and condition one line (ok, with what the oracles saw), then each difference."""
        out = []
        for world, ranks in sorted(self.worlds.items()):
            conds = list(ranks[0]["conditions"]) if ranks else []
            for cond in conds:
                bad = [r["rank"] for r in ranks if any(rec.get("differences") for rec in r["conditions"].get(cond, []))]
                seen = _seen(cond, [rec for r in ranks for rec in r["conditions"].get(cond, [])])
                launches = max((len(r["conditions"].get(cond, [])) for r in ranks), default=0)
                verdict = f"DIFFERS on rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}" if bad else "ok"
                out.append(f"world {world}  {cond:<9}  {verdict}  ({launches} launches on {len(ranks)} ranks{seen})")
        notes = {n for ranks in self.worlds.values() for r in ranks for n in r.get("notes", [])}
        out += [f"note: {n}" for n in sorted(notes)]
        diffs = self.differences
        for d in diffs[:20]:
            out.append("  " + d.line())
        if len(diffs) > 20:
            out.append(f"  ... and {len(diffs) - 20} more")
        return out

    def to_json(self) -> dict:
        return {"target": self.target.__dict__, "ok": self.ok, "seconds": self.seconds,
                "differences": [d.__dict__ for d in self.differences], "worlds": {str(k): v for k, v in self.worlds.items()}}


def _seen(cond: str, recs: list[dict]) -> str:
    """What the condition's oracle saw, summed over ranks and launches."""
    held = sum(len(r.get("waited", [])) for r in recs)
    unwaited = sum(len(r.get("unwaited", [])) for r in recs)
    taken = sum(r.get("taken", 0) for r in recs)
    parts = []
    if cond == "held":
        parts.append(f"{held} remote chunks held until a program polled them, {unwaited} released unpolled")
    if taken:
        parts.append(f"{taken} chunks taken at their flag, each equal to its final rows" if not any(r.get("early") for r in recs)
                     else f"{taken} chunks taken at their flag")
    return "; " + "; ".join(parts) if parts else ""


# --------------------------------------------------------------------------------------------------
# The parent: check the input, start one world per size, gather the verdict.


def verify(kernel=None, schedule=None, example=None, *, template: str | None = None, worlds=(2, 3), launches: int = 3,
           seed: int = 0, timeout_s: float = 30.0, progress=None) -> Verdict:
    """Verify a kernel (a path, or the @triton.jit function itself, defined at the top of a file) with
    its schedule (a path) and example (`"EXAMPLE.py:FN"`, or FN itself), or a template by name, on CPU
    worlds of each size in `worlds`. Raises SyncopyError (one line) for bad input, before any rank
    starts. `progress(line)` is called with each world's lines as it finishes."""
    target = check(kernel, schedule, example, template, worlds, launches, seed, timeout_s)
    verdict = Verdict(target)
    for world in worlds:
        start = time.perf_counter()
        verdict.worlds[world] = _spawn(target, world)
        verdict.seconds[world] = round(time.perf_counter() - start, 1)
        if progress is not None:
            part = Verdict(target, {world: verdict.worlds[world]})
            for line in part.lines():
                progress(line)
    return verdict


def check(kernel, schedule, example, template, worlds, launches, seed, timeout_s) -> Target:
    """The Target, or a one-line SyncopyError naming what to change."""
    worlds = list(worlds)
    if not worlds or any(isinstance(w, bool) or not isinstance(w, int) or w < 2 for w in worlds):
        raise SyncopyError(f"--world {','.join(map(str, worlds))}: verify worlds of 2 ranks or more (a world of one moves "
                           "no chunk, nothing arrives out of order); e.g. --world 2,3")
    if isinstance(launches, bool) or not isinstance(launches, int) or launches < 1:
        raise SyncopyError(f"--launches {launches}: give at least one launch (three or more find stale data from a previous launch)")
    if not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 1e6:
        raise SyncopyError(f"--timeout {timeout_s}: give a positive number of seconds, e.g. --timeout 30")
    if template is not None:
        import syncopy.templates as templates

        templates.get(template)  # an unknown name is one line
        if kernel is not None or schedule is not None or example is not None:
            raise SyncopyError(f"syncopy verify {template}: a template brings its kernel, schedule and inputs; "
                               "drop --schedule and --example")
        return Target(template=template, launches=launches, seed=seed, timeout_s=float(timeout_s))
    kernel = _as_path(kernel, "KERNEL.py")
    if schedule is None:
        raise SyncopyError(f"syncopy verify {kernel}: a kernel file needs --schedule S.yaml (its `kernel:` names the kernel)")
    if example is None:
        raise SyncopyError(f"syncopy verify {kernel}: give --example EXAMPLE.py:FN, where FN(rank, world, launch) returns "
                           "(grid, args, kwargs) for that rank's launch (the communicated tensor at its per-rank size)")
    schedule = os.fspath(schedule) if not isinstance(schedule, str) else schedule
    example = _as_example(example)
    from syncopy.schedule import load_schedule

    s = load_schedule(Path(schedule))
    if s.kernel is None:
        from syncopy.errors import ScheduleError, ScheduleLocation

        raise ScheduleError("missing required key for verify; add `kernel: NAME` (the @triton.jit function to verify)",
                            ScheduleLocation(schedule, "kernel"))
    path, _, fn = example.rpartition(":")
    if not path or not fn.isidentifier():
        raise SyncopyError(f"--example {example}: give FILE.py:FUNCTION, e.g. --example example.py:make")
    if not Path(path).is_file():
        raise SyncopyError(f"--example {example}: cannot read {path}: No such file; check the path")
    if not Path(kernel).is_file():
        raise SyncopyError(f"{kernel}: cannot read the kernel file: No such file; check the path")
    return Target(kernel=str(Path(kernel).resolve()), schedule=str(Path(schedule).resolve()),
                  example=f"{Path(path).resolve()}:{fn}", launches=launches, seed=seed, timeout_s=float(timeout_s))


def _as_path(kernel, what: str) -> str:
    if kernel is None:
        raise SyncopyError(f"syncopy verify: give {what} (with --schedule and --example) or a template name")
    if isinstance(kernel, (str, os.PathLike)):
        return os.fspath(kernel)
    from syncopy.runtime.launch.tuning import unwrap

    fn = getattr(unwrap(kernel)[0], "fn", None)  # autotuned, heuristics: the @triton.jit function underneath
    if fn is None or not inspect.isfunction(fn):
        raise SyncopyError(f"syncopy.verify: kernel must be a path or a @triton.jit function, not {type(kernel).__name__}")
    return inspect.getsourcefile(fn)


def _as_example(example) -> str:
    if isinstance(example, str):
        return example
    if inspect.isfunction(example) and example.__qualname__ == example.__name__:
        return f"{inspect.getsourcefile(example)}:{example.__name__}"
    raise SyncopyError("syncopy.verify: example must be 'EXAMPLE.py:FN' or a function defined at the top of a file "
                       "(the ranks import it by name)")


def _spawn(target: Target, world: int) -> list[dict]:
    """Run `world` ranks (torch's elastic launcher, spawned processes); each rank's record, by rank."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from syncopy.launcher import launcher_log

    os.environ["TRITON_INTERPRET"] = "1"
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=world, run_id=f"syncopy-verify-{os.getpid()}-{world}",
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.1,
                          start_method="spawn")
    with tempfile.TemporaryDirectory(prefix="syncopy-verify-") as report_dir, launcher_log() as log:
        try:
            results = elastic_launch(config, _rank_main)(target, report_dir)
        except ChildFailedError:
            reports = sorted(Path(report_dir).glob("*.txt"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
            if not reports:
                log.replay()
                raise
            raise SyncopyError(f"world {world} rank {reports[0].stem}: {reports[0].read_text()}") from None
    return [results[r] for r in sorted(results)]


# --------------------------------------------------------------------------------------------------
# A rank.

#: The exit status of a rank that stopped on the user's mistake (its line is in the report folder).
USER_ERROR_EXIT = 3


def _rank_main(target: Target, report_dir: str) -> dict:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        return _rank_body(target)
    except SyncopyError as exc:
        Path(report_dir, f"{os.environ.get('RANK', '?')}.txt").write_text(str(exc))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(USER_ERROR_EXIT)  # the launcher stops the peers; the parent prints the line


def _rank_body(target: Target) -> dict:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=target.timeout_s * 4 + 60))
    torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    if target.template:
        subject = _TemplateSubject(target.template, rank, world, target.launches, target.seed)
    else:
        from syncopy.schedule import load_schedule

        schedule = load_schedule(Path(target.schedule))
        kernel = _import(target.kernel, schedule.kernel, "the schedule's `kernel:`")
        path, _, fn = target.example.rpartition(":")
        example = _import(path, fn, "--example", callable_only=True)
        subject = _KernelSubject(kernel, schedule, example, f"--example {target.example}", rank, world, target.launches,
                                 target.timeout_s)
    return {"rank": rank, "notes": subject.notes, "conditions": _conditions(subject, target.launches, target.seed, target.timeout_s)}


def check_in_world(kernel, schedule, example, *, launches: int = 3, seed: int = 0, timeout_s: float = 30.0,
                   order=None, conditions=CONDITIONS) -> dict:
    """The verifier's conditions in the running world (the default process group; every rank calls it
    with the same arguments, as for a collective): `kernel` (a @triton.jit function, autotuned or not)
    with `schedule` (a path, dict or Schedule; `order` overrides its order), `example(rank, world,
    launch) -> (grid, args, kwargs)`. This rank's record: {"rank", "conditions": {condition: [launch
    record]}}, each launch record's "differences" empty where it agreed. What `syncopy verify` runs in
    each rank, for a test suite's own worlds."""
    import torch.distributed as dist

    from syncopy.schedule import load_schedule

    schedule = load_schedule(schedule)
    if order is not None:
        schedule = schedule.model_copy(update={"order": order})
    rank, world = dist.get_rank(), dist.get_world_size()
    label = f"example {getattr(example, '__qualname__', example)}"
    subject = _KernelSubject(kernel, schedule, example, label, rank, world, launches, timeout_s)
    return {"rank": rank, "notes": subject.notes, "conditions": _conditions(subject, launches, seed, timeout_s, conditions)}


def check_template_in_world(name: str, *, launches: int = 3, seed: int = 0, timeout_s: float = 30.0,
                            conditions=CONDITIONS) -> dict:
    """As check_in_world, for template `name` (its operator, inputs and torch reference)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    subject = _TemplateSubject(name, rank, world, launches, seed)
    return {"rank": rank, "conditions": _conditions(subject, launches, seed, timeout_s, conditions)}


def _conditions(subject, launches: int, seed: int, timeout_s: float, conditions=CONDITIONS) -> dict:
    import torch.distributed as dist

    world = dist.get_world_size()
    out = {}
    broken = False
    for cond in [c for c in conditions if not (subject.producer and c == "held")]:
        recs = out[cond] = []
        if broken:
            continue
        op = subject.fused(_options(cond, seed, timeout_s))
        for launch in range(launches):
            rec = _one(subject, op, cond, launch)
            recs.append(rec)
            statuses = [None] * world
            dist.all_gather_object(statuses, rec.get("fatal", False))
            if any(statuses):  # a rank's group is broken (a timeout, a failed transfer): nothing more can run
                broken = True
                break
    return out


def _options(cond: str, seed: int, timeout_s: float) -> dict:
    from syncopy.runtime.transport.link import Link

    if cond == "held":
        link = Link(latency_s=0.001, hold_until_waited=True, hold_s=HOLD_S, seed=seed, record_taken=True)
    else:
        link = Link(latency_s=0.003, jitter_s=0.003, start_s=0.008, reorder=True, seed=seed, record_taken=True)
    return dict(link=link, poison_receive=True, checked=cond == "checked", timeout_s=timeout_s)


def _one(subject, op, cond: str, launch: int) -> dict:
    """One launch of `op` under `cond`, compared with the reference; its record."""
    from syncopy.errors import SyncopyError as Error, SyncopyReadError
    from syncopy.runtime.transport.link import Hold, Taken

    rec: dict = {"launch": launch, "differences": []}
    held, taken = len(Hold.records), len(Taken.records)
    try:
        got = subject.run_fused(op, launch)
    except Error as exc:
        rec["differences"].append(f"fused kernel failed: {type(exc).__name__}: {exc}")
        # A read check stops the launch it found; anything else (a timeout, a failed transfer) may
        # have broken the group's transport, and the ranks stop together.
        rec["fatal"] = not isinstance(exc, SyncopyReadError)
        return rec
    rec["differences"] += subject.compare(got, launch, op)
    mine = [r for r in Hold.records[held:]]
    rec["waited"] = sorted(g for r in mine for g in r["waited"])
    rec["unwaited"] = sorted(g for r in mine for g in r["unwaited"])
    notes = Taken.records[taken:]
    early = []
    for note in notes:
        bad = _mismatch(note["rows"], note["partial"], 0.0, ("taken", "final"))
        if bad is not None:
            early.append(f"chunk {note['chunk']} announced before its last store: taken at its flag, {bad}")
    rec["taken"], rec["early"] = len(notes), early
    rec["differences"] += early
    del Taken.records[taken:]  # the copies are this launch's only
    return rec


def _mismatch(got, want, tol: float, names=("fused", "reference")) -> str | None:
    """None where `got` matches `want` (NaN where `want` is NaN), else the first differing element."""
    import torch

    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} where the reference has {tuple(want.shape)}"
    if got.dtype.is_floating_point:
        g, w = got.double(), want.double()
        scale = max(1.0, float(torch.nan_to_num(w.abs(), nan=0.0, posinf=0.0).max())) if w.numel() else 1.0
        same = ((g - w).abs() <= tol * scale) | (g.isnan() & w.isnan()) | ((g == w) & w.isinf())
    else:
        same = got == want
    bad = ~same
    if not bool(bad.any()):
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    at = ", ".join(map(str, first))
    return f"{int(bad.sum())} elements differ, first [{at}]: {names[0]} {_show(got[first])}, {names[1]} {_show(want[first])}"


def _show(x) -> str:
    v = x.item()
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _tensors_of(named: dict) -> dict:
    """The tensors among a launch's arguments by name, a host tensor descriptor's by its base (an
    output written through one is compared too)."""
    import torch

    from syncopy.runtime.launch import host_descriptors

    bases = {k: v.base if host_descriptors.is_descriptor(v) else v for k, v in named.items()}
    return {k: v for k, v in bases.items() if isinstance(v, torch.Tensor)}


def _clone(value):
    import dataclasses

    import torch

    from syncopy.runtime.launch import host_descriptors

    if isinstance(value, torch.Tensor):
        return value.clone()
    if host_descriptors.is_descriptor(value):  # its base cloned: launches must not share the tensor it writes
        return dataclasses.replace(value, base=value.base.clone())
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def _ranges(rows: list[int]) -> str:
    out, start = [], None
    for i, r in enumerate(rows):
        if start is None:
            start = r
        if i + 1 == len(rows) or rows[i + 1] != r + 1:
            out.append(f"{start}" if start == r else f"{start}..{r}")
            start = None
    return ", ".join(out[:4]) + (f" (+{len(out) - 4} more)" if len(out) > 4 else "")


class _KernelSubject:
    """A user's kernel, its schedule and its example function."""

    def __init__(self, kernel, schedule, example, where: str, rank: int, world: int, launches: int, timeout_s: float):
        from syncopy.api import overlap

        self.where, self.rank, self.world = where, rank, world
        self.schedule = schedule
        self.producer = schedule.pattern in PRODUCERS
        self.kernel, self.example = kernel, example
        self.plain = overlap(schedule, timeout_s=timeout_s, checked=False)(kernel)
        self.names = list(self.plain.signature.parameters)
        self.calls = [self._call(launch) for launch in range(launches)]
        self.references = [self._reference(call) for call in self.calls]
        shapes = [tuple(tuple(v.shape) for v in self._tensors(list(a), dict(k)).values()) for _, a, k in self.calls]
        self.notes = [] if launches < 2 or len(set(shapes)) < len(shapes) else [
            f"{where}: no two launches have the same shapes, so none reuses the buffers and flags of an earlier one "
            "(where stale data would show); make two launches of one shape"]

    def _call(self, launch: int):
        where = self.where
        try:
            made = self.example(self.rank, self.world, launch)
        except Exception as exc:  # the user's example: one line, where and what
            raise SyncopyError(f"{where}: raised {type(exc).__name__}: {exc} (rank {self.rank}, world {self.world}, "
                               f"launch {launch})") from None
        if not (isinstance(made, tuple) and len(made) == 3 and isinstance(made[1], (list, tuple)) and isinstance(made[2], dict)):
            raise SyncopyError(f"{where}: returned {type(made).__name__}; return (grid, args, kwargs): a grid tuple or "
                               "callable, a list of the kernel's positional arguments, a dict of keyword arguments")
        return made

    def _reference(self, call):
        """The launch through the user's own kernel object, as they would run it unfused (plain Triton:
        its autotuner prunes and picks on its own), after the collective by hand: every listed tensor
        all-gathered along `dim`; reduce_scatter: the kernel into a full buffer of zeros, then the
        sum over ranks, this rank's rows kept; all_reduce: the kernel on C, then the sum. No code of
        syncopy's fused path or of `fused.reference` computes it (all_to_all, whose split sizes are
        the runtime's, excepted: `fused.reference`). The checks a fused launch makes of what the grid
        writes come first, so that a grid writing past an output is one line, not memory corruption."""
        import torch
        import torch.distributed as dist

        from syncopy.runtime.launch import host_descriptors

        grid, args, kwargs = _clone(call)
        s = self.schedule
        try:
            if s.pattern == "all_to_all":
                self.plain.reference[grid](*args, **kwargs)
                return self._tensors(args, kwargs)
            bound_call = self.plain.binder.bind(list(args), dict(kwargs))
            bound, shard, options = bound_call.arguments, bound_call.shard, bound_call.options
            self.plain.binder.check_strides(bound_call, self.world)  # along dim 0 it checks nothing
            call_args = dict(bound)
            if s.pattern == "all_gather":
                for name in s.tensors:
                    parts = [torch.empty_like(bound[name]) for _ in range(self.world)]
                    dist.all_gather(parts, bound[name].contiguous())
                    call_args[name] = torch.cat(parts, dim=s.dim).contiguous()
            elif s.pattern == "reduce_scatter":
                shape = list(shard.shape)
                shape[s.dim] *= self.world
                call_args[s.tensor] = torch.zeros(shape, dtype=shard.dtype, device=shard.device)
            if s.dim == 0:  # with the config (autotune, heuristics) a fused launch takes: the probe needs its meta-parameters
                tuned, meta = self.plain.binder.tuned(grid, dict(call_args), dict(options), None,
                                                      lambda: torch.empty_like(call_args[s.tensors[0]]))
                self.plain.orders.check_extents(grid, {**tuned, **meta}, self.world)
        except SyncopyError as exc:
            raise SyncopyError(f"{self.where}: the launch is refused (rank {self.rank}): {exc}") from None
        args, kwargs = list(args), dict(kwargs)
        # (a host descriptor: one over the gathered tensor, as the user would make it unfused)
        given = host_descriptors.rewrapped({name: call_args[name] for name in s.tensors}, bound_call.descriptors)
        for name in s.tensors:  # the user's call as they made it, the communicated tensors replaced (an
            at = self.names.index(name)  # autotuner's prune_configs_by sees positional arguments only)
            if at < len(args):
                args[at] = given[name]
            else:
                kwargs[name] = given[name]
        with _untimed_autotuners(self.kernel):
            self.kernel[grid](*args, **kwargs)
        if s.pattern == "reduce_scatter":
            full = call_args[s.tensor]
            dist.all_reduce(full)
            rows = shard.shape[s.dim]
            shard.copy_(full.narrow(s.dim, self.rank * rows, rows))
            call_args[s.tensor] = shard
        elif s.pattern == "all_reduce":
            dist.all_reduce(call_args[s.tensor])
        elif s.pattern == "all_gather":
            for name in s.tensors:
                call_args[name] = bound[name]  # the fused launch's arguments hold the shards: those are compared
        return _tensors_of(call_args)

    def _tensors(self, args, kwargs) -> dict:
        named = dict(zip(self.names, args))
        named.update({k: v for k, v in kwargs.items() if k in self.names})
        return _tensors_of(named)

    def fused(self, options: dict):
        from syncopy.api import overlap

        return overlap(self.schedule, **options)(self.kernel)

    def run_fused(self, op, launch: int) -> dict:
        grid, args, kwargs = _clone(self.calls[launch])
        op[grid](*args, **kwargs)
        return self._tensors(args, kwargs)

    def compare(self, got: dict, launch: int, op) -> list[str]:
        want = self.references[launch]
        out = []
        for name, ref in want.items():
            tol = TOLERANCE.get(str(ref.dtype).removeprefix("torch."), 0.0)
            bad = _mismatch(got[name], ref, tol)
            if bad is not None:
                out.append(f"{name}: {self._where(name, got[name], ref, tol, op)}{bad}")
        return out

    def _where(self, name: str, got, want, tol: float, op) -> str:
        """'rows a..b (chunks of rank r: g, ...) ' of the differing elements along the schedule's dim, where
        the tensor's rows are the communicated tensor's (gathered, or the output of a producer)."""
        import torch

        dim = self.schedule.dim
        if got.dim() <= dim or got.shape != want.shape:
            return ""
        g, w = got.double(), want.double()
        scale = max(1.0, float(torch.nan_to_num(w.abs(), nan=0.0, posinf=0.0).max())) if w.numel() else 1.0
        bad = ~(((g - w).abs() <= tol * scale) | (g.isnan() & w.isnan())) if got.dtype.is_floating_point else got != want
        rows = sorted(set(int(i) for i in bad.nonzero()[:, dim]))
        text = f"rows {_ranges(rows)} "
        plan = _last_plan(op)
        if plan is None:
            return text
        offset = 0
        if self.producer and self.schedule.pattern == "reduce_scatter" and name == self.schedule.tensor:
            offset = self.rank * plan.rows_per_rank  # this rank's shard of the result
        total = plan.world * plan.rows_per_rank if not plan.uneven else None
        if name != self.schedule.tensor and got.shape[dim] != total:
            return text  # rows of a tensor that are not the communicated tensor's
        chunks = sorted({c for r in rows for c in range(plan.world * plan.chunks_per_rank)
                         if plan.bounds(c)[0] <= r + offset < plan.bounds(c)[1]})
        owners = sorted({c // plan.chunks_per_rank for c in chunks})
        return text + f"(chunk{'s' if len(chunks) > 1 else ''} {_ranges(chunks)}, from rank{'s' if len(owners) > 1 else ''} " \
                      f"{', '.join(map(str, owners))}) "


@contextlib.contextmanager
def _untimed_autotuners(kernel):
    """Under the interpreter, the user's autotuner (Triton's own: it prunes as Triton does) with a
    benchmarker that times every config alike, as there is no driver to time them with: Triton then
    takes the first config its pruning leaves, the one a fused launch runs there by default."""
    from syncopy.runtime.launch.tuning import _is_autotuner, unwrap
    from syncopy.runtime.where import interpreting

    tuners = [layer for layer in unwrap(kernel)[1] if _is_autotuner(layer)] if interpreting() else []
    saved = [(t, t._do_bench) for t in tuners]
    for t in tuners:
        t._do_bench = lambda kernel_call, quantiles: [1.0, 1.0, 1.0]
    try:
        yield
    finally:
        for t, bench in saved:
            t._do_bench = bench


def _last_plan(op):
    table = getattr(getattr(op, "contexts", None), "table", None)
    if not table:
        return None
    ctx, _ = list(table.values())[-1]
    return getattr(ctx, "plan", None)


class _TemplateSubject:
    """A template: its operator, inputs and torch reference (templates/<name>/template.py)."""

    def __init__(self, name: str, rank: int, world: int, launches: int, seed: int):
        import torch

        import syncopy.templates as templates

        self.rank, self.world = rank, world
        self.t = templates.get(name)
        self.mod = self.t.module
        self.producer = self.t.schedule().pattern in PRODUCERS if not self.t.pipeline else False
        self.dtype = torch.float32
        self.inputs = [self.mod.inputs(rank, world, self.shape(launch, world), self.dtype, seed=seed * 1009 + launch)
                       for launch in range(launches)]
        self.references = [self.mod.reference(**_clone(inp)) for inp in self.inputs]
        self.notes = []

    def shape(self, launch: int, world: int) -> tuple:
        """The template's default shape, and on every third launch two thirds of its rows (M: rows per
        rank; for reduce_scatter the result's rows, kept a multiple of the world): a new shape, new
        buffers and tile tables, ragged chunks; the launch after the first is a warm one."""
        m, n, k = self.mod.DEFAULT_SHAPE
        if launch % 3 != 2:  # the second launch warm (the first's shape), the third a new one
            return (m, n, k)
        rows = m * 2 // 3
        if self.producer and self.t.schedule().pattern == "reduce_scatter":
            rows = max(world, rows // world * world)
        return (rows, n, k)

    def fused(self, options: dict):
        return self.t.fused(**options)

    def run_fused(self, op, launch: int) -> dict:
        return {"output": self.mod.launch(op, **_clone(self.inputs[launch]))}

    def compare(self, got: dict, launch: int, op) -> list[str]:
        ref = self.references[launch]
        bad = _mismatch(got["output"], ref, self.mod.TOLERANCE[self.dtype])
        return [] if bad is None else [f"output: {bad}"]


def _import(path: str, name: str, what: str, callable_only: bool = False):
    """`name` of the Python file at `path` (imported as its own module, as Triton needs a file)."""
    module_name = f"syncopy_verify_{abs(hash(path))}"
    mod = sys.modules.get(module_name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as exc:
            raise SyncopyError(f"{path}: importing it raised {type(exc).__name__}: {exc}") from None
    found = getattr(mod, name, None)
    if found is None:
        raise SyncopyError(f"{path}: no '{name}' ({what}); fix the name or the file")
    if callable_only and not callable(found):
        raise SyncopyError(f"{path}: '{name}' ({what}) is not a function; give FN(rank, world, launch) -> (grid, args, kwargs)")
    if not callable_only:
        from syncopy.runtime.launch.tuning import unwrap

        if not callable(getattr(unwrap(found)[0], "fn", None)):
            raise SyncopyError(f"{path}: '{name}' ({what}) is not a @triton.jit function ({type(found).__name__}); fix `kernel:` or the file")
    return found
