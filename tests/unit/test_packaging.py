"""The wheel ships what a user needs (issue 13 item 6): the template library lives in templates/ at the
top of the repository and installs as syncopy.templates, reachable from Python and from `syncopy
templates`. The wheel is built from a copy of the sources (the checkout stays clean) by the setuptools
this environment has, then unpacked and imported with no checkout on the path."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "syncopy", "templates")
TEMPLATE_FILES = ("kernel.py", "schedule.yaml", "README.txt", "template.py")


def _setuptools_builds_wheels() -> bool:
    # setuptools 70.1 carries bdist_wheel itself (the `test` extra asks for it); older ones need `wheel`.
    try:
        major, minor = (int(x) for x in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (70, 1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not _setuptools_builds_wheels():
        pytest.skip("building the wheel needs setuptools>=70.1 in this environment (pip install -e '.[test]')")
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}))
    out = src / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-cache-dir",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = out.glob("syncopy-*.whl")
    return built


def test_the_wheel_ships_every_template_folder_as_syncopy_templates(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    folders = sorted(p.parent.name for p in (ROOT / "templates").glob("*/schedule.yaml"))
    assert len(folders) >= 6
    expected = {f"syncopy/templates/{t}/{f}" for t in folders for f in TEMPLATE_FILES if (ROOT / "templates" / t / f).is_file()}
    expected |= {"syncopy/templates/__init__.py", "syncopy/templates/ops.py"}
    assert expected <= names, sorted(expected - names)
    packages = {p.parent.relative_to(ROOT).as_posix() + "/__init__.py" for p in (ROOT / "syncopy").rglob("__init__.py")}
    assert packages <= names, sorted(packages - names)  # every subpackage of syncopy/ still ships
    assert not any(n.startswith("templates/") for n in names)  # no top-level `templates` package


def test_an_installed_wheel_imports_the_templates_and_lists_them(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # a wheel's files are what `pip install` puts in site-packages
    code = ("import syncopy, syncopy.templates as t, syncopy.templates.ag_gemm.kernel as k; "
            "print(syncopy.templates.__file__); print(k.__file__); print(','.join(t.available())); "
            "from syncopy.cli import main; raise SystemExit(main(['templates']))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    init, kernel, listed, *table = done.stdout.splitlines()
    assert Path(init) == site / "syncopy" / "templates" / "__init__.py"
    assert Path(kernel) == site / "syncopy" / "templates" / "ag_gemm" / "kernel.py"
    assert listed.split(",") == sorted(p.parent.name for p in (ROOT / "templates").glob("*/schedule.yaml"))
    assert any(line.startswith("ag_gemm ") for line in table)


def test_a_checkout_on_the_path_finds_templates_beside_the_package(tmp_path):
    # PYTHONPATH=the repository (a device machine's copy, the CPU worlds' ranks): no install maps it.
    code = "import syncopy.templates as t, syncopy.templates.gemm_rs.kernel as k; print(t.__file__); print(k.__file__)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(ROOT / "templates" / "__init__.py"), str(ROOT / "templates" / "gemm_rs" / "kernel.py")]
