"""Fuzzer (d): mutated kernel sources (tests/fuzz/mutations.py: renamed arguments and locals,
reordered independent statements, extra masks, helper functions, a second kernel in the file,
comments and blank lines anywhere) are either transformed into code that imports, or rejected with a
located one-line SyncopyError -- never a traceback; and a small derandomized sample of them, fused
on a CPU world, gives what torch gives (tests/fuzz/test_world_schedules.py runs them in its world).

Transform-only examples are cheap (libcst and an import); budget: see tests/fuzz/profiles.py
(CI: derandomized; `SYNCOPY_FUZZ=long` for the long profile).
"""
from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import pytest

import syncopy
from syncopy.emit import source as emit
from syncopy.errors import ScheduleLocation, SourceLocation, SyncopyError
from syncopy.frontend.source import from_file
from syncopy.passes import read_check, transform
from syncopy.schedule import Schedule
from tests.fuzz.mutations import Mutant, mutated_cases
from tests.fuzz import world as shared
from tests.fuzz.profiles import fuzz

_serial = itertools.count()


def write(tmp: Path, m: Mutant) -> Path:
    path = tmp / f"mutant_{next(_serial)}.py"
    path.write_text(m.text)
    return path


def transformed(path: Path, m: Mutant, s: Schedule, checked: bool = False) -> str:
    """The CLI's pipeline (`syncopy transform`): the rewritten file's text."""
    t = transform(from_file(path, m.kernel), s)
    return emit.rewrite_file(read_check.apply(t) if checked else t)


def imports(path: Path, text: str | None = None):
    """Import the file at `path` (after writing `text` next to it as <stem>_fused.py, if given)."""
    if text is not None:
        path = path.with_name(path.stem + "_fused.py")
        path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # @triton.jit reads the source through inspect
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(path.stem, None)
    return module


def decorated(path: Path, m: Mutant, s: Schedule) -> None:
    """The decorator's pipeline: `syncopy.overlap(s)(kernel).build()` transforms and imports, as a first launch does."""
    syncopy.overlap(s)(getattr(imports(path), m.kernel)).build()


def assert_located_one_line(exc: SyncopyError, path: Path) -> None:
    text = str(exc)
    assert "\n" not in text, text
    loc = exc.location
    assert isinstance(loc, (SourceLocation, ScheduleLocation)), f"no location: {text}"
    if isinstance(loc, SourceLocation):
        assert loc.file == str(path) and loc.line >= 1, text
    assert "Traceback" not in text and "syncopy/" not in text, text


@fuzz(ci=30, long=1_000)
@given(mutated_cases(), st.sampled_from(["cli", "cli --checked", "decorator"]))
def test_mutated_kernels_transform_and_import_or_fail_in_one_located_line(tmp_path_factory, case, way):
    problem, m, s = case
    path = write(tmp_path_factory.mktemp("mut", numbered=True), m)
    try:
        if way == "decorator":
            decorated(path, m, s)
            return
        out = transformed(path, m, s, checked=way.endswith("checked"))
    except SyncopyError as exc:
        assert_located_one_line(exc, path)
        return
    compile(out, str(path), "exec")
    imports(path, out)


@pytest.mark.world
def test_a_sample_of_mutated_kernels_matches_torch_on_a_world():
    count, bad = shared.failures(lambda c: "text" in c)
    assert count >= 1
    assert not bad, f"{len(bad)} failing of {count} mutated kernels:\n" + "\n".join(bad)
