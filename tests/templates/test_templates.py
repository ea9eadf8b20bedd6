"""The template library: listing, `syncopy run` on CPU worlds (torch's launcher), `syncopy compile`."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from syncopy import templates
from syncopy.cli import main
from tests.templates import template_workers
from tests.world import shared

ROOT = Path(__file__).resolve().parents[2]


def test_every_template_folder_is_discovered_with_its_parts():
    found = templates.available()
    assert {"ag_gemm", "ag_gemm_persistent", "ag_rmsnorm", "gemm_rs", "gemm_ar", "a2a_gemm", "ag_attention"} <= set(found)
    for name, t in found.items():
        assert t.description, name
        s = t.schedule()
        assert s.kernel == t.kernel().fn.__name__
        assert callable(t.module.inputs) and callable(t.module.reference) and callable(t.module.launch)


def test_templates_command_lists_them(capsys):
    assert main(["templates"]) == 0
    out = capsys.readouterr().out
    assert "ag_gemm" in out and "all_gather" in out


def test_unknown_template_is_a_one_line_error(capsys):
    assert main(["run", "nope", "--world", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    names = ", ".join(templates.available())
    assert err == [f"unknown template 'nope'; the templates are {names}; run `syncopy templates` to list them"]
    assert "gemm_rs" in names and "gemm_ar" in names


def test_bad_shape_is_a_one_line_error(capsys):
    assert main(["run", "ag_gemm", "--shape", "1,2"]) == 2
    assert "M,N,K" in capsys.readouterr().err


# (name, world, `syncopy run` options): each runs in a CPU world with the numbers recomputed by the
# test (template_workers.meaning); two of them also run through the command line.
RUNS = [
    ("ag_gemm", 2, ["--chunks", "3", "--shape", "45,32,32"]),
    ("ag_gemm", 3, ["--order", "bidirectional_ring", "--dtype", "fp16"]),
    ("ag_rmsnorm", 4, ["--chunks", "2", "--order", "local_first", "--shape", "13,48,0"]),  # 7+6 rows, 48 of 64 columns
    ("gemm_rs", 3, ["--chunks", "2", "--order", "ring"]),
    ("gemm_ar", 4, ["--chunks", "1", "--order", "local_first", "--shape", "66,32,32", "--dtype", "fp16"]),
    ("a2a_gemm", 3, ["--chunks", "3", "--dtype", "fp16"]),
    ("a2a_gemm", 4, ["--chunks", "2", "--order", "3,1,2"]),
    ("ag_gemm_persistent", 3, []),
    ("ag_gemm_persistent", 2, ["--chunks", "3", "--shape", "45,32,32", "--dtype", "fp16"]),
    ("ag_gemm_persistent", 4, ["--chunks", "2", "--order", "local_first"]),
    ("a2a_gemm", 2, ["--chunks", "1", "--order", "ring"]),
    ("ag_rmsnorm", 2, ["--chunks", "3", "--order", "ring"]),
    ("ag_attention", 3, ["--chunks", "2", "--shape", "20,2,16"]),
]
RUN_IDS = ["ag_gemm-w2-ragged", "ag_gemm-w3-bidir-fp16", "ag_rmsnorm-w4-direct", "gemm_rs-w3-ring", "gemm_ar-w4-direct-fp16",
           "a2a_gemm-w3-fp16", "a2a_gemm-w4-explicit", "ag_gemm_persistent-w3", "ag_gemm_persistent-w2-ragged-fp16",
           "ag_gemm_persistent-w4-direct", "a2a_gemm-w2-ring", "ag_rmsnorm-w2-ring",
           "ag_attention-w3-ragged"]


def _case(run_id: str, name: str, extra: list[str]) -> dict:
    """The `syncopy run` options as the template's Python arguments."""
    opts = dict(zip(extra[::2], extra[1::2]))
    order = opts.get("--order")
    if order and order[0].isdigit():
        order = [int(o) for o in order.split(",")]
    shape = tuple(int(v) for v in opts["--shape"].split(",")) if "--shape" in opts else None
    return {"id": run_id, "name": name, "chunks": int(opts["--chunks"]) if "--chunks" in opts else None, "order": order,
            "shape": shape, "dtype": opts.get("--dtype", "fp32")}


for _size in (2, 3, 4):  # jobs of the shared worlds (tests/world/shared.py)
    shared.register(__name__, _size, {"templates": (f"{template_workers.__name__}:run_templates",
                                                    ([_case(i, name, extra) for i, (name, w, extra) in zip(RUN_IDS, RUNS) if w == _size],))})


