"""`syncopy plan NAME --world W --shape M,N,K --hardware PROFILE [--dtype] [--backend] [--json]`.

Prints the predicted sequential, stream-level and fused times of a template, the speedup, the chunk
count and order the planner picks, and why. Wired into syncopy.cli as the `plan` subcommand.
"""
from __future__ import annotations

import argparse
import json
import sys

from syncopy.planner.hardware import DTYPE_BYTES, load_profile, profile_names
from syncopy.planner.optimize import Plan, choose_for
from syncopy.planner.workloads import TEMPLATES, make_workload, parse_shape


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `plan` arguments to `parser`."""
    parser.add_argument("name", metavar="NAME", help=f"template: {', '.join(TEMPLATES)}")
    parser.add_argument("--world", type=int, required=True, metavar="N", help="number of ranks")
    parser.add_argument(
        "--shape", required=True, metavar="M,N,K",
        help="the whole problem: M is the rows one rank's kernel computes, so for all-gather templates (ag_gemm, "
             "ag_gemm_persistent, ag_rmsnorm) the gathered rows, world x a shard's rows (`syncopy run --shape` gives a "
             "shard's rows instead); the output rows for gemm_rs and gemm_ar; the tokens a rank holds for a2a_gemm "
             "(see syncopy/planner/workloads.py)",
    )
    parser.add_argument(
        "--hardware", default="h100-nvlink", help=f"profile name ({', '.join(profile_names())}) or a YAML file (default h100-nvlink)"
    )
    parser.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="bf16", help="element type (default bf16)")
    parser.add_argument("--backend", default=None, help="one of the profile's backends, e.g. p2p or nccl (default: the profile's)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args: argparse.Namespace) -> int:
    """Run `syncopy plan`; returns the exit status (2 on bad input, with one line on stderr)."""
    try:
        plan = plan_template(args.name, args.shape, world=args.world, hardware=args.hardware, dtype=args.dtype, backend=args.backend)
    except ValueError as exc:
        print(f"syncopy plan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_json(), indent=2) if args.json else format_plan(plan))
    return 0


def plan_template(name: str, shape: str, *, world: int, hardware: str, dtype: str = "bf16", backend: str | None = None) -> Plan:
    """The plan for template `name` at shape string `shape` ("M,N,K")."""
    if name not in TEMPLATES:
        raise ValueError(f"unknown template '{name}'; use one of {', '.join(TEMPLATES)}")
    m, n, k = parse_shape(shape, name)
    return choose_for(make_workload(name, m, n, k, dtype), load_profile(hardware), world, backend=backend)


def format_plan(plan: Plan) -> str:
    """The human-readable report."""
    t = TEMPLATES[plan.template]
    m, n, k = plan.shape
    dims = f"M={m} N={n}" if t.kind == "rmsnorm" else f"M={m} N={n} K={k}"
    lines = [
        f"syncopy plan {plan.template}: {t.summary}  [PREDICTION, not a measurement]",
        f"  hardware        {plan.hardware} (backend {plan.backend}), world {plan.world}, {plan.dtype}, {dims}",
        f"  sequential      {_ms(plan.sequential_s)}   (collective {_ms(plan.comm_s)}, kernel {_ms(plan.compute_s)})",
        f"  stream overlap  {_ms(plan.stream_overlap_s)}   (one kernel per chunk, {plan.stream_chunks_per_rank} per rank)",
        f"  fused           {_ms(plan.fused_s)}   ({plan.chunks_per_rank} per rank, order {plan.order})",
        f"  speedup         {plan.speedup:.2f}x over sequential, {plan.speedup_vs_stream:.2f}x over stream overlap",
        f"  choice          chunks_per_rank: {plan.chunks_per_rank}, order: {plan.order}",
    ]
    why = plan.reason.split("; ")
    lines += [f"  why             {why[0]}"] + [f"                  {part}" for part in why[1:]]
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.4f} ms"


def main(argv: list[str] | None = None) -> int:
    """`python -m syncopy.planner.command ...`, the same as `syncopy plan ...`."""
    parser = argparse.ArgumentParser(prog="syncopy plan", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
