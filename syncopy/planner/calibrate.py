"""Fit a profile's efficiency and overhead terms to measured runs (the "adapt" step of POAS).

Benchmark JSON, as `benchmarks/overlap_cpu.py --json` (and the GPU check) should write it:

    {
      "hardware": "cpu-gloo",                 # optional: the profile the runs were measured on
      "records": [
        {
          "template": "ag_gemm",              # a template of syncopy.planner.workloads (or a pattern)
          "world": 2,
          "shape": [256, 256, 256],           # M, N, K as for `syncopy plan --shape`
          "dtype": "fp32",                    # default fp32
          "chunks_per_rank": 4,
          "order": "ring",                    # default ring
          "backend": "gloo",                  # optional: default the profile's default_backend
          "link": {"latency_s": 0.01, "bandwidth_Bps": 2.0e6, "jitter_s": 0.0},
                                              # optional: the CPU backend's emulated link
                                              # (syncopy.runtime.transport.link.Link), added to the native one
          "sequential_s": 0.91,               # measured times (medians), seconds; at least one
          "stream_overlap_s": 0.70,
          "fused_s": 0.52
        }
      ]
    }

A single record (an object with those keys) or a bare list of records is accepted too, and keys
that are not listed here (repetitions, ratios, predictions) are ignored. So is the output of
`benchmarks/gpu_bench.py --json` (fp16 AG-GEMM): each "overlap" entry ({m, n, k, world, chunks,
sequential_ms, stream_overlap_ms, fused_ms}) is a record, and each "wait_overhead" entry (the
fused kernel with every chunk already present against the original kernel) is a world-1 record
whose fused time is all wait-check overhead.

The fit moves, by a Nelder-Mead search in log space, compute.efficiency, compute.tile_overhead_s,
the link's alpha_s and efficiency, and the four overheads, to minimise the squared log error of
every measured time, with a weak pull towards the starting profile so that a term no record
depends on stays where it was. Vendor peaks are never changed.

    python -m syncopy.planner.calibrate results.json [more.json ...] --hardware cpu-gloo -o cpu-gloo-calibrated.yaml
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from syncopy.planner.hardware import HardwareProfile, load_profile, reject_booleans, save_profile
from syncopy.planner.simulate import Simulator
from syncopy.planner.workloads import make_workload

#: What a record can measure, and the key it is stored under.
EXECUTIONS = ("sequential_s", "stream_overlap_s", "fused_s")

# A term that starts at zero cannot be scaled; the search starts it here instead (seconds).
_SEED_S = 1e-6
# Weight of the pull towards the starting profile, per squared log-ratio of a term: enough to hold
# a term no record depends on, far too little to outweigh a misfit of even 0.1%.
_PRIOR_WEIGHT = 1e-6


class EmulatedLink(BaseModel):
    """The CPU backend's emulated link, as syncopy.runtime.transport.link.Link spells it."""

    model_config = ConfigDict(extra="forbid")

    latency_s: NonNegativeFloat = 0.0
    bandwidth_Bps: PositiveFloat = float("inf")
    jitter_s: NonNegativeFloat = 0.0

    _no_booleans = field_validator("*", mode="before")(reject_booleans)


