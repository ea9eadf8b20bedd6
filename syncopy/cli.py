"""The `syncopy` command. User mistakes print one line (`where: what to change`) and exit 2."""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
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
    if args.strict:
        from syncopy.passes import notes

        notes.report_fallbacks(t, strict=True)
    if args.checked:
        from syncopy.passes import read_check

        t = read_check.apply(t)
        for line in read_check.unchecked_lines(t):
            print(f"syncopy: warning: {line}", file=sys.stderr)
    out = emit.rewrite_file(t, loadable=args.loadable)
    # Every check before the first byte is written: a mistake leaves nothing behind.
    output = _output_path(args.output, "-o") if args.output else None
    dump_dir = _dump_dir(args.dump_dir) if args.dump_dir else None
    if args.diff:
        # With -o the diff goes to that file; the fused kernel is only ever printed or written without --diff.
        out = "".join(difflib.unified_diff(ks.module.code.splitlines(True), out.splitlines(True),
                                           fromfile=args.kernel, tofile=f"{args.kernel} (fused)"))
    if dump_dir is not None:
        _write(lambda: emit.dump(t, dump_dir), f"--dump-dir {args.dump_dir}")
    if output is not None:
        _write(lambda: emit.write_atomic(output, out), f"-o {args.output}")
    else:
        sys.stdout.write(out)
    return 0


def _output_path(text: str, option: str) -> Path:
    """The `-o` path, if its folder exists (a typo in it should not create folders)."""
    path = Path(text)
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise SyncopyError(f"{option} {text}: {str(folder)!r} is not a directory; choose another path")
    if not folder.is_dir():
        raise SyncopyError(f"{option} {text}: the directory {str(folder)!r} does not exist; create it first or choose another path")
    if path.is_dir():
        raise SyncopyError(f"{option} {text}: is a directory; give a file path")
    return path


def _dump_dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise SyncopyError(f"--dump-dir {text}: is a file, not a directory; choose a directory path (it is created if missing)")
    return path


def _write(write, option: str) -> None:
    try:
        write()
    except OSError as exc:
        raise SyncopyError(f"{option}: cannot write there: {exc.strerror or exc}; choose a writable path") from None


def _check(args) -> int:
    from syncopy.schedule import load_schedule

    s = load_schedule(Path(args.schedule))
    chunks = "chunks per rank chosen at launch" if s.chunks_per_rank == "auto" else f"{s.chunks_per_rank} chunks per rank"
    if s.transfers is not None:
        order = f"order explicit: {len(s.transfers)} transfers for {s.world} ranks"
    else:
        order = "order chosen at launch" if s.order == "auto" else f"order {s.order}"
    print(f"{args.schedule}: ok ({s.pattern} of {', '.join(s.tensors)} along dim {s.dim}, {chunks}, {order})")
    return 0


def _expand(args) -> int:
    from syncopy.schedule import load_schedule
    from syncopy.schedule.expand import expand, to_yaml

    schedule = load_schedule(Path(args.schedule))
    planned = [k for k in ("chunks_per_rank", "order") if getattr(schedule, k) == "auto"]
    if planned:
        key, fixed = planned[0], {"chunks_per_rank": "a chunk count (e.g. chunks_per_rank: 2)",
                                  "order": "a named order (ring, local_first, bidirectional_ring) or a list of peer offsets"}
        also = f" ({planned[1]} is auto too)" if len(planned) > 1 else ""
        raise ScheduleError(f"auto is resolved at launch by the planner, so there is nothing fixed to expand{also}; "
                            f"write {fixed[key]} to expand", ScheduleLocation(args.schedule, key, _key_line(args.schedule, key)))
    try:
        text = to_yaml(expand(schedule, args.world))
    except ScheduleError as exc:  # name the file, as every schedule error does
        raise ScheduleError(exc.message, ScheduleLocation(args.schedule, exc.location.key if exc.location else "")) from None
    sys.stdout.write(text)
    return 0


def _key_line(path: str, key: str) -> int | None:
    """The line of a top-level key in a schedule file that has already loaded (None if not written)."""
    import yaml

    node = yaml.compose(Path(path).read_text())
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if k.value == key:
                return k.start_mark.line + 1
    return None


def _schema(args) -> int:
    if args.markdown:
        from syncopy.schedule.reference import markdown

        print(markdown(), end="")
        return 0
    from syncopy.schedule import json_schema

    print(json_schema())
    return 0


