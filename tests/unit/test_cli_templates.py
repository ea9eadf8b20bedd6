"""`syncopy templates` is a cheap list: every template folder with its pattern and one-line
description, printed without importing torch or triton (the list took seconds when it did)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "triton", "numpy")


def _expected_lines() -> list[tuple[str, str, str]]:
    """(name, kind, description) of every folder of templates/ with a schedule.yaml, read from the files."""
    rows = []
    for folder in sorted(p.parent for p in (ROOT / "templates").glob("*/schedule.yaml")):
        defines_pipeline = "\ndef make_operator(" in (folder / "template.py").read_text()
        kind = "pipeline" if defines_pipeline else yaml.safe_load((folder / "schedule.yaml").read_text())["pattern"]
        rows.append((folder.name, kind, (folder / "README.txt").read_text().strip()))
    return rows


def _list_in_a_fresh_process() -> tuple[str, list[str]]:
    """`syncopy templates` in a new interpreter: (its stdout, the heavy modules it had imported by the end)."""
    probe = ("import json, sys\nfrom syncopy.cli import main\ncode = main(['templates'])\n"
             f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\nsys.exit(code)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *listing, loaded = done.stdout.rstrip("\n").split("\n")
    return "\n".join(listing) + "\n", json.loads(loaded)


def test_the_list_names_every_template_with_its_pattern_and_description():
    out, _ = _list_in_a_fresh_process()
    rows = _expected_lines()
    assert len(rows) == 8 and ("tp_mlp", "pipeline", rows[-1][2]) == rows[-1]
    width = max(len(name) for name, _, _ in rows)
    assert out == "".join(f"{name:{width}s} {kind:14s} {text}\n" for name, kind, text in rows)


def test_listing_imports_neither_torch_nor_triton():
    _, loaded = _list_in_a_fresh_process()
    assert loaded == []


def test_a_template_is_still_a_pipeline_once_imported():
    # The listing reads template.py's source; the module itself says the same.
    from syncopy import templates

    for name, t in templates.available().items():
        assert t.pipeline == hasattr(t.module, "make_operator"), name
