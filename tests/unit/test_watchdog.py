"""The watchdog (runtime/streams/watchdog.py): a failed launch that returned and that nobody raised is said on
stderr (or ends the process) without a call from the launching thread; the error still raises at
synchronize(). On the CPU thread world, which defers errors as a GPU does."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import syncopy
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.streams import watchdog
from syncopy.runtime.worlds.threads import ThreadWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)
EXPECTED = "rank 1 waited 1s for chunk 1 of rank 0 (epoch 1) and it never arrived"


def _launch_args() -> tuple:
    """(grid, per-rank arguments, meta) of an AG-GEMM of two ranks of 16 rows each."""
    g = torch.Generator().manual_seed(0)
    shards = [torch.randn(16, 16, generator=g) for _ in range(2)]
    b = torch.randn(16, 16, generator=g)
    cs = [torch.zeros(32, 16) for _ in range(2)]
    args = [(a, b, c, 32, 16, 16, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)) for a, c in zip(shards, cs)]
    return (2,), args, dict(META)


def _failed_launch() -> ThreadWorld:
    """A thread world of two whose launch withheld rank 0's second chunk from rank 1: returned, not raised."""
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring"), timeout_s=1.0)(ag_gemm_kernel)
    tw = ThreadWorld(fk, 2, device="cpu")
    tw.launch(*_launch_args(), withhold=frozenset({1}))
    return tw


@pytest.fixture
def configured():
    yield watchdog
    watchdog._mode = watchdog._interval_s = None


def test_a_failure_nobody_raised_is_said_on_stderr_and_still_raises(configured, capfd):
    watchdog.configure(mode="warn", interval_s=0.05)
    tw = _failed_launch()
    deadline, err = time.monotonic() + 10, ""
    while EXPECTED not in err and time.monotonic() < deadline:
        time.sleep(0.05)
        err += capfd.readouterr().err
    assert f"syncopy watchdog: a launch that already returned failed: {EXPECTED}" in err
    assert "it raises at that operator's next launch or synchronize()" in err
    assert err.count(EXPECTED) == 1  # once per failed launch, however long it stays unraised
    with pytest.raises(SyncopyTimeout) as exc:
        tw.synchronize()
    assert EXPECTED in str(exc.value)


def test_a_failure_is_said_only_if_still_unraised_one_look_later(configured, capfd):
    watchdog.configure(mode="off")  # the thread looks no more; these looks are the test's
    tw = _failed_launch()
    assert watchdog.look() == []  # first seen: the launching thread may be about to raise it
    (line,) = watchdog.look()
    assert EXPECTED in line and watchdog.look() == []
    capfd.readouterr()
    tw2 = _failed_launch()
    watchdog.look()
    with pytest.raises(SyncopyTimeout):
        tw2.synchronize()  # raised in time: nothing more to say
    assert watchdog.look() == [] and capfd.readouterr().err == ""
    del tw


def test_abort_mode_ends_the_process_with_the_line():
    script = textwrap.dedent("""
        import time
        from tests.unit.test_watchdog import _failed_launch
        tw = _failed_launch()
        time.sleep(30)
        print("still alive")
    """)
    env = dict(os.environ, SYNCOPY_ASYNC_ERRORS="abort", SYNCOPY_WATCHDOG_S="0.05", TRITON_INTERPRET="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "still alive" not in out.stdout
    assert f"{EXPECTED}" in out.stderr and "this process ends now (SYNCOPY_ASYNC_ERRORS=abort)" in out.stderr


def test_bad_settings_are_one_line_errors(configured, monkeypatch):
    with pytest.raises(LaunchError, match="watchdog mode 'loud': expected one of warn, abort, off"):
        watchdog.configure(mode="loud")
    monkeypatch.setenv("SYNCOPY_WATCHDOG_S", "soon")
    with pytest.raises(LaunchError, match="SYNCOPY_WATCHDOG_S='soon': expected a number of seconds > 0"):
        watchdog.interval_s()
    # Read on the launching thread when a launch's error ring is made: that launch's one-line error.
    with pytest.raises(LaunchError, match="SYNCOPY_WATCHDOG_S='soon'"):
        ThreadWorld(syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2), timeout_s=1.0)(ag_gemm_kernel),
                    2, device="cpu").launch(*_launch_args())
