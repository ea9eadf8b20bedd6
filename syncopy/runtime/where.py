"""Where a launch runs, below everything else of the runtime: interpreted or compiled, the poll budget
of a wait, the async proxy, the allocator tensor descriptors need, the GPU of the launch's tensors,
whether a backend returns before the kernel ran."""
from __future__ import annotations

import functools
import os
import sys

import torch

from syncopy import device as dev


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


#: Cost of one block-wide acquire poll on a GPU (H200, 132 programs polling: 182-198 ns,
#: benchmarks/gpu_bench.py poll_cost); turns timeout_s into a poll budget.
GPU_POLL_S = 200e-9


def spin_limit(timeout_s: float, device_type: str) -> int:
    """The bound of every wait in a launch (ctx CTX_SPIN_LIMIT): compiled, a number of polls,
    timeout_s over GPU_POLL_S plus the sleep between polls (device.WAIT_BACKOFF_NS; see device.py
    for why waits count polls rather than read %globaltimer); interpreted, timeout_s in microseconds of the host's clock (device.TIMED_WAITS:
    an interpreted poll's cost drifts within a process -- a wait bounded by a measured cost gave up
    after 0.34 s of 0.5 -- so a count of polls is no bound in time there)."""
    if not interpreting():
        return max(1, int(timeout_s / (GPU_POLL_S + dev.WAIT_BACKOFF_NS.value * 1e-9)))
    return max(1, int(timeout_s * 1e6))


def has_async_proxy(device: torch.device) -> bool:
    """SYNCOPY_ASYNC_PROXY of a launch on `device`: compiled for a GPU whose TMA copies go through the
    async proxy (sm_90+), so the waits and notifies of a descriptor kernel fence it. The
    interpreter runs no PTX, and older GPUs have no such fence."""
    if interpreting() or device.type != "cuda":
        return False
    return cuda_async_proxy(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def cuda_async_proxy(index: int) -> bool:
    major, minor = torch.cuda.get_device_capability(index)
    return dev.has_async_proxy(10 * major + minor)


def cuda_device(args: tuple, kwargs: dict):
    """The GPU of the launch's first CUDA tensor (None for CPU launches)."""
    return next((a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_cuda), None)


def on_device(device):
    """`device` made current for the launch: Triton launches on the current device's stream, and the
    backends make their streams and communicators there."""
    import contextlib

    return torch.cuda.device(device) if device is not None else contextlib.nullcontext()


def deferred(backend) -> bool:
    """Does `backend` return from launches before their kernel ran (errors read later)?"""
    return getattr(backend, "asynchronous", False)


def ensure_allocator(device: torch.device) -> None:
    """Tensor descriptors made inside a kernel need global scratch memory from `triton.set_allocator`.
    Set one on the tensors' device unless the program already did (the interpreter of triton 3.9
    does not ask for it; compiled kernels do)."""
    import triton

    try:
        from triton.runtime import _allocation
    except ImportError:
        return
    current = _allocation._allocator
    current = current.get() if hasattr(current, "get") else current
    if isinstance(current, _allocation.NullAllocator):
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=device))


#: How often (seconds) Python switches threads where threads run beside an interpreted kernel.
THREAD_SWITCH_S = 0.001


def switch_threads_often() -> None:
    """An interpreted kernel's programs hold the GIL between thread switches, and the threads beside
    it (gloo's receive threads, a CPU stream's worker waiting on a flag to send a chunk) raise flags
    and send chunks only when they get it: at Python's default interval (5 ms) a worker woke for its
    first flag only after a 50 ms kernel had ended. Switch every millisecond instead."""
    if sys.getswitchinterval() > THREAD_SWITCH_S:
        sys.setswitchinterval(THREAD_SWITCH_S)