def _template_world(world: int) -> list:
    return shared.results(__name__, world, "templates")


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3, 4], ids=["world2", "world3", "world4"])
def test_templates_equal_torch_on_every_rank(world):
    """The error is recomputed here against torch on every rank's gathered inputs: neither the
    template's `reference` nor `syncopy run`'s verdict decides."""
    results = _template_world(world)
    expected = 2 * sum(w == world for _, w, _ in RUNS)
    assert [len(r) for r in results] == [expected] * world
    bad = [f"rank {rank}: {label}: error {err:.3g} > {tol:g}" for rank, r in enumerate(results) for label, err, tol in r
           if not err <= tol]
    assert not bad, "\n".join(bad)


@pytest.mark.world
@pytest.mark.parametrize("name,world,extra", [RUNS[0], RUNS[3]], ids=[RUN_IDS[0], RUN_IDS[3]])
def test_syncopy_run_reports_each_rank(name, world, extra):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "syncopy.cli", "run", name, "--world", str(world), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    lines = [l for l in proc.stdout.splitlines() if l.startswith("rank ")]
    assert len(lines) == world and all("OK" in l for l in lines)
    assert f"{name} on {world} rank(s): correct" in proc.stdout


CONSUMER_TEMPLATES = ["ag_gemm", "ag_gemm_persistent", "ag_rmsnorm", "a2a_gemm"]
PRODUCER_TEMPLATES = ["gemm_rs", "gemm_ar"]
ARCHS = ["sm_80", "sm_90"]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """`syncopy compile NAME --arch ARCH -o OUT` of every template for every target, in one process
    without the interpreter (tests/templates/compile_all.py): the folder of their outputs."""
    out = tmp_path_factory.mktemp("compiled")
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "0"}
    env["PYTHONPATH"] = str(ROOT)
    pairs = [f"{name}:{arch}" for name in CONSUMER_TEMPLATES + PRODUCER_TEMPLATES for arch in ARCHS]
    proc = subprocess.run([sys.executable, "-m", "tests.templates.compile_all", str(out), *pairs],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def _compile(name: str, arch: str, compiled: Path):
    """What `syncopy compile NAME --arch ARCH -o OUT` returned and wrote to stderr, and OUT."""
    base = compiled / f"{name}-{arch}"
    proc = subprocess.CompletedProcess([], int(Path(f"{base}.rc").read_text()), stderr=Path(f"{base}.err").read_text())
    return proc, Path(f"{base}.ptx")


@pytest.mark.parametrize("name", CONSUMER_TEMPLATES)
@pytest.mark.parametrize("arch", ARCHS)
def test_compile_template_has_acquire_polls_in_loops(name, arch, compiled):
    proc, out = _compile(name, arch, compiled)
    if proc.returncode != 0 and name == "ag_gemm_persistent" and arch == "sm_80" and "descriptor" in proc.stderr.lower():
        # Tensor descriptors are TMA, an sm_90 unit; triton 3.9 lowers them to plain loads for
        # sm_80, an older triton may refuse: then only sm_90 is checked for this template.
        pytest.skip(f"this triton does not lower tensor descriptors for sm_80: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    from syncopy.emit.ptx import acquire_polls

    ptx = out.read_text()
    polls = acquire_polls(ptx)
    assert polls and all(".acquire" in p.text and ".sys" in p.text for p in polls)
    assert f"{name} for {arch}:" in proc.stderr
    if name == "ag_gemm_persistent" and arch == "sm_90":
        assert "cp.async.bulk.tensor" in ptx  # the descriptor loads really are TMA copies
    if name == "ag_gemm_persistent":
        # ... and `syncopy compile` sets SYNCOPY_ASYNC_PROXY for the target: fenced after the wait on sm_90 only.
        from syncopy.emit.ptx import proxy_fences, tma_loads_fenced

        assert bool(proxy_fences(ptx)) is (arch == "sm_90") and tma_loads_fenced(ptx)


@pytest.mark.parametrize("name", PRODUCER_TEMPLATES)
@pytest.mark.parametrize("arch", ARCHS)
def test_compile_producer_template_notifies_with_release_after_its_stores(name, arch, compiled):
    proc, out = _compile(name, arch, compiled)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from syncopy.emit.ptx import acquire_polls, notifies, stores_then_barrier_then_notify

    ptx = out.read_text()
    ops = notifies(ptx)
    # The tile counter (acq_rel add) and the flag (release exchange), both at system scope.
    assert any(".acq_rel" in o.text and ".add" in o.text for o in ops), ops
    assert any(".release" in o.text and ".exch" in o.text for o in ops), ops
    assert stores_then_barrier_then_notify(ptx), "a notify is not after the tile's stores and a block barrier"
    assert not acquire_polls(ptx), "a producer kernel never waits"
    assert f"{name} for {arch}:" in proc.stderr and "release notifies after the tile's stores" in proc.stderr
