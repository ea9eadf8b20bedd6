"""The `syncopy` command. User mistakes print one line (`where: what to change`) and exit 2."""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from syncopy.errors import SyncopyError


def _transform(args) -> int:
    from syncopy.emit import source as emit
    from syncopy.frontend.source import from_file
    from syncopy.passes import transform
    from syncopy.schedule import load_schedule

    schedule = load_schedule(Path(args.schedule))
    if schedule.kernel is None:
        from syncopy.errors import ScheduleError, ScheduleLocation

        raise ScheduleError("missing required key for the CLI; add `kernel: NAME` (the @triton.jit function to transform)",
                            ScheduleLocation(args.schedule, "kernel"))
    if args.output and Path(args.output).resolve() == Path(args.kernel).resolve():
        raise SyncopyError(f"{args.output}: refusing to overwrite the input kernel; choose another -o path")
    ks = from_file(args.kernel, schedule.kernel)
    t = transform(ks, schedule)
    out = emit.rewrite_file(t)
    if args.dump_dir:
        emit.dump(t, args.dump_dir)
    if args.diff:
        sys.stdout.writelines(difflib.unified_diff(ks.module.code.splitlines(True), out.splitlines(True),
                                                   fromfile=args.kernel, tofile=args.output or f"{args.kernel} (fused)"))
    elif not args.output:
        sys.stdout.write(out)
    if args.output:
        try:
            emit.write_atomic(Path(args.output), out)
        except OSError as exc:
            raise SyncopyError(f"{args.output}: cannot write the output: {exc.strerror or exc}; choose a writable -o path") from None
    return 0


def _check(args) -> int:
    from syncopy.schedule import load_schedule

    s = load_schedule(Path(args.schedule))
    print(f"{args.schedule}: ok ({s.pattern} of {s.tensor} along dim {s.dim}, {s.chunks_per_rank} chunks per rank, order {s.order})")
    return 0


def _schema(args) -> int:
    from syncopy.schedule import json_schema

    print(json_schema())
    return 0


def _demo(args) -> int:
    from syncopy.demo import main as demo_main

    return demo_main(world=args.world, chunks=args.chunks, latency_ms=args.latency_ms)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="syncopy", description="Fuse communication into Triton kernels.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser("transform", help="rewrite one kernel of a file for a chunk schedule")
    t.add_argument("kernel", metavar="KERNEL.py")
    t.add_argument("--schedule", "-s", required=True, metavar="S.yaml")
    t.add_argument("-o", "--output", metavar="OUT.py", help="write here (atomically) instead of stdout")
    t.add_argument("--diff", action="store_true", help="print a unified diff instead of the file")
    t.add_argument("--dump-dir", metavar="DIR", help="write each stage's artifact (kernel, binding, fused, probe)")
    t.set_defaults(run=_transform)

    c = sub.add_parser("check", help="validate a schedule file")
    c.add_argument("schedule", metavar="S.yaml")
    c.set_defaults(run=_check)

    s = sub.add_parser("schema", help="print the JSON Schema of schedules")
    s.set_defaults(run=_schema)

    d = sub.add_parser("demo", help="all-gather GEMM on a CPU world, checked against the torch reference")
    d.add_argument("--world", type=int, default=4)
    d.add_argument("--chunks", type=int, default=2)
    d.add_argument("--latency-ms", type=float, default=20.0, help="emulated per-chunk link latency")
    d.set_defaults(run=_demo)

    try:
        from syncopy.planner import command as plan_command
    except ImportError:  # the planner is optional at import time; `plan` is absent without it
        plan_command = None
    if plan_command is not None:
        pl = sub.add_parser("plan", help="predict sequential, stream-level and fused times; choose chunks and order")
        plan_command.add_arguments(pl)
        pl.set_defaults(run=plan_command.run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except SyncopyError as exc:
        print(f"{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