class Measurement(BaseModel):
    """One measured setting and its times (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    template: str
    world: PositiveInt
    shape: tuple[PositiveInt, PositiveInt, PositiveInt]
    dtype: str = "fp32"
    chunks_per_rank: PositiveInt
    order: str = "ring"
    backend: str | None = None
    link: EmulatedLink | None = None
    sequential_s: PositiveFloat | None = None
    stream_overlap_s: PositiveFloat | None = None
    fused_s: PositiveFloat | None = None

    _no_booleans = field_validator("*", mode="before")(reject_booleans)

    @model_validator(mode="after")
    def _measures_something(self) -> "Measurement":
        if all(getattr(self, key) is None for key in EXECUTIONS):
            raise ValueError("has none of sequential_s, stream_overlap_s, fused_s; add at least one measured time")
        return self

    def measured(self) -> dict[str, float]:
        """The times this record holds, by execution key."""
        return {key: getattr(self, key) for key in EXECUTIONS if getattr(self, key) is not None}


def load_measurements(source: str | Path | dict | list) -> tuple[list[Measurement], str | None]:
    """Records and the optional hardware name from a benchmark JSON file or its parsed content."""
    data = source
    if isinstance(source, (str, Path)):
        try:
            data = json.loads(Path(source).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read benchmark JSON '{source}' ({' '.join(str(exc).split())}); give a JSON file") from None
    hardware = None
    if isinstance(data, dict) and ("cases" in data or "overlap" in data or "wait_overhead" in data):
        data = _gpu_bench_records(data)
    elif isinstance(data, dict) and "records" in data:
        hardware, data = data.get("hardware"), data["records"]
    records = data if isinstance(data, list) else [data]
    out = []
    for i, record in enumerate(records):
        try:
            out.append(Measurement.model_validate(record))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "record"
            raise ValueError(f"benchmark record {i}: {where}: {err['msg'].removeprefix('Value error, ')}") from None
    if not out:
        raise ValueError("the benchmark JSON has no records; run the benchmark with --json first")
    return out, hardware


#: The order each gpu_bench pattern runs with on the loopback world.
_BENCH_ORDER = {"ag_gemm": "ring", "gemm_rs": "local_first"}


def _gpu_bench_records(data: dict) -> list[dict]:
    """Records from benchmarks/gpu_bench.py's JSON (milliseconds, fp16, the loopback world): its
    "cases" (AG-GEMM and GEMM-RS; per launch back to back), or "overlap" in runs before it had
    cases; and the wait-overhead rows. Thread-world cases are left out: W ranks share one GPU's
    compute and memory there, which the model of one rank per device does not describe."""
    base = {"dtype": "fp16"}
    records = []
    cases = [r for r in data.get("cases", []) if r.get("world_kind", "loopback") == "loopback"]
    for r in cases or [{**r, "pattern": "ag_gemm"} for r in data.get("overlap", [])]:
        template = r.get("pattern", "ag_gemm")
        records.append(
            {**base, "template": template, "order": _BENCH_ORDER.get(template, "ring"), "world": r.get("world"),
             "shape": [r.get("m"), r.get("n"), r.get("k")], "chunks_per_rank": r.get("chunks"),
             **{f"{key}_s": r[f"{key}_ms"] / 1e3 for key in ("sequential", "stream_overlap", "fused") if r.get(f"{key}_ms")}}
        )
    rows = data.get("wait_overhead_rows", data.get("wait_overhead", []))
    for r in rows if isinstance(rows, list) else []:
        records.append(
            {**base, "template": "ag_gemm", "order": "ring", "world": 1, "shape": [r.get("m"), r.get("n"), r.get("k")], "chunks_per_rank": 1,
             "sequential_s": r["original_ms"] / 1e3, "fused_s": r["fused_all_present_ms"] / 1e3}
        )
    return records


def predict(profile: HardwareProfile, record: Measurement) -> dict[str, float]:
    """The model's times for the executions `record` measured, by the same keys."""
    if record.link is not None:
        profile = profile.with_emulated_link(**record.link.model_dump())
    workload = make_workload(record.template, *record.shape, dtype=record.dtype)
    sim = Simulator(workload, profile, record.world, record.backend)
    runs = {
        "sequential_s": lambda: sim.sequential(),
        "stream_overlap_s": lambda: sim.stream_overlap(record.chunks_per_rank, record.order),
        "fused_s": lambda: sim.fused(record.chunks_per_rank, record.order),
    }
    return {key: runs[key]().total_s for key in record.measured()}


def rms_log_error(profile: HardwareProfile, records: Sequence[Measurement]) -> float:
    """Root-mean-square of log(predicted / measured) over every measured time (0.1 ~ 10%)."""
    errors = [math.log(p / record.measured()[key]) for record in records for key, p in predict(profile, record).items()]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def fit_terms(profile: HardwareProfile) -> list[tuple[str, ...]]:
    """Paths of the terms `fit` moves."""
    link = ("links", profile.network.link)
    return [
        ("compute", "efficiency"),
        ("compute", "tile_overhead_s"),
        (*link, "alpha_s"),
        (*link, "efficiency"),
        ("overheads", "launch_s"),
        ("overheads", "stream_sync_s"),
        ("overheads", "signal_s"),
        ("overheads", "tile_sync_s"),
    ]


