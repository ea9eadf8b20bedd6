"""The README and docs/ say what is true: generated reference up to date, links that resolve, and
every code block marked ```sh runs / ```python runs does run (on CPU, from the repository root)."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from syncopy.schedule.reference import BEGIN, END, markdown

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)
SYNCOPY = str(Path(sys.executable).with_name("syncopy"))


def _blocks(lang: str, *marks: str) -> list[tuple[str, int, str]]:
    """(page, line, text) of every block of `lang` whose info string says `runs` and, exactly, `marks`
    besides (`world`: it starts CPU ranks, so it runs among the world tests)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            info = m.group(2).split()
            if m.group(1) == lang and "runs" in info and sorted(set(info) - {"runs"}) == sorted(marks):
                found.append((page.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1, m.group(3)))
    return found


def _all_blocks(page: Path, lang: str) -> list[tuple[str, str]]:
    """(info string, text) of every block of `lang` of `page`."""
    return [(m.group(2).strip(), m.group(3)) for m in FENCE.finditer(page.read_text()) if m.group(1) == lang]


def _ids(value) -> str:
    return value if isinstance(value, str) and "\n" not in value else str(value) if isinstance(value, int) else "block"


def _env() -> dict:
    return {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}


def test_the_schedule_reference_is_the_schemas():
    page = (ROOT / "docs" / "schedule.md").read_text()
    start, end = page.index(BEGIN), page.index(END) + len(END)
    assert page[start:end] + "\n" == markdown(), "docs/schedule.md is stale: paste `syncopy schema --markdown` over it"


def test_every_relative_link_resolves():
    missing = []
    for page in PAGES:
        prose = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text()))  # code is not a link
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose):
            if "://" not in target and not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)}: {target}")
    assert not missing


def test_the_readme_marks_its_examples_as_runnable():
    # The landing page's decorator example and CLI lines are the ones a newcomer copies first.
    assert [page for page, _, _ in _blocks("python")].count("README.md") == 1
    assert [page for page, _, _ in _blocks("sh") + _blocks("sh", "world")].count("README.md") == 3


