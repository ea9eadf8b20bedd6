"""SYNCOPY_WAIT_BACKOFF_NS: a waiting program sleeps between two polls of a flag that was down
(`nanosleep` in the compiled spin loop), and the poll budget counts the sleep, so timeout_s stays
the bound. Off (0) by default: on an H200 the loopback AG-GEMM took the same time with 0, 256, 1024
and 4096 ns (benchmarks/results/h200-2026-11-27-s9)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from syncopy import device as dev
from syncopy.runtime import where

ROOT = Path(__file__).resolve().parents[2]


def _wait_ptx(tmp_path, backoff_ns: int | None) -> str:
    env = {**{k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "SYNCOPY_WAIT_BACKOFF_NS")},
           "TRITON_INTERPRET": "0"}  # unset, import syncopy would turn it on where there is no GPU
    if backoff_ns is not None:
        env["SYNCOPY_WAIT_BACKOFF_NS"] = str(backoff_ns)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["TRITON_CACHE_DIR"] = str(tmp_path / str(backoff_ns))
    proc = subprocess.run([sys.executable, "-m", "tests.ptx.compile_wait", "90"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["ptx"]


def _spin_loop(ptx: str) -> str:
    """The body of the bounded spin: from the loop header to the branch back to it."""
    m = re.search(r"^(\$L__BB\d+_\d+):[^\n]*\n[^\n]*Loop Header.*?bra(?:\.uni)?\s+\1;", ptx, re.S | re.M)
    assert m, "no spin loop in the wait's PTX"
    return m.group(0)


def test_the_compiled_spin_sleeps_between_polls_only_when_asked(tmp_path):
    loop = _spin_loop(_wait_ptx(tmp_path, 256))
    assert re.search(r"mov\.b32\s+(%r\d+), 256;.*nanosleep\.u32\s+\1;", loop, re.S), loop
    assert "ld.global.sys.acquire" in loop, "the sleep replaced the poll"
    # Off unless asked: the default compiles no sleep (the constexpr branch is pruned; the default
    # PTX itself is test_poll_budget's).
    assert "SYNCOPY_WAIT_BACKOFF_NS" in os.environ or dev.WAIT_BACKOFF_NS.value == 0


def test_the_poll_budget_counts_the_sleep(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the compiled budget
    monkeypatch.setattr(dev, "WAIT_BACKOFF_NS", type(dev.WAIT_BACKOFF_NS)(1000))
    polls = where.spin_limit(12.0, "cuda")
    assert polls == int(12.0 / (where.GPU_POLL_S + 1000 * 1e-9)) and polls * 6 < int(12.0 / where.GPU_POLL_S) + 6
