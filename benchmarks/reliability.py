"""What syncopy survives: the fault matrix and a soak on CPU worlds, as a table and JSON.

    python benchmarks/reliability.py [--json OUT.json] [--quick] [--templates a,b] [--worlds 2,4] [--kinds drop,kill]

Each case is one `syncopy run` in a subprocess of its own session, with a hard wall bound:

    drop     rank 1 never sends one of its chunks          must be detected: SyncopyTimeout naming it
    delay    one chunk leaves DELAY_MS late (< timeout)    must survive: every element right
    kill     rank 1 dies where it would send a chunk       must be detected: a rank died / dropped out
    corrupt  one chunk's bytes flipped, --verify-chunks    must be detected: SyncopyCorruptChunk
    soak     --random-shapes, fresh data every launch,     must survive: every element right
             a slow link that lands chunks in random order

for every template x world 2 and 4 (the soak once per template and world; a pipeline's four faults
also on a send of its last operator alone, see DOWN_ONLY). Per case: whether the fault
was detected (or survived), the detection time (from the failing launch's start to its error on the
rank that reported first; for a kill, from the killed rank's launch start to the launcher's report of
its death, the others stopped) against the timeout, hangs (the case outlived its wall bound and was
killed: must be 0), wrong results (launches that returned with an element unlike torch's, found by
the run's check of every element: must be 0), and processes left behind (alive in the case's session
once it ended: must be 0; they are killed after counting). Progress goes to stderr, one line a case.

`--quick` runs ag_gemm and gemm_rs on 2 ranks (ten cases, about 10 minutes on two loaded cores); the
full matrix is every template (8) x 2 worlds x 5 cases, and tp_mlp's 2 x 4 faults on its down projection
alone: 88 cases, about 30 minutes there at a load of about 6. The exit status is 0 only when
every case ended as it must, with no hang, wrong result or leftover process.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KINDS = ("drop", "delay", "kill", "corrupt", "soak")
MUST_DETECT = ("drop", "kill", "corrupt")
QUICK_TEMPLATES, QUICK_WORLDS = ("ag_gemm", "gemm_rs"), (2,)
TIMEOUT_S = 10.0  # the first launch builds the kernel (seconds on loaded cores), inside the bound today
DELAY_MS = 300
WALL_S = 300.0  # the hard bound of one case: startup of W ranks on loaded cores, launches, 2 x timeout_s
# Small problems: the interpreter is slow. M is per rank for the gathers, the output's rows for the
# reductions (2 chunks per rank on 4 ranks); a2a_gemm fixes its own token blocks.
SHAPES = {"ag_rmsnorm": "8,32,0", "gemm_rs": "16,32,32", "gemm_ar": "16,32,32", "a2a_gemm": "64,32,32"}
SHAPE = "8,32,32"
ITERS, SOAK_ITERS = 2, 10


#: A pipeline's fault names a send of either of its operators (templates/tp_mlp/template.py,
#: route_faults). Rank 1's chunk 0 is sent by both (the up projection's own chunk 0, the down
#: projection's partial of rank 0's chunk 0; the up projection's fault strikes first), so each fault is
#: injected once more on a send only the down projection makes: rank 1's global chunk 4 at world 4 and,
#: at world 2 (where rank 1 sends the same chunk ids in both), rank 0's partial of rank 1's chunk 0 (2).
DOWN_ONLY = {"tp_mlp": {2: "0:2", 4: "1:4"}}


def fault_spec(kind: str, where: str = "1:0") -> str:
    """The --inject text of a fault on a chunk rank 1 sends in every plan: `1:0` is its own chunk 0 for
    the gathers and, for the reductions (a global chunk there), rank 0's chunk 0, to which every other
    rank contributes a partial. `where`: another SRC:CHUNK (DOWN_ONLY)."""
    return f"{kind}={where}:{DELAY_MS}" if kind == "delay" else f"{kind}={where}"


def case_argv(template: str, world: int, kind: str, timeout_s: float, out: Path, where: str = "1:0") -> list[str]:
    argv = ["run", template, "--world", str(world), "--shape", SHAPES.get(template, SHAPE), "--timeout", f"{timeout_s:g}",
            "--json", str(out)]
    if kind == "soak":
        return [*argv, "--iters", str(SOAK_ITERS), "--random-shapes", "--seed", str(world), "--slow-link", "4"]
    argv += ["--iters", str(ITERS), "--inject", fault_spec(kind, where)]
    return [*argv, "--verify-chunks"] if kind == "corrupt" else argv


def session_processes(sid: int) -> list[int]:
    """Processes of session `sid` still alive (Linux /proc; zombies count: they are left behind too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp session ...
        if int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def run_case(template: str, world: int, kind: str, timeout_s: float, wall_s: float, where: str = "1:0") -> dict:
    """One case in its own session; its row of the table."""
    with tempfile.TemporaryDirectory(prefix="syncopy-reliability-") as tmp:
        out = Path(tmp, "run.json")
        argv = case_argv(template, world, kind, timeout_s, out, where)
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "syncopy.cli", *argv], cwd=tmp, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        hang = False
        try:
            stdout, stderr = proc.communicate(timeout=wall_s)
        except subprocess.TimeoutExpired:
            hang = True
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        wall = time.monotonic() - start
        leftover = _reap(proc.pid)
        summary = json.loads(out.read_text()) if out.is_file() else None
    return _row(template, world, kind, argv, proc.returncode, stdout, stderr, summary, hang, leftover, wall, timeout_s)


