"""What every launch needs to know of where it runs: interpreted or compiled, the poll budget of a wait, the
async proxy, the allocator tensor descriptors need, the GPU of the launch's tensors, whether a backend
returns before the kernel ran."""
from __future__ import annotations

import functools
import os
import time

import torch

from syncopy import device as dev


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


#: Cost of one block-wide acquire poll on a GPU (H200, 132 programs polling: 182-198 ns,
#: benchmarks/gpu_bench.py poll_cost); turns timeout_s into a poll budget.
GPU_POLL_S = 200e-9


_poll_cost_s: float | None = None


def _spin_limit(timeout_s: float, device_type: str) -> int:
    """The bound of every wait in a launch (ctx CTX_SPIN_LIMIT), as a number of polls: timeout_s
    over the cost of one poll -- measured once per process under the interpreter, GPU_POLL_S when
    compiled (see device.py for why waits count polls rather than read %globaltimer)."""
    global _poll_cost_s
    if not _interpreting():
        return max(1, int(timeout_s / GPU_POLL_S))
    if _poll_cost_s is None:
        _poll_cost_s = _measure_poll_cost()
    return max(100, int(timeout_s / _poll_cost_s))


def _has_async_proxy(device: torch.device) -> bool:
    """SYNCOPY_ASYNC_PROXY of a launch on `device`: compiled for a GPU whose TMA copies go through the
    async proxy (sm_90+), so the waits and notifies of a descriptor kernel fence it. The
    interpreter runs no PTX, and older GPUs have no such fence."""
    if _interpreting() or device.type != "cuda":
        return False
    return _cuda_async_proxy(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_async_proxy(index: int) -> bool:
    major, minor = torch.cuda.get_device_capability(index)
    return dev.has_async_proxy(10 * major + minor)


def _ensure_allocator(device) -> None:
    """Kernels that make tensor descriptors need `triton.set_allocator`; set one if the program has not."""
    from syncopy.runtime.persistent import ensure_allocator

    ensure_allocator(device)


def _measure_poll_cost() -> float:
    import triton
    import triton.language as tl

    ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64)
    ctx[dev.CTX_EPOCH.value] = 1
    signals = torch.zeros(dev.SIG_HEADER + 1, dtype=torch.int32)

    @triton.jit
    def _spin(signals, ctx):
        first = tl.load(signals + dev.SIG_BASE)  # chunk 0, as a tensor like the kernels' ranges
        dev.wait_chunks(signals, ctx, first, first)

    def spin(polls: int) -> float:
        ctx[dev.CTX_SPIN_LIMIT.value] = polls
        signals.zero_()  # the last run's timeout is in the error slot, and a wait stops at a recorded error
        t = time.perf_counter()
        _spin[(1,)](signals, ctx)
        return time.perf_counter() - t

    return max(least_per_poll(spin), 1e-7)


def least_per_poll(spin, polls: int = 100, runs: int = 3) -> float:
    """Seconds per poll of `spin(polls)` (one wait of that many polls): the least of `runs` runs after
    one run that is not counted. The first run pays for the interpreter's setup (2-3x a poll's cost
    measured on the 2-core machine), and a run the OS descheduled overstates a poll; either would
    make the budget timeout_s / cost fewer polls than timeout_s lasts, and a healthy wait time out
    early (a 300 ms delay timed out in a 10 s bound at 4 ranks, the fault matrix of 26 Nov). A cost
    understated only lengthens the bound, which a timeout can afford."""
    spin(1)
    return min(spin(polls) for _ in range(runs)) / polls


def _cuda_device(args: tuple, kwargs: dict):
    """The GPU of the launch's first CUDA tensor (None for CPU launches)."""
    return next((a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_cuda), None)


def _on_device(device):
    """`device` made current for the launch: Triton launches on the current device's stream, and the
    backends make their streams and communicators there."""
    import contextlib

    return torch.cuda.device(device) if device is not None else contextlib.nullcontext()


def _deferred(backend) -> bool:
    """Does `backend` return from launches before their kernel ran (errors read later)?"""
    return getattr(backend, "asynchronous", False)