def _workdir(tmp_path: Path) -> Path:
    """A folder where the repository's files are at the paths the docs name, and what a command writes
    (-o mm_fused.py, -o ag.ptx, --json) lands outside the repository."""
    for name in ("examples", "templates", "docs", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _run_block(page: str, line: int, block: str, cwd: Path, timeout: int) -> None:
    for command in block.splitlines():
        words = shlex.split(command, comments=True)
        if not words:
            continue
        assert words[0] == "syncopy", f"{page}:{line}: only syncopy commands run here: {command}"
        done = subprocess.run([SYNCOPY, *words[1:]], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{page}:{line}: `{command}` exited {done.returncode}: {done.stderr[-2000:]}"


@pytest.mark.parametrize("page,line,block", _blocks("sh"), ids=_ids)
def test_shell_blocks_run(page, line, block, tmp_path):
    _run_block(page, line, block, _workdir(tmp_path), 120)


@pytest.mark.world
@pytest.mark.parametrize("page,line,block", _blocks("sh", "world"), ids=_ids)
def test_shell_blocks_that_start_cpu_ranks_run(page, line, block, tmp_path):
    _run_block(page, line, block, _workdir(tmp_path), 600)


def _readme_block(first_word: str) -> tuple[str, str]:
    found = [(info, text) for info, text in _all_blocks(ROOT / "README.md", "sh") if text.split()[0] == first_word]
    assert len(found) == 1, found
    return found[0]


def test_the_make_block_says_what_the_makefile_does():
    # `make test` is the whole suite and `make demo` installs a venv first: neither runs inside a test.
    # What they run is checked instead: the suite, and the demo on 4 CPU ranks that `syncopy demo` makes.
    info, text = _readme_block("make")
    assert "runs" not in info.split() and [shlex.split(c, comments=True) for c in text.splitlines()] == [["make", "test"], ["make", "demo"]]
    assert "all-gather GEMM on 4 CPU ranks" in text
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: \$\(STAMP\)\n\t\$\(PY\) -m pytest -q\n", makefile, re.M)
    assert re.search(r"^demo: \$\(STAMP\)\n\t\$\(VENV\)/bin/syncopy demo --world 4\n", makefile, re.M)
    from syncopy.cli import build_parser

    assert build_parser().parse_args(["demo", "--world", "4"]).chunks == 2  # "(2 chunks per rank)", docs/cli.md


def _reliability():
    spec = importlib.util.spec_from_file_location("reliability", ROOT / "benchmarks" / "reliability.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reliability_block_asks_for_the_cases_it_says():
    # Minutes to half an hour on CPU ranks: checked, not run. Each line parses, and asks for what its comment says.
    _, text = _readme_block("python")
    raw = [c for c in text.splitlines() if c.strip()]
    lines = [shlex.split(c, comments=True) for c in raw]
    rel = _reliability()
    counts = []
    for words in lines:
        if words[:2] == ["python", "benchmarks/reliability.py"]:
            p = rel.parser()
            counts.append(len(rel.cases_of(p.parse_args(words[2:]), p)))
    assert counts == [10, 88]
    assert ": 10 cases" in raw[0] and ": 88 cases" in raw[1]
    soak = lines[2]
    assert soak[0] == "syncopy"
    from syncopy.cli import build_parser
    from syncopy.run import check_arguments

    args = build_parser().parse_args(soak[1:])
    check_arguments(args.name, args.world, None, args.dtype, args.chunks, args.order, args.iters, args.backend)
    assert (args.world, args.iters, args.random_shapes, args.seed, args.slow_link) == (4, 200, True, 7, 4.0)


# --- the README's figures, each against the file it comes from ---

RESULTS = ROOT / "benchmarks" / "results"


def _result(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _survives() -> str:
    text = (ROOT / "README.md").read_text()
    return " ".join(text[text.index("## What it survives"):text.index("## Documentation")].split())


def _s(x: float) -> str:
    """Seconds as the README writes them: two significant digits (1.0, 0.24, 4.3)."""
    return f"{x:#.2g}"


def _figures() -> list[str]:
    """Every figure of the README's 'What it survives', as the text it must appear in, from its file."""
    rel = _result("reliability-2026-11-26.json")
    t = rel["totals"]
    templates = {r["template"] for r in rel["rows"]}
    claims = [f"every template ({len(templates)}) x world 2, 4 x drop, delay, kill, corrupt, soak (timeout {rel['timeout_s']:g} s) "
              f"| {t['detected']}/{t['must_detect']} | {t['as_must']}/{t['cases']} | {t['hangs']} | {t['wrong']} | "
              f"{t['leftover_processes']} |"]
    for name, refused in (("ag_gemm", "shards refused"), ("gemm_rs", "refused")):
        s = _result(f"soak-{name}-w4-2026-11-26.json")
        assert s["ok"] and s["wrong"] == 0
        claims.append(f"soak: {name}, world 4, {s['launches']} launches, {s['shapes']} shapes ({s['refused']} {refused}, "
                      f"then run on 1 chunk) | - | {s['launches']}/{s['iters']} | 0 | 0 |")
    five = ("a2a_gemm", "ag_attention", "ag_gemm_persistent", "ag_rmsnorm", "gemm_ar")
    assert all(_result(f"soak-{n}-w4-2026-11-26.json")["ok"] and _result(f"soak-{n}-w4-2026-11-26.json")["launches"] == 200
               for n in five)
    claims.append(f"soak: {', '.join(five)}, world 4, 200 launches each | - | 200/200 each | 0 | 0 |")
    t = _result("reliability-tp_mlp-2026-11-27.json")["totals"]
    claims.append(f"(27 Nov, `reliability-tp_mlp-2026-11-27.*`) | {t['detected']}/{t['must_detect']} | {t['as_must']}/{t['cases']} "
                  f"| {t['hangs']} | {t['wrong']} | {t['leftover_processes']} |")
    tp, slow = _result("soak-tp_mlp-w4-2026-11-27.json"), _result("soak-tp_mlp-w4-slow-link-2026-11-27.json")
    assert tp["ok"] and slow["ok"] and slow["seed"] == 7 and slow["slow_link_ms"] > 0
    claims.append(f"soak: the tp_mlp pipeline, world 4, {tp['launches']} launches, {tp['shapes']} shapes ({tp['refused']} refused, "
                  f"then run on 1 chunk); again on the slow link (seed 7) | - | {tp['launches']}/{tp['iters']} each |")
    failed = _result("soak-tp_mlp-w4-2026-11-26.json")
    assert not failed["ok"]
    claims.append(f"(26 Nov, `soak-tp_mlp-w4-2026-11-26.json`) failed: it stopped at launch {failed['launches']} of "
                  f"{failed['iters']} with \"{failed['first_failure']['error'].split(': ', 1)[1]}\"")
    for fault, said in (("drop", "raises `SyncopyTimeout` at {} s ({}-{} s;"), ("corrupt", "raises `SyncopyCorruptChunk` at {} s ({}-{} s)"),
                        ("kill", "{} s ({}-{} s) after its launch began")):
        times = [r["detect_s"] for r in rel["rows"] if r["fault"] == fault]
        assert len(times) == 14  # "range over the 14 cases of each fault"
        claims.append(said.format(*(f"{x:.1f}" for x in (statistics.median(times), min(times), max(times)))))
    ag, rs = _result("soak-ag_gemm-w4-2026-11-26.json"), _result("soak-gemm_rs-w4-2026-11-26.json")
    claims.append(f"took p50 {_s(ag['p50_ms'] / 1e3)} s, p99 {_s(ag['p99_ms'] / 1e3)} s (ag_gemm) and p50 {_s(rs['p50_ms'] / 1e3)} s, "
                  f"p99 {_s(rs['p99_ms'] / 1e3)} s (gemm_rs)")
    claims.append(f"each held at most {max(ag['contexts_held'], rs['contexts_held'])} contexts")
    v = _result("verify-cost-cpu-2026-11-29.json")
    claims.append(f"`verify_chunks` costs {v['send_ms_per_mib']:.2f} ms per MiB sent and {v['recv_ms_per_mib']:.2f} ms per MiB received")
    claims.append(f"{v['template']} {v['shape']} on {v['world']} ranks took {v['verify_chunks_ms']} ms with checksums against "
                  f"{v['plain_ms']} without, the difference noise at a load of {v['load_average_1min']:.0f}")
    return claims


def test_the_readmes_figures_are_those_of_their_files():
    text = _survives()
    missing = [claim for claim in _figures() if claim not in text]
    assert not missing, "README.md's 'What it survives' disagrees with benchmarks/results: " + " // ".join(missing)


def test_the_readme_quotes_no_figure_without_a_file():
    # Figures that once stood here with no file behind them.
    text = _survives()
    assert not [f for f in ("313 s", "103 s", "2 ms per MiB", "+11%", "12.0 s", "2.3 s") if f in text]


@pytest.mark.world
@pytest.mark.parametrize("page,line,block", _blocks("python"), ids=_ids)
def test_python_blocks_run_on_two_cpu_ranks(page, line, block, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(block)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)]
    done = subprocess.run(launcher, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{page}:{line}: exited {done.returncode}: {done.stderr[-3000:]}"
