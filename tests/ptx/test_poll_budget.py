"""Every allowed timeout_s stays a bound: the poll budget is an int64 that the compiled wait counts
down in 64 bits (a 32-bit count of polls made wrapped past 2^31 polls, ~430 s at 200 ns a poll,
and the wait never ended)."""
import re

import pytest
import triton

from syncopy import api
from syncopy.runtime import where
from syncopy import device as dev
from tests.ptx import subprocess_compile

subprocess_compile.register(__name__, "compile_wait")  # compiled with the other modules' kernels


@pytest.mark.parametrize("arch", [80, 90])
def test_the_compiled_wait_counts_its_budget_down_in_64_bits(arch, tmp_path):
    ptx = subprocess_compile.compiled("compile_wait", arch, tmp_path)["ptx"]
    assert re.search(r"add\.s64\s+%rd\d+, %rd\d+, -1;", ptx), "no 64-bit count-down of the poll budget"
    assert not re.search(r"add\.s32\s+(%r\d+), \1, 1;", ptx), "a 32-bit poll counter"


def test_the_largest_timeout_is_a_budget_an_int64_holds(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the compiled budget
    polls = where.spin_limit(api.MAX_TIMEOUT_S, "cuda")
    assert polls == int(api.MAX_TIMEOUT_S / where.GPU_POLL_S) and 2**31 < polls < 2**63


def test_the_largest_interpreted_budget_is_an_int64(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    budget = where.spin_limit(api.MAX_TIMEOUT_S, "cpu")  # microseconds of host time under the interpreter
    assert budget == int(api.MAX_TIMEOUT_S * 1e6) and 2**31 < budget < 2**63


@triton.jit
def one_wait(signals, ctx):
    dev.wait_chunks(signals, ctx, 0, 0)


@pytest.mark.parametrize("budget", [
    pytest.param("largest", id="largest-allowed"),
    pytest.param(2**32 + 1, id="2^32+1"),  # a count kept in 32 bits would be 1: one poll, then a timeout
])
def test_an_interpreted_wait_with_a_budget_past_int32_waits_for_its_chunk(budget, monkeypatch):
    """The interpreter's wait, bounded in host microseconds: with the largest budget any timeout_s
    gives (and one whose low 32 bits are 1), it neither gives up at once (a budget truncated or
    wrapped) nor misses the chunk when it lands."""
    import threading
    import time

    import torch

    from syncopy.runtime import where

    if not dev.INTERPRETED:
        pytest.skip("runs the wait under the Triton interpreter (TRITON_INTERPRET=1 before syncopy is imported)")
    if budget == "largest":
        budget = where.spin_limit(api.MAX_TIMEOUT_S, "cpu")

    ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64)
    ctx[dev.CTX_EPOCH.value] = 7
    ctx[dev.CTX_SPIN_LIMIT.value] = budget
    signals = torch.zeros(dev.SIG_HEADER + 1, dtype=torch.int32)
    landing = threading.Timer(0.5, lambda: signals.__setitem__(dev.SIG_HEADER, 7))
    t = time.monotonic()
    landing.start()
    one_wait[(1,)](signals, ctx)
    landing.join()
    assert time.monotonic() - t >= 0.45  # it waited for the chunk ...
    assert signals[: dev.SIG_HEADER].tolist() == [0] * dev.SIG_HEADER  # ... and recorded no timeout
