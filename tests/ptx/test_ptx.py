"""Rung 3: compile the fused GEMM for sm_80 and sm_90 with triton.compile (no GPU needed) and check
that each wait is an acquire load at system scope inside a loop."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=[80, 90], ids=["sm_80", "sm_90"])
def compiled(request, tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["SYNCOPY_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "tests.ptx.compile_fused", str(request.param)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_wait_is_acquire_load_in_a_loop(compiled):
    for dtype, info in compiled.items():
        assert info["polls"], f"{dtype}: no acquire load inside a loop"
        for op in info["polls"]:
            assert "acquire" in op and ".sys" in op, op
            assert op.startswith(("ld.", "@")) and ("ld.global" in op or "atom.global" in op), op


def test_kernel_still_computes_with_tensor_cores(compiled):
    assert all(info["has_mma"] for info in compiled.values())


def test_error_slot_publish_is_a_release(compiled):
    # On timeout the program publishes (rank, chunk, epoch) with a release exchange on the flag.
    for info in compiled.values():
        assert any("release" in op for op in info["releases"])


def test_notify_order_check_rejects_a_notify_before_the_stores_or_without_a_barrier():
    from syncopy.emit.ptx import stores_then_barrier_then_notify

    good = "st.global.b32 [%rd1], %r1;\nbar.sync 0;\natom.global.sys.acq_rel.add.u32 %r2, [%rd2], 1;\n"
    assert stores_then_barrier_then_notify(good)
    assert not stores_then_barrier_then_notify(good.replace("bar.sync 0;\n", ""))
    early = "bar.sync 0;\natom.global.sys.acq_rel.add.u32 %r2, [%rd2], 1;\nst.global.b32 [%rd1], %r1;\n"
    assert not stores_then_barrier_then_notify(early)
    assert not stores_then_barrier_then_notify("st.global.b32 [%rd1], %r1;\n")