def fit(profile: HardwareProfile, measurements: Sequence[Measurement] | str | Path | dict | list, *, restarts: int = 3) -> HardwareProfile:
    """`profile` with its efficiency and overhead terms fitted to `measurements`.

    measurements: records, or anything `load_measurements` reads. The result is named
    `<name>-calibrated`; save it with `hardware.save_profile`.
    """
    records = measurements if _are_records(measurements) else load_measurements(measurements)[0]
    terms = fit_terms(profile)
    start = [math.log(profile.get(t) or _SEED_S) for t in terms]
    data = profile.model_dump()

    def profile_at(x: list[float]) -> HardwareProfile:
        for term, value in zip(terms, x):
            node = data
            for key in term[:-1]:
                node = node[key]
            node[term[-1]] = math.exp(value)
        return HardwareProfile.model_validate(data)

    def loss(x: list[float]) -> float:
        prior = sum((v - s) ** 2 for v, s in zip(x, start))
        return rms_log_error(profile_at(x), records) ** 2 + _PRIOR_WEIGHT * prior

    # The terms trade off against each other (efficiency against per-program overhead, alpha
    # against signal latency), which stalls a search along one term at a time; a simplex moves
    # along those valleys. Restarting from the best point recovers from a collapsed simplex.
    x = start
    for _ in range(restarts):
        x = _nelder_mead(loss, x, step=math.log(4.0))
    fitted = profile_at(x)
    description = f"{profile.description} (calibrated on {len(records)} records)".strip()
    return fitted.model_copy(update={"name": f"{profile.name}-calibrated", "description": description})


def _nelder_mead(f, x0: list[float], step: float, iterations: int = 400, tolerance: float = 1e-10) -> list[float]:
    """Minimise f from x0 with the Nelder-Mead simplex (reflect, expand, contract, shrink)."""
    n = len(x0)
    simplex = [list(x0)] + [[v + (step if j == i else 0.0) for j, v in enumerate(x0)] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tolerance:
            break
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]

        def toward_worst(t: float) -> list[float]:
            return [c + t * (w - c) for c, w in zip(centroid, simplex[-1])]

        reflected = toward_worst(-1.0)
        fr = f(reflected)
        if fr < values[0]:
            expanded = toward_worst(-2.0)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = toward_worst(0.5 if fr >= values[-1] else -0.5)
            fc = f(contracted)
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (v - b) for b, v in zip(best, x)] for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[min(range(n + 1), key=values.__getitem__)]


def _are_records(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(r, Measurement) for r in value)


def main(argv: list[str] | None = None) -> int:
    """Fit a profile to a benchmark JSON and write it as YAML."""
    parser = argparse.ArgumentParser(prog="python -m syncopy.planner.calibrate", description="Fit a hardware profile to benchmark results.")
    parser.add_argument("results", nargs="+", help="benchmark JSON files (see this module's docstring); their records are pooled")
    parser.add_argument("--hardware", default=None, help="profile to start from (default: the JSON's 'hardware', else cpu-gloo)")
    parser.add_argument("-o", "--output", default=None, help="where to write the fitted profile (default <hardware>-calibrated.yaml)")
    args = parser.parse_args(argv)
    try:
        records, named = [], None
        for path in args.results:
            more, hardware = load_measurements(path)
            records += more
            named = named or hardware
        profile = load_profile(args.hardware or named or "cpu-gloo")
        before = rms_log_error(profile, records)
        fitted = fit(profile, records)
        after = rms_log_error(fitted, records)
    except ValueError as exc:
        print(f"syncopy calibrate: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output or f"{fitted.name}.yaml")
    save_profile(fitted, out, header=f"Fitted by syncopy.planner.calibrate to {len(records)} records of {' '.join(args.results)}.\n"
                 f"RMS log error: {before:.3f} before, {after:.3f} after.")
    for term in fit_terms(profile):
        print(f"  {'.'.join(term):32s} {profile.get(term):.4g} -> {fitted.get(term):.4g}")
    print(f"RMS log error {before:.3f} -> {after:.3f}; wrote {out} (use it with --hardware {out})")
    print(report(fitted, records))
    return 0


def report(profile: HardwareProfile, records: Sequence[Measurement]) -> str:
    """Predicted against measured, per record and execution, and how many are within 15%."""
    lines = [f"predicted by {profile.name} vs measured (ms):"]
    within = total = 0
    for r in records:
        predicted = predict(profile, r)
        label = f"{r.template} {'x'.join(map(str, r.shape))} W{r.world} c{r.chunks_per_rank}"
        cells = []
        for key, measured in r.measured().items():
            ratio = predicted[key] / measured
            within += abs(ratio - 1) <= 0.15
            total += 1
            cells.append(f"{key.removesuffix('_s')} {predicted[key] * 1e3:.3f}/{measured * 1e3:.3f} ({ratio - 1:+.0%})")
        lines.append(f"  {label:34s} " + ", ".join(cells))
    lines.append(f"{within} of {total} predictions within 15% of the measurement")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