def _trace(args) -> int:
    from syncopy.runtime.trace import timeline

    out = Path(args.output)
    if not out.parent.is_dir():
        raise SyncopyError(f"-o {args.output}: the folder {out.parent} does not exist; create it or choose another path")
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise SyncopyError(f"-o {args.output}: write the picture as .png, .svg or .pdf")
    timeline.draw(timeline.load(args.trace), out)
    print(f"{out}: timeline of {args.trace}")
    return 0


def _templates(args) -> int:
    from syncopy import templates

    found = templates.available()
    width = max(12, *(len(name) for name in found))
    for name, t in found.items():
        kind = "pipeline" if t.pipeline else t.schedule().pattern  # a pipeline's operators have patterns of their own
        print(f"{name:{width}s} {kind:14s} {t.description}")
    return 0


def _shape(text: str | None):
    if text is None:
        return None
    try:
        parts = tuple(int(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3:
        raise SyncopyError(f"--shape {text!r}: give three integers M,N,K, e.g. --shape 96,64,64 (see `syncopy run --help` for what M is)")
    return parts


def _chunks(text: str):
    """--chunks: a positive integer or auto."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or auto (got {text!r})")
    return int(text)


def _explain(args) -> int:
    from syncopy import explain, templates

    if args.schedule is not None or args.name.endswith(".py"):
        return _explain_kernel(args)
    templates.get(args.name)  # an unknown name is one line
    if args.world is None:
        raise SyncopyError(f"syncopy explain {args.name}: a template's graph needs --world N (the number of ranks)")
    if args.world < 1:
        raise SyncopyError(f"--world {args.world}: a world has at least one rank; pass --world N with N >= 1")
    if not 0 <= args.rank < args.world:
        raise SyncopyError(f"--rank {args.rank}: not a rank of --world {args.world}; pass 0..{args.world - 1}")
    order = tuple(args.order) if isinstance(args.order, list) else args.order
    try:
        graph = explain.for_template(args.name, args.world, args.rank, _shape(args.shape), args.chunks, order)
    except ValueError as exc:  # a schedule override the model refuses
        raise SyncopyError(f"syncopy explain {args.name}: {exc}") from None
    print(graph.dot() if args.dot else graph.text())
    return 0


def _explain_kernel(args) -> int:
    """What the passes decided for the kernel of a file: each `# syncopy:` note at its line."""
    from syncopy import explain
    from syncopy.frontend.source import from_file
    from syncopy.passes import transform
    from syncopy.schedule import load_schedule

    if args.schedule is None:
        raise SyncopyError(f"syncopy explain {args.name}: a kernel file needs --schedule S.yaml (the schedule naming its kernel)")
    schedule = load_schedule(Path(args.schedule))
    if schedule.kernel is None:
        raise ScheduleError("missing required key for the CLI; add `kernel: NAME` (the @triton.jit function to transform)",
                            ScheduleLocation(args.schedule, "kernel"))
    t = transform(from_file(args.name, schedule.kernel), schedule)
    print(f"kernel {schedule.kernel} of {args.name}, {schedule.pattern} of {', '.join(schedule.tensors)}:")
    for line, note in explain.kernel_notes(t):
        print(f"  {args.name}:{line}: {note}" if line is not None else f"  {args.name}: {note}")
    return 0


def _run(args) -> int:
    from syncopy.run import parse_inject, run

    if args.json:
        _output_path(args.json, "--json")  # before any rank starts: a typo in the path costs no run
    for path, option in ((args.trace, "--trace"), (args.timeline, "--timeline")):
        if path:
            _output_path(path, option)
    if args.timeline and Path(args.timeline).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise SyncopyError(f"--timeline {args.timeline}: write the picture as .png, .svg or .pdf")
    with tempfile.TemporaryDirectory(prefix="syncopy-trace-") as scratch:
        trace = args.trace or (str(Path(scratch, "run.json")) if args.timeline else None)
        soak = dict(random_shapes=args.random_shapes, seed=args.seed, timeout_s=args.timeout, verify_chunks=args.verify_chunks,
                    slow_link_ms=args.slow_link, faults=parse_inject(args.inject) if args.inject else None,
                    progress=sys.stdout.isatty(), trace=str(Path(trace).resolve()) if trace else None, routing=args.routing)
        result = run(args.name, args.world, _shape(args.shape), args.dtype, args.chunks, args.order, args.iters, args.backend,
                     **soak)
        if args.timeline and Path(trace).is_file():
            from syncopy.runtime.trace import timeline

            timeline.draw(timeline.load(trace), args.timeline, title=f"syncopy run {args.name} --world {args.world}")
    _print_run(args, result)
    if args.timeline and Path(args.timeline).is_file():
        print(f"{args.timeline}: timeline of the run")
    if (args.trace or args.timeline) and not args.slow_link:
        print(INSTANT_LINK_NOTE)
    ok = _run_ok(result)
    if args.json:
        _write_run_json(args, result, ok)
    return 0 if ok else 1


#: After `run --trace/--timeline` without --slow-link: why the picture shows every chunk at its launch's start.
INSTANT_LINK_NOTE = ("trace: without --slow-link the link is instant and every chunk lands as its launch starts; add "
                     "--slow-link 30 (how docs/timeline.png was drawn) to see tiles wait for chunks in flight")


def _verify(args) -> int:
    from syncopy.verifier import verify

    if args.json:
        _output_path(args.json, "--json")
    worlds = _worlds(args.world)
    is_file = args.target.endswith(".py") or Path(args.target).is_file()
    kernel, template = (args.target, None) if is_file else (None, args.target)
    done = verify(kernel, args.schedule, args.example, template=template, worlds=worlds, launches=args.launches,
                  seed=args.seed, timeout_s=args.timeout, progress=lambda line: print(line, flush=True))
    seconds = ", ".join(f"world {w}: {s:g} s" for w, s in done.seconds.items())
    print(f"verdict: {'every rank agrees with the unfused kernel under every condition' if done.ok else 'DIFFERS'} ({seconds})")
    if args.json:
        import json

        _write(lambda: Path(args.json).write_text(json.dumps(done.to_json(), indent=1, default=str)), f"--json {args.json}")
    return 0 if done.ok else 1


def _worlds(text: str) -> list[int]:
    try:
        return [int(w) for w in text.split(",")]
    except ValueError:
        raise SyncopyError(f"--world {text}: give world sizes, comma-separated, e.g. --world 2,3") from None


def _run_ok(result) -> bool:
    """Every launch on every rank gave torch's result (a shard too small to cut: once refused, on the fallback)."""
    return not result.died and all(r["ok"] for r in result.ranks)


def _print_run(args, result) -> None:
    from syncopy.run import summarize

    name, ranks = args.name, result.ranks
    if ranks:
        first = ranks[0]
        if args.random_shapes:
            sizes = f"M drawn per launch (seed {args.seed}), last {', '.join(f'{k} {_x(v)}' for k, v in first['inputs'].items())}"
        else:
            sizes = ", ".join(f"{k} {_x(v)}" for k, v in first["inputs"].items())
        out = f"; output {_x(first['output'])} per rank" if first["output"] else ""
        print(f"{name} on {len(ranks)} CPU rank(s), {args.dtype}: inputs per rank {sizes}{out}")
        if first["planner"]:
            print(first["planner"])
    for r in ranks:
        failed = next((x for x in r["launches"] if x["outcome"] != "ok"), None)
        print(rank_line(r))
        if failed is not None:
            what = failed.get("error") or f"{failed.get('wrong_elements', 0)} elements differ from torch"
            print(f"rank {r['rank']} launch {failed['it'] + 1} {failed['outcome']}: {what}", file=sys.stderr)
    for rank, code in sorted(result.died.items()):
        when = f", reported {result.kill_detected_s:.1f} s into its launch" if result.kill_detected_s is not None else ""
        print(f"rank {rank} died (exit code {code}: --inject {args.inject}){when}", file=sys.stderr)
    s = summarize(result)
    extra = "".join(f", {s[k]} {k}" for k in ("refused", "corrupt", "errors") if s[k])
    print(f"{s['launches']} launches, {s['wrong']} wrong ({s['wrong_elements']} elements), {s['timeouts']} timeouts{extra}, "
          f"{_summary_times(s)}")
    verdict = "correct" if _run_ok(result) else "WRONG" if s["wrong"] else "FAILED (a rank died)" if result.died else "FAILED"
    print(f"{name} on {len(ranks) or args.world} rank(s): {verdict}")


def rank_line(r: dict) -> str:
    """One rank's line of `syncopy run`: its verdict, its error against torch, and its launch times with
    the first launch (which builds the kernel) apart from the later ones, as the summary's percentiles
    count them; failed launches are counted, not timed."""
    from syncopy.run import RETURNED, rank_times

    launches = r["launches"]
    failed = next((x for x in launches if x["outcome"] != "ok"), None)
    t = rank_times(launches)
    parts = []
    if any(x["outcome"] in RETURNED for x in launches):
        parts.append(f"max relative error {r['max_err']:.2e}")
    if t["first_s"] is not None:
        parts.append(f"first launch {_ms(t['first_s'])} (builds the kernel)")
    if t["later_s"] is not None:
        parts.append(f"later launches median {_ms(t['later_s'])} ({t['later']} launch{'es' if t['later'] > 1 else ''})")
    if t["failed"]:
        kinds = ", ".join(f"{n} {kind}" for kind, n in t["failed"].items())
        parts.append(f"{sum(t['failed'].values())} of {len(launches)} launches failed ({kinds}), not timed")
    return f"rank {r['rank']}: {failed['outcome'].upper() if failed else 'OK'}; {'; '.join(parts)}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds * 1e3:.0f} ms"


def _summary_times(s: dict) -> str:
    """The summary's launch times: percentiles over every rank's returned launches after the first."""
    if s["p50_ms"] is not None:
        return f"launches after the first p50 {s['p50_ms']:g} ms, p99 {s['p99_ms']:g} ms"
    if s["timeouts"] or s["corrupt"] or s["errors"]:
        return "no launch time (failed launches are not timed; the first, which builds the kernel, is left out)"
    return "no launch time (the first launch, which builds the kernel, is left out; run --iters 2 or more)"


def _x(shape) -> str:
    return "x".join(map(str, shape))


def _write_run_json(args, result, ok: bool) -> None:
    import json

    from syncopy.run import first_failure, summarize

    data = {"template": args.name, "world": args.world, "iters": args.iters, "random_shapes": args.random_shapes,
            "seed": args.seed, "inject": args.inject, "verify_chunks": args.verify_chunks, "timeout_s": args.timeout,
            "slow_link_ms": args.slow_link, "routing": args.routing, "ok": ok, **summarize(result), "first_failure": first_failure(result),
            "died_exit_codes": {str(k): v for k, v in result.died.items()}}
    _write(lambda: Path(args.json).write_text(json.dumps(data, indent=1) + "\n"), f"--json {args.json}")


# Element types `--signature` accepts (triton's names); a leading * makes a pointer to one.
_SCALAR_TYPES = ("i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp8e4nv", "fp8e5", "fp16", "bf16", "fp32", "fp64")


def _autotune_config(kernel, name: str, index: int | None):
    """(the @triton.jit function, the autotune config to compile or None): `--config i`, else the first
    config (as the interpreter runs it, runtime/launch/tuning.py); heuristics' values come from --const."""
    from syncopy.runtime.launch import tuning

    jit_fn, layers = tuning.unwrap(kernel)
    tuners = [x for x in layers if hasattr(x, "configs")]
    if not tuners:
        if index is not None:
            raise SyncopyError(f"--config {index}: kernel {name} has no @triton.autotune configs; drop --config")
        return jit_fn, None
    configs = tuners[0].configs
    index = 0 if index is None else index
    if not 0 <= index < len(configs):
        raise SyncopyError(f"--config {index}: kernel {name} has {len(configs)} autotune configs; give an index 0..{len(configs) - 1}")
    return jit_fn, configs[index]


def _kernel_signature(kernel, name: str, signature: str, const: str | None, given: dict | None = None) -> tuple[dict, dict]:
    """(signature, constexprs) for `kernel` from --signature and --const (and `given`: an autotune
    config's values), every parameter accounted for."""
    params = kernel.params
    plain = [p.name for p in params if not p.is_constexpr]
    constexprs = [p.name for p in params if p.is_constexpr]
    sig: dict[str, str] = {}
    for item in signature.split(","):
        pname, sep, ty = (part.strip() for part in item.partition(":"))
        if not sep or not pname or not ty:
            raise SyncopyError(f"--signature: {item!r} is not name:type; write e.g. --signature A:*fp16,M:i32")
        if pname in constexprs:
            raise SyncopyError(f"--signature: '{pname}' of {name} is a tl.constexpr; give its value with --const {pname}=INT")
        if pname not in plain:
            raise SyncopyError(f"--signature: {name} has no parameter '{pname}'; its parameters are {', '.join(plain)}")
        if ty.removeprefix("*") not in _SCALAR_TYPES:
            raise SyncopyError(f"--signature: {pname}:{ty}: unknown type '{ty}'; use one of {', '.join(_SCALAR_TYPES)}, "
                               "with a leading * for a pointer (e.g. *fp16)")
        sig[pname] = ty
    missing = [n for n in plain if n not in sig]
    if missing:
        raise SyncopyError(f"--signature: no type for {', '.join(missing)}; give name:type for every parameter of {name}: "
                           f"{', '.join(plain)}")
    values: dict = {k: v for k, v in (given or {}).items() if k in constexprs}
    for item in const.split(",") if const else []:
        pname, sep, value = (part.strip() for part in item.partition("="))
        if pname not in constexprs:
            listed = ", ".join(constexprs) or "none"
            raise SyncopyError(f"--const: {name} has no tl.constexpr parameter {pname!r}; its constexpr parameters are {listed}")
        if pname in (given or {}):
            raise SyncopyError(f"--const: {pname} is set by the autotune config being compiled; pick another with --config")
        values[pname] = _const_value(pname, value)
    for p in params:
        if p.is_constexpr and p.name not in values and p.has_default:
            values[p.name] = p.default
    missing = [n for n in constexprs if n not in values]
    if missing:
        raise SyncopyError(f"--const: no value for {', '.join(missing)}; give NAME=INT for every tl.constexpr parameter of "
                           f"{name}: {', '.join(constexprs)}")
    return sig, values


def _const_value(name: str, text: str):
    """An integer, or a quoted string (a string constexpr, like the tutorial matmul's ACTIVATION="")."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        raise SyncopyError(f"--const: {name}={text}: not an integer; give NAME=INT, e.g. {name}=64 (or a quoted string)") from None


def _user_kernel(path: str, name: str):
    """The @triton.jit function `name` of the file at `path` (imported, as triton needs)."""
    import importlib.util

    if not Path(path).is_file():
        raise SyncopyError(f"{path}: cannot read the kernel file: No such file; check the path")
    spec = importlib.util.spec_from_file_location("syncopy_user_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kernel = getattr(mod, name, None)
    from syncopy.runtime.launch.tuning import unwrap

    if not hasattr(unwrap(kernel)[0], "params"):
        raise SyncopyError(f"{path}: no @triton.jit function '{name}' (the schedule's `kernel:`); fix `kernel:` or the file")
    return kernel


def _compile(args) -> int:
    import os
    import subprocess

    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        if os.environ.get("SYNCOPY_COMPILE_CHILD") == "1":  # never a chain of children
            raise SyncopyError("syncopy compile: the Triton interpreter is still on in the compiling process; "
                               "run it with TRITON_INTERPRET=0")
        # The interpreter replaces @triton.jit; compile in a child process without it (TRITON_INTERPRET=0:
        # unset, `import syncopy` would turn it on again on a machine without a GPU).
        env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "0",
               "SYNCOPY_COMPILE_CHILD": "1"}
        return subprocess.call([sys.executable, "-m", "syncopy.cli", *sys.argv[1:]] if args.argv is None else
                               [sys.executable, "-m", "syncopy.cli", *args.argv], env=env)
    from syncopy.emit.ptx import acquire_polls, compile_ptx, notifies, release_ops

    arch = int(args.arch.removeprefix("sm_"))
    output = _output_path(args.output, "-o") if args.output else None
    options: dict = {}  # an autotune config's num_warps, num_stages, ...
    if args.config is not None and not args.target.endswith(".py"):
        raise SyncopyError(f"--config {args.config}: template {args.target} has no @triton.autotune configs; drop --config")
    if args.target.endswith(".py"):
        import syncopy
        from syncopy.schedule import load_schedule

        if not args.schedule or not args.signature:
            raise SyncopyError("compiling a kernel file needs --schedule S.yaml and --signature 'name:type,...' (e.g. A:*fp16,M:i32)")
        sched = load_schedule(Path(args.schedule))
        if sched.kernel is None:
            raise ScheduleError("missing required key for the CLI; add `kernel: NAME` (the @triton.jit function to compile)",
                                ScheduleLocation(args.schedule, "kernel"))
        wrapped = _user_kernel(args.target, sched.kernel)
        kernel, config = _autotune_config(wrapped, sched.kernel, args.config)
        sig, const = _kernel_signature(kernel, sched.kernel, args.signature, args.const, given=config.kwargs if config else {})
        if config is not None:
            options = {k: v for k, v in config.all_kwargs().items() if k not in config.kwargs}
        fused = syncopy.overlap(sched)(wrapped)
    else:
        from syncopy import templates

        t = templates.get(args.target)
        fused = t.fused()
        sig, const = dict(t.module.SIGNATURE), dict(t.module.CONSTEXPRS)
    sig.update({"syncopy_ctx": "*i64", "syncopy_signals": "*i32", "syncopy_order": "*i32", "syncopy_trace": "*i32",
                "SYNCOPY_TRACE": "constexpr", "SYNCOPY_TABLE": "constexpr"})
    const.update(SYNCOPY_TRACE=False, SYNCOPY_TABLE=True)
    if fused.build().binding.descriptors:
        from syncopy.device import has_async_proxy
        from syncopy.passes.names import ASYNC_PROXY_FLAG

        sig[ASYNC_PROXY_FLAG] = "constexpr"
        const[ASYNC_PROXY_FLAG] = has_async_proxy(arch)
    for k in const:
        sig.setdefault(k, "constexpr")
    ptx = compile_ptx(fused.fused, {p.name: sig[p.name] for p in fused.fused.params}, const, arch, options)
    polls, releases = acquire_polls(ptx), release_ops(ptx)
    if output is not None:
        from syncopy.emit.source import write_atomic

        _write(lambda: write_atomic(output, ptx), f"-o {args.output}")
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


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows `(default: X)` after an option's help, unless there is no default or the help says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


_RUN_SHAPE_HELP = ("the problem as the template defines it, printed on the first output line as per-rank sizes. "
                   "M is the rows of ONE rank's shard for ag_gemm, ag_gemm_persistent and ag_rmsnorm (the gathered "
                   "problem has world x M rows; K is unused by ag_rmsnorm), the total output rows for gemm_rs, the output "
                   "rows for gemm_ar and the token rows a rank holds for a2a_gemm; note that `syncopy plan --shape` "
                   "counts the gathered rows instead (default: the template's own shape)")


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors in one line like every other mistake (exit 2 as before)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    from syncopy.demo import ROWS as DEMO_ROWS
    from syncopy.run import BACKENDS, DTYPES

    p = _Parser(prog="syncopy", description="Fuse communication into Triton kernels.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".", formatter_class=_HelpFormatter)

    t = command("transform", "rewrite one kernel of a file for a chunk schedule")
    t.add_argument("kernel", metavar="KERNEL.py", help="the file holding the @triton.jit kernel (never modified)")
    t.add_argument("--schedule", "-s", required=True, metavar="S.yaml", help="the chunk schedule; its `kernel:` names the kernel to rewrite")
    t.add_argument("-o", "--output", metavar="OUT", help="write here (atomically) instead of stdout: the fused file, or the diff with --diff; "
                   "the directory must exist")
    t.add_argument("--diff", action="store_true", help="a unified diff of the kernel file instead of the fused file (to stdout, or to -o)")
    t.add_argument("--dump-dir", metavar="DIR", help="write each stage's artifact (kernel, binding, fused, probe) into DIR (created if missing)")
    t.add_argument("--checked", action="store_true", help="checked mode: every read of the communicated tensor checks that its "
                   "chunks arrived (every producer store, that its chunk was not announced yet), naming its line if not")
    t.add_argument("--strict", action="store_true", help="refuse (exit 2, one located line) a fallback that costs overlap: a "
                   "tile that waits for every chunk, tiles kept in their launch order (`syncopy explain` lists them)")
    t.add_argument("--loadable", action="store_true", help="also write the probe kernel and the manifest that "
                   "syncopy.load(OUT, schedule) needs to launch the file without the frontend (libcst)")
    t.set_defaults(run=_transform)

    c = command("check", "validate a schedule file")
    c.add_argument("schedule", metavar="S.yaml", help="the schedule file (YAML or JSON)")
    c.set_defaults(run=_check)

    e = command("expand", "write a schedule's order out as explicit transfers (the full form) for a world size")
    e.add_argument("schedule", metavar="S.yaml", help="a schedule with a fixed chunks_per_rank and order (not auto)")
    e.add_argument("--world", type=int, required=True, metavar="N", help="number of ranks to write the transfers for")
    e.set_defaults(run=_expand)

    s = command("schema", "print the JSON Schema of schedules")
    s.add_argument("--markdown", action="store_true", help="the key reference of docs/schedule.md (tables written from the schema)")
    s.set_defaults(run=_schema)

    tp = command("templates", "list the template library")
    tp.set_defaults(run=_templates)

    tr = command("trace", "draw a trace file (trace='run.json', syncopy run --trace) as a timeline picture")
    tr.add_argument("trace", metavar="RUN.json", help="a Chrome / Perfetto trace written by syncopy (from any backend, a GPU run too)")
    tr.add_argument("-o", "--output", required=True, metavar="OUT.png", help="the picture (.png, .svg or .pdf)")
    tr.set_defaults(run=_trace)

    ex = command("explain", "print the instruction graph one rank runs for a launch of a template (text, or DOT), or what "
                 "the passes decided for a kernel file (--schedule): each rewrite applied or kept as written, and why")
    ex.add_argument("name", metavar="NAME", help="template name (see `syncopy templates`), or KERNEL.py with --schedule")
    ex.add_argument("--schedule", "-s", metavar="S.yaml", help="with KERNEL.py: the chunk schedule naming its kernel")
    ex.add_argument("--world", type=int, metavar="N", help="number of ranks (templates)")
    ex.add_argument("--rank", type=int, default=0, metavar="R", help="whose graph (default 0)")
    ex.add_argument("--shape", metavar="M,N,K", help="the template's problem shape, as for `syncopy run` (default: its own)")
    ex.add_argument("--chunks", type=_chunks, metavar="C", help="chunks per rank (default: the schedule's)")
    ex.add_argument("--order", type=_order_arg, metavar="ORDER", help="arrival order (default: the schedule's)")
    ex.add_argument("--dot", action="store_true", help="write the graph in Graphviz DOT (dashed edges: tiles wait on the device)")
    ex.set_defaults(run=_explain)

    r = command("run", "run a template end to end on a CPU world and verify it against torch")
    r.add_argument("name", metavar="NAME", help="template name (see `syncopy templates`)")
    r.add_argument("--world", type=int, default=2, metavar="N", help="number of CPU ranks")
    r.add_argument("--shape", metavar="M,N,K", help=_RUN_SHAPE_HELP)
    r.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="element type")
    r.add_argument("--chunks", type=_chunks, metavar="N|auto", help="chunks per rank, or auto for the planner's choice (default: the template's schedule)")
    r.add_argument("--order", type=_order_arg, metavar="ring|local_first|bidirectional_ring|auto|OFFSETS",
                   help="arrival order; OFFSETS lists each peer offset 1..N-1 once, comma-separated, e.g. 3,1,2 "
                        "(default: the template's schedule)")
    r.add_argument("--iters", type=int, default=2, metavar="N", help="launches per rank, each checked against torch")
    r.add_argument("--backend", default="auto", metavar="{" + ",".join(BACKENDS) + "}",
                   help="how chunks move: auto or gloo (p2p and nccl move CUDA tensors; `syncopy run` uses CPU ranks)")
    r.add_argument("--random-shapes", action="store_true", help="soak: a fresh random M (rows) for every launch, from one "
                   "row up to M of --shape (default: the template's), shards smaller than the chunk count included (refused in "
                   "one line, then run on one chunk per rank)")
    r.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the drawn shapes and of every launch's inputs")
    r.add_argument("--routing", metavar="uniform|random|skewed", help="a2a_gemm: how tokens go to experts; random and skewed "
                   "draw new per-expert counts every launch (uneven split sizes, empty experts included) (default: uniform)")
    r.add_argument("--inject", metavar="FAULTS", help="faults, comma-separated: drop=SRC:CHUNK (never sent), delay=SRC:CHUNK:MS, "
                   "kill=SRC:CHUNK (rank SRC dies there), corrupt=SRC:CHUNK (bytes flipped in flight); SRC a rank, CHUNK "
                   "its chunk index (global chunk id for gemm_rs, gemm_ar)")
    r.add_argument("--timeout", type=float, metavar="S", help="seconds a launch waits for a chunk before SyncopyTimeout "
                   "(default: the operator's, 60)")
    r.add_argument("--verify-chunks", action="store_true", help="each chunk travels with a CRC-32, checked as it lands; a "
                   "mismatch names the chunk, its source rank and epoch")
    r.add_argument("--slow-link", type=float, default=0.0, metavar="MS", help="an emulated slow link: each chunk MS ms late "
                   "(plus up to MS ms jitter), landing in random order, so tiles start before their chunks (0: instant)")
    r.add_argument("--json", metavar="OUT", help="also write the run's figures (launches, wrong, timeouts, p50/p99, ...) as JSON")
    r.add_argument("--trace", metavar="RUN.json", help="write a Chrome / Perfetto trace of every rank's launches (open it at ui.perfetto.dev)")
    r.add_argument("--timeline", metavar="RUN.png", help="draw the launches as a timeline picture (.png, .svg or .pdf; needs matplotlib)")
    r.set_defaults(run=_run)

    v = command("verify", "run a fused kernel against its own unfused kernel on CPU worlds under adversarial arrival "
                "(chunks reordered, held until a tile waits, poisoned until they land; checked mode); exit 0 only if "
                "every rank agrees on every launch, 1 on a difference")
    v.add_argument("target", metavar="KERNEL.py|TEMPLATE", help="a kernel file (with --schedule and --example), or a template name")
    v.add_argument("--schedule", "-s", metavar="S.yaml", help="for a kernel file: its schedule (`kernel:` names the kernel)")
    v.add_argument("--example", metavar="EXAMPLE.py:FN", help="for a kernel file: FN(rank, world, launch) returns (grid, args, "
                   "kwargs) for that rank's launch, the communicated tensor at its per-rank size; new data each launch")
    v.add_argument("--world", default="2,3", metavar="N[,N...]", help="the world sizes to verify on, each its own CPU world")
    v.add_argument("--launches", type=int, default=3, metavar="N", help="launches per condition, each with the example's "
                   "arguments for that launch")
    v.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the link's draws: other seeds, other arrival orders")
    v.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds a launch waits for a chunk before SyncopyTimeout")
    v.add_argument("--json", metavar="OUT", help="also write every rank's records and the differences as JSON")
    v.set_defaults(run=_verify)

    cp = command("compile", "lower a fused kernel to PTX with triton.compile (no GPU needed)")
    cp.add_argument("target", metavar="NAME|KERNEL.py", help="template NAME (see `syncopy templates`) or a kernel file")
    cp.add_argument("--arch", default="sm_90", choices=["sm_80", "sm_86", "sm_89", "sm_90"], help="the NVIDIA target")
    cp.add_argument("-o", "--output", metavar="OUT.ptx", help="write the PTX here (atomically) instead of stdout; the directory must exist")
    cp.add_argument("--schedule", metavar="S.yaml", help="for a kernel file: its schedule (`kernel:` names the kernel)")
    cp.add_argument("--signature", metavar="NAME:TYPE,...",
                    help="for a kernel file: a type for every non-constexpr parameter (e.g. *fp16, *fp32, i32, fp32)")
    cp.add_argument("--const", metavar="NAME=INT,...", help="for a kernel file: a value for every tl.constexpr parameter "
                    "(an integer, or a quoted string: ACTIVATION='')")
    cp.add_argument("--config", type=int, metavar="I", help="for an autotuned kernel: compile its I-th config "
                    "(its meta-parameters, num_warps, num_stages) (default: the first)")
    cp.set_defaults(run=_compile, argv=None)

    d = command("demo", "all-gather GEMM on a CPU world, checked against the torch reference")
    d.add_argument("--world", type=int, default=4, metavar="N", help="number of CPU ranks")
    d.add_argument("--chunks", type=int, default=2, metavar="N", help=f"chunks per rank, 1 to {DEMO_ROWS} (the rows of each rank's shard)")
    d.add_argument("--latency-ms", type=float, default=20.0, metavar="MS", help="emulated per-chunk link latency")
    d.set_defaults(run=_demo)

    try:
        from syncopy.planner import command as plan_command
    except ImportError:  # the planner is optional at import time; `plan` is absent without it
        plan_command = None
    if plan_command is not None:
        pl = command("plan", "predict sequential, stream-level and fused times; choose chunks and order")
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
