"""Every allowed timeout_s stays a bound: the poll budget is an int64 that the compiled wait counts
down in 64 bits (a 32-bit count of polls made wrapped past 2^31 polls, ~430 s at 200 ns a poll,
and the wait never ended)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from syncopy import api

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("arch", [80, 90])
def test_the_compiled_wait_counts_its_budget_down_in_64_bits(arch, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "tests.ptx.compile_wait", str(arch)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ptx = proc.stdout
    assert re.search(r"add\.s64\s+%rd\d+, %rd\d+, -1;", ptx), "no 64-bit count-down of the poll budget"
    assert not re.search(r"add\.s32\s+(%r\d+), \1, 1;", ptx), "a 32-bit poll counter"


def test_the_largest_timeout_is_a_budget_an_int64_holds(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the compiled budget
    polls = api._spin_limit(api.MAX_TIMEOUT_S, "cuda")
    assert polls == int(api.MAX_TIMEOUT_S / api.GPU_POLL_S) and 2**31 < polls < 2**63
