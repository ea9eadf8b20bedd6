"""The `syncopy` command. User mistakes print one line (`where: what to change`) and exit 2."""
from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

from syncopy.errors import ScheduleError, ScheduleLocation, SyncopyError


def _transform(args) -> int:
    from syncopy.emit import source as emit
    from syncopy.frontend.source import from_file
    from syncopy.passes import transform
    from syncopy.schedule import load_schedule

    schedule = load_schedule(Path(args.schedule))
    if schedule.kernel is None:
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
    chunks = "chunks per rank chosen at launch" if s.chunks_per_rank == "auto" else f"{s.chunks_per_rank} chunks per rank"
    if s.transfers is not None:
        order = f"order explicit: {len(s.transfers)} transfers for {s.world} ranks"
    else:
        order = "order chosen at launch" if s.order == "auto" else f"order {s.order}"
    print(f"{args.schedule}: ok ({s.pattern} of {s.tensor} along dim {s.dim}, {chunks}, {order})")
    return 0


def _expand(args) -> int:
    from syncopy.schedule import load_schedule
    from syncopy.schedule.explicit import expand, to_yaml

    schedule = load_schedule(Path(args.schedule))
    try:
        text = to_yaml(expand(schedule, args.world))
    except ScheduleError as exc:  # name the file, as every schedule error does
        raise ScheduleError(exc.message, ScheduleLocation(args.schedule, exc.location.key if exc.location else "")) from None
    sys.stdout.write(text)
    return 0


def _schema(args) -> int:
    from syncopy.schedule import json_schema

    print(json_schema())
    return 0


def _templates(args) -> int:
    from syncopy import templates

    found = templates.available()
    width = max(12, *(len(name) for name in found))
    for name, t in found.items():
        s = t.schedule()
        print(f"{name:{width}s} {s.pattern:14s} {t.description}")
    return 0


def _shape(text: str | None):
    if text is None:
        return None
    try:
        parts = tuple(int(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 0:
        raise SyncopyError(f"--shape {text!r}: give three non-negative integers M,N,K (M = rows per rank)")
    return parts


def _chunks(text: str):
    """--chunks: a positive integer or auto."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or auto (got {text!r})")
    return int(text)


def _run(args) -> int:
    from syncopy.run import run

    results = run(args.name, args.world, _shape(args.shape), args.dtype, args.chunks, args.order, args.iters, args.backend)
    for r in results:
        print(f"rank {r['rank']}: max relative error {r['max_err']:.2e} {'OK' if r['ok'] else 'WRONG'}; "
              f"median launch {r['median_s'] * 1e3:.0f} ms")
    ok = all(r["ok"] for r in results)
    print(f"{args.name} on {len(results)} rank(s): {'correct' if ok else 'WRONG'}")
    return 0 if ok else 1


def _compile(args) -> int:
    import os
    import subprocess

    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        # The interpreter replaces @triton.jit; compile in a child process without it.
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        return subprocess.call([sys.executable, "-m", "syncopy.cli", *sys.argv[1:]] if args.argv is None else
                               [sys.executable, "-m", "syncopy.cli", *args.argv], env=env)
    from syncopy.emit.ptx import acquire_polls, compile_ptx, notifies, release_ops

    arch = int(args.arch.removeprefix("sm_"))
    if args.target.endswith(".py"):
        import importlib.util

        import syncopy
        from syncopy.schedule import load_schedule

        if not args.schedule or not args.signature:
            raise SyncopyError("compiling a kernel file needs --schedule S.yaml and --signature 'name:type,...' (e.g. A:*fp16,M:i32)")
        sched = load_schedule(Path(args.schedule))
        spec = importlib.util.spec_from_file_location("syncopy_user_kernel", args.target)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        fused = syncopy.overlap(sched)(getattr(mod, sched.kernel))
        sig = dict(item.split(":", 1) for item in args.signature.split(","))
        const = {k: int(v) for k, v in (item.split("=", 1) for item in (args.const.split(",") if args.const else []))}
    else:
        from syncopy import templates

        t = templates.get(args.target)
        fused = t.fused()
        sig, const = dict(t.module.SIGNATURE), dict(t.module.CONSTEXPRS)
    sig.update({"syncopy_ctx": "*i64", "syncopy_signals": "*i32", "syncopy_order": "*i32", "syncopy_trace": "*i32",
                "SYNCOPY_TRACE": "constexpr", "SYNCOPY_TABLE": "constexpr"})
    const.update(SYNCOPY_TRACE=False, SYNCOPY_TABLE=True)
    for k in const:
        sig.setdefault(k, "constexpr")
    ptx = compile_ptx(fused.fused, {p.name: sig[p.name] for p in fused.fused.params}, const, arch)
    polls, releases = acquire_polls(ptx), release_ops(ptx)
    if args.output:
        from syncopy.emit.source import write_atomic

        write_atomic(Path(args.output), ptx)
    else:
        sys.stdout.write(ptx)
    what = f"{len(polls)} acquire polls inside loops, {len(releases)} release ops"
    if fused.producer:
        what += f", {len(notifies(ptx))} release notifies after the tile's stores"
    print(f"{args.target} for sm_{arch}: {what}", file=sys.stderr)
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

    e = sub.add_parser("expand", help="write a schedule's order out as explicit transfers (the full form) for a world size")
    e.add_argument("schedule", metavar="S.yaml")
    e.add_argument("--world", type=int, required=True)
    e.set_defaults(run=_expand)

    s = sub.add_parser("schema", help="print the JSON Schema of schedules")
    s.set_defaults(run=_schema)

    tp = sub.add_parser("templates", help="list the template library")
    tp.set_defaults(run=_templates)

    r = sub.add_parser("run", help="run a template end to end on a CPU world and verify it against torch")
    r.add_argument("name")
    r.add_argument("--world", type=int, default=2)
    r.add_argument("--shape", metavar="M,N,K", help="M = rows per rank")
    r.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="fp32")
    r.add_argument("--chunks", type=_chunks, help="chunks per rank or auto (default: the template's schedule)")
    r.add_argument("--order", type=_order_arg, metavar="ring|local_first|bidirectional_ring|auto|OFFSETS",
                   help="arrival order; OFFSETS is an explicit comma-separated list of peer offsets, e.g. 3,1,2")
    r.add_argument("--iters", type=int, default=2)
    r.add_argument("--backend", default="auto")
    r.set_defaults(run=_run)

    cp = sub.add_parser("compile", help="lower a fused kernel to PTX with triton.compile (no GPU needed)")
    cp.add_argument("target", metavar="NAME|KERNEL.py")
    cp.add_argument("--arch", default="sm_90", choices=["sm_80", "sm_86", "sm_89", "sm_90"])
    cp.add_argument("-o", "--output", metavar="OUT.ptx")
    cp.add_argument("--schedule", metavar="S.yaml", help="for a kernel file")
    cp.add_argument("--signature", help="for a kernel file: name:type,... (types *fp16, *fp32, i32, fp32)")
    cp.add_argument("--const", help="for a kernel file: constexpr values NAME=INT,...")
    cp.set_defaults(run=_compile, argv=None)

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


def _order_arg(text: str):
    if text in ("ring", "local_first", "bidirectional_ring", "auto"):
        return text
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not ring, local_first, bidirectional_ring or a list of peer offsets like 3,1,2") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "argv", "unset") is None:
        args.argv = argv
    try:
        return args.run(args)
    except SyncopyError as exc:
        print(f"{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`syncopy transform K.py -s S.yaml --diff | head`): stop quietly, and
        # point stdout at /dev/null so that the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a process the pipe closed on


if __name__ == "__main__":
    sys.exit(main())
