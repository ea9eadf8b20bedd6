"""Under the interpreter a wait is bounded in host time: CTX_SPIN_LIMIT holds microseconds
(runtime/where.py, device.TIMED_WAITS). A bound counted in polls of a measured cost gave up after
0.34 s of 0.5 once (an interpreted poll got faster within the process): a wait on a flag that never
rises now lasts its timeout, however fast the polls."""
from __future__ import annotations

import time

import torch
import triton
import triton.language as tl

from syncopy import device as dev
from syncopy.runtime import where

TIMEOUT_S = 0.5


@triton.jit
def _wait_for_chunk_0(signals, ctx):
    first = tl.load(signals + dev.SIG_BASE)
    dev.wait_chunks(signals, ctx, first, first)


def _wait(limit: int) -> tuple[float, int]:
    """(seconds, error flag) of one wait bounded by `limit` on a chunk that never lands."""
    ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64)
    ctx[dev.CTX_EPOCH.value], ctx[dev.CTX_SPIN_LIMIT.value] = 1, limit
    signals = torch.zeros(dev.SIG_HEADER + 1, dtype=torch.int32)
    t = time.perf_counter()
    _wait_for_chunk_0[(1,)](signals, ctx)
    return time.perf_counter() - t, int(signals[dev.SIG_ERROR.value])


def test_a_wait_on_a_chunk_that_never_lands_lasts_its_timeout():
    limit = where.spin_limit(TIMEOUT_S, "cpu")
    _wait(1)  # the kernel's own first call (its setup is not the wait's)
    for _ in range(3):  # however fast the polls get, launch after launch
        seconds, failed = _wait(limit)
        assert failed == 1
        assert seconds >= TIMEOUT_S, f"a {TIMEOUT_S:g} s bound gave up after {seconds:.2f} s"
