"""The README and docs/ say what is true: generated reference up to date, links that resolve, and
every code block marked ```sh runs / ```python runs does run (on CPU, from the repository root)."""
from __future__ import annotations

import os
import re
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


def _blocks(lang: str) -> list[tuple[str, int, str]]:
    """(page, line, text) of every block of `lang` whose info string says `runs`."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) == lang and "runs" in m.group(2).split():
                found.append((page.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1, m.group(3)))
    return found


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
    assert [page for page, _, _ in _blocks("sh")].count("README.md") >= 1


@pytest.mark.parametrize("page,line,block", _blocks("sh"), ids=_ids)
def test_shell_blocks_run(page, line, block):
    for command in block.splitlines():
        words = shlex.split(command, comments=True)
        if not words:
            continue
        assert words[0] == "syncopy", f"{page}:{line}: only syncopy commands run here: {command}"
        done = subprocess.run([SYNCOPY, *words[1:]], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{page}:{line}: `{command}` exited {done.returncode}: {done.stderr[-2000:]}"


@pytest.mark.world
@pytest.mark.parametrize("page,line,block", _blocks("python"), ids=_ids)
def test_python_blocks_run_on_two_cpu_ranks(page, line, block, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(block)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)]
    done = subprocess.run(launcher, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{page}:{line}: exited {done.returncode}: {done.stderr[-3000:]}"
