"""`syncopy transform --loadable` and `syncopy.load` without ranks (issue 13, item 9): what the file
gets at its end (the probe and a manifest), what load makes of it, the one-line errors when file,
schedule and syncopy version do not belong together, and an import of syncopy.load with libcst made
unimportable. Launches on CPU worlds: tests/world/test_load.py."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import syncopy
from syncopy.cli import main
from syncopy.errors import LaunchError

REPO = Path(__file__).parents[2]
KERNEL = REPO / "tests" / "kernels" / "autotuned.py"
SCHEDULE = "version: 1\npattern: all_gather\nkernel: matmul_kernel\ntensor: a_ptr\ndim: 0\nchunks_per_rank: 2\norder: ring\n"


@pytest.fixture
def fused_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text(SCHEDULE)
    assert main(["transform", str(KERNEL), "-s", "s.yaml", "--loadable", "-o", "mm_fused.py"]) == 0
    return tmp_path / "mm_fused.py"


def _manifest(path: Path) -> dict:
    tree = ast.parse(path.read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id.startswith("SYNCOPY_MANIFEST_")]
    return ast.literal_eval(node.value)


def test_loadable_file_ends_with_the_probe_and_the_manifest(fused_file):
    text = fused_file.read_text()
    plain = subprocess.run([sys.executable, "-m", "syncopy.cli", "transform", str(KERNEL), "-s", "s.yaml"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), check=True).stdout
    assert text.startswith(plain)  # the plain rewrite, byte for byte, then what load needs
    tail = text[len(plain):]
    assert tail.startswith("\n\n@triton.jit\ndef matmul_kernel__syncopy_probe(")
    assert "\n\n\n# syncopy: what syncopy.load needs to launch matmul_kernel (written by syncopy transform --loadable; do not edit)\n" in tail
    assert "\n\n@triton.jit\ndef matmul_kernel__syncopy_extent_c_ptr(" in tail  # the output's store-address probe
    m = _manifest(fused_file)
    assert m == {"syncopy": syncopy.__version__, "kernel": "matmul_kernel", "schedule": m["schedule"],
                 "probe": "matmul_kernel__syncopy_probe", "persistent": None, "fresh_probe": False, "checked": False,
                 "descriptors": False, "clamped": False,
                 # what the launch checks without the frontend: the shard's stride arguments, the output's extent
                 "scales": {"a_ptr": ["stride_ak", "stride_am"]}, "written": ["c_ptr"],
                 "extents": {"c_ptr": ["matmul_kernel__syncopy_extent_c_ptr", False]}}
    assert "SYNCOPY_MANIFEST_" not in plain


def test_load_makes_the_decorators_operator(fused_file):
    fused = syncopy.load(fused_file, "s.yaml", timeout_s=5)
    assert isinstance(fused, syncopy.FusedKernel) and fused.loaded
    assert "a_ptr" in fused.signature.parameters and not any(p.startswith("syncopy_") for p in fused.signature.parameters)
    assert fused.tuning is not None and not fused.tuning.can_time  # the file has no local kernel to time configs on
    t = fused.build()
    assert (t.persistent, t.fresh_probe, t.checked, t.source.path) == (None, False, False, str(fused_file))
    # The checks the decorated launch makes through the frontend, from the manifest: stride arguments, extents.
    assert (t.binding.tensor, t.binding.scales) == ("a_ptr", ("stride_ak", "stride_am"))
    assert fused.kernel.written() == ["c_ptr"] and fused.kernel.extent_probe("c_ptr")[0].fn.__name__ == \
        "matmul_kernel__syncopy_extent_c_ptr"
    with pytest.raises(LaunchError, match=r"^'matmul_kernel' comes from syncopy.load: its file holds the fused kernel only"):
        fused.reference[(1,)]()


def _load_fails(path, schedule) -> str:
    with pytest.raises(LaunchError) as info:
        syncopy.load(path, schedule)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_another_schedule_is_refused(fused_file):
    other = SCHEDULE.replace("chunks_per_rank: 2", "chunks_per_rank: 3")
    Path("other.yaml").write_text(other)
    assert _load_fails(fused_file, "other.yaml") == (
        f"{fused_file}: kernel 'matmul_kernel' was transformed for another schedule; load it with the schedule "
        "`syncopy transform` was given, or transform it again for this one")


def test_another_syncopy_version_is_refused(fused_file):
    fused_file.write_text(fused_file.read_text().replace(f"'syncopy': '{syncopy.__version__}'", "'syncopy': '0.0.1'"))
    assert _load_fails(fused_file, "s.yaml") == (
        f"{fused_file}: written by syncopy 0.0.1, but this is syncopy {syncopy.__version__}; "
        "run `syncopy transform --loadable` again with this version")


def test_a_file_without_manifest_is_refused(fused_file):
    assert main(["transform", str(KERNEL), "-s", "s.yaml", "-o", "plain.py"]) == 0
    assert _load_fails(Path("plain.py"), "s.yaml") == (
        "plain.py: no kernel in this file was transformed for syncopy.load; write it with "
        "`syncopy transform KERNEL.py --schedule S.yaml --loadable -o plain.py`")
    assert _load_fails(Path("missing.py"), "s.yaml") == (
        "missing.py: no such file; give the path `syncopy transform --loadable -o` wrote")


def test_load_needs_no_libcst(fused_file):
    script = (
        "import sys\n"
        "class NoLibcst:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'libcst':\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, NoLibcst())\n"
        "import syncopy\n"
        f"f = syncopy.load({str(fused_file)!r}, 's.yaml')\n"
        "assert f.build().source.path and 'libcst' not in sys.modules\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO), TRITON_INTERPRET="1"), timeout=300)
    assert proc.stdout == "ok\n", proc.stderr[-3000:]
