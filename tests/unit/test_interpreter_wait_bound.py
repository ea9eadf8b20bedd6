"""Under the interpreter a wait's bound is a poll count, timeout_s over a poll's measured cost
(runtime/launch.py): a cost measured too high makes a healthy wait time out early. The measurement
leaves out the interpreter's first-call setup and a descheduled run (the least of a few runs), so a
wait on a flag that never rises lasts at least about timeout_s."""
from __future__ import annotations

import time

import torch
import triton
import triton.language as tl

from syncopy import device as dev
from syncopy.runtime import launch

TIMEOUT_S = 0.5


@triton.jit
def _wait_for_chunk_0(signals, ctx):
    first = tl.load(signals + dev.SIG_BASE)
    dev.wait_chunks(signals, ctx, first, first)


def _wait(limit: int) -> tuple[float, int]:
    """(seconds, error flag) of one wait of `limit` polls on a chunk that never lands."""
    ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64)
    ctx[dev.CTX_EPOCH.value], ctx[dev.CTX_SPIN_LIMIT.value] = 1, limit
    signals = torch.zeros(dev.SIG_HEADER + 1, dtype=torch.int32)
    t = time.perf_counter()
    _wait_for_chunk_0[(1,)](signals, ctx)
    return time.perf_counter() - t, int(signals[dev.SIG_ERROR.value])


def test_the_least_of_a_few_runs_after_an_uncounted_one_is_a_polls_cost():
    times = iter([9.0, 0.5, 0.2, 0.4])  # setup-laden first run, then a descheduled one among three
    assert launch.least_per_poll(lambda polls: next(times), polls=100, runs=3) == 0.2 / 100


def test_a_wait_on_a_chunk_that_never_lands_lasts_about_its_timeout(monkeypatch):
    monkeypatch.setattr(launch, "_poll_cost_s", None)  # measured afresh, as a rank's first launch does
    limit = launch._spin_limit(TIMEOUT_S, "cpu")
    _wait(1)  # the kernel's own first call (its setup is not the wait's)
    seconds, failed = _wait(limit)
    assert failed == 1
    assert seconds >= 0.7 * TIMEOUT_S, f"a {TIMEOUT_S:g} s bound gave up after {seconds:.2f} s ({limit} polls)"