def _reap(sid: int, grace_s: float = 3.0) -> int:
    """How many processes of the case's session outlived it (after a grace for their exit), then kill them."""
    deadline = time.monotonic() + grace_s
    while session_processes(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = session_processes(sid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


def _row(template, world, kind, argv, rc, stdout, stderr, summary, hang, leftover, wall, timeout_s) -> dict:
    s = summary or {}
    first = s.get("first_failure") or {}
    lines = [line for line in stderr.splitlines() if line.strip()]
    said = first.get("error") or (lines[-1] if lines else "")
    if kind in MUST_DETECT:
        caught = {"drop": s.get("timeouts", 0) + s.get("errors", 0), "kill": len(s.get("died", [])) + s.get("errors", 0)
                  + s.get("timeouts", 0), "corrupt": s.get("corrupt", 0)}[kind]
        # A rank's own one-line report (exit 2: e.g. a survivor named the dead rank before the launcher stopped it).
        detected = bool(caught) or (summary is None and rc == 2 and "rank" in said)
        as_must = detected and not hang
    else:
        detected = None
        as_must = rc == 0 and bool(s.get("ok")) and not hang
    return {"template": template, "world": world, "fault": kind, "inject": _inject_of(argv), "detected": detected,
            "as_must": as_must, "outcome": first.get("outcome") or ("died" if s.get("died") else "ok" if s.get("ok") else
                                                                   "no report" if summary is None else "failed"),
            "detect_s": first.get("s"), "timeout_s": timeout_s, "hang": hang, "wrong": s.get("wrong", 0),
            "wrong_elements": s.get("wrong_elements", 0), "leftover_processes": leftover, "launches": s.get("launches", 0),
            "p50_ms": s.get("p50_ms"), "exit": rc, "wall_s": round(wall, 1), "message": said[:300],
            "stdout_tail": "" if as_must else stdout[-600:]}


def _inject_of(argv: list[str]) -> str:
    return argv[argv.index("--inject") + 1] if "--inject" in argv else "random shapes"


def totals(rows: list[dict]) -> dict:
    return {"cases": len(rows), "must_detect": sum(r["fault"] in MUST_DETECT for r in rows),
            "detected": sum(bool(r["detected"]) for r in rows), "as_must": sum(r["as_must"] for r in rows),
            "hangs": sum(r["hang"] for r in rows), "wrong": sum(r["wrong"] for r in rows),
            "leftover_processes": sum(r["leftover_processes"] for r in rows)}


def table(rows: list[dict]) -> str:
    head = f"{'template':19s} {'W':>1s} {'fault':8s} {'injected':16s} {'detected':9s} {'time/timeout':>13s} {'hang':>4s} " \
           f"{'wrong':>5s} {'left':>4s} {'wall s':>6s}  outcome"
    out = [head, "-" * len(head)]
    for r in rows:
        det = "-" if r["detected"] is None else "yes" if r["detected"] else "NO"
        t = f"{r['detect_s']:.1f}/{r['timeout_s']:g} s" if r["detect_s"] is not None and r["fault"] in MUST_DETECT else "-"
        out.append(f"{r['template']:19s} {r['world']:>1d} {r['fault']:8s} {r['inject']:16s} {det:9s} {t:>13s} "
                   f"{int(r['hang']):>4d} {r['wrong']:>5d} {r['leftover_processes']:>4d} {r['wall_s']:>6.0f}  "
                   f"{r['outcome']}{'' if r['as_must'] else '  <-- NOT AS IT MUST'}")
    t = totals(rows)
    out.append(f"{t['cases']} cases: {t['detected']}/{t['must_detect']} faults detected, {t['as_must']}/{t['cases']} as they "
               f"must, {t['hangs']} hangs, {t['wrong']} wrong results, {t['leftover_processes']} processes left behind")
    return "\n".join(out)


def plan(templates: list[str], worlds: list[int], kinds: list[str]) -> list[tuple[str, int, str, str]]:
    """(template, world, case, SRC:CHUNK of the fault) of every case: each fault on rank 1's chunk 0, and
    a pipeline's once more on a send of its last operator alone (DOWN_ONLY)."""
    cases = []
    for name in templates:
        for world in worlds:
            for kind in kinds:
                cases.append((name, world, kind, "1:0"))
                if kind in MUST_DETECT + ("delay",) and world in DOWN_ONLY.get(name, {}):
                    cases.append((name, world, kind, DOWN_ONLY[name][world]))
    return cases


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="OUT", help="write the rows and totals here")
    p.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK_TEMPLATES)} on {QUICK_WORLDS[0]} ranks only")
    p.add_argument("--templates", help="comma-separated template names (default: every template)")
    p.add_argument("--worlds", help="comma-separated world sizes (default: 2,4)")
    p.add_argument("--kinds", help=f"comma-separated cases among {','.join(KINDS)} (default: all)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, help="each run's --timeout (seconds)")
    p.add_argument("--wall", type=float, default=WALL_S, help="hard wall bound of one case (seconds)")
    return p


def cases_of(args, p: argparse.ArgumentParser) -> list[tuple[str, int, str, str]]:
    """The cases a command line asks for (the README's counts are these)."""
    sys.path.insert(0, str(REPO))
    from syncopy import templates as library

    names = args.templates.split(",") if args.templates else list(QUICK_TEMPLATES if args.quick else library.available())
    worlds = [int(w) for w in args.worlds.split(",")] if args.worlds else list(QUICK_WORLDS if args.quick else (2, 4))
    kinds = args.kinds.split(",") if args.kinds else list(KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"--kinds: unknown case {unknown[0]!r}; use {', '.join(KINDS)}")
    return plan(names, worlds, kinds)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    cases = cases_of(args, p)
    rows = []
    began = time.monotonic()
    for n, (name, world, kind, where) in enumerate(cases, start=1):
        row = run_case(name, world, kind, args.timeout, args.wall, where)
        rows.append(row)
        print(f"[{n}/{len(cases)} {time.monotonic() - began:5.0f} s] {name} world {world} {row['inject']}: {row['outcome']}, "
              f"{'as it must' if row['as_must'] else 'NOT AS IT MUST: ' + row['message']}", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "totals": totals(rows), "timeout_s": args.timeout,
                                               "wall_bound_s": args.wall, "seconds": round(time.monotonic() - began)}, indent=1) + "\n")
    t = totals(rows)
    return 0 if t["as_must"] == t["cases"] and not (t["hangs"] or t["wrong"] or t["leftover_processes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
