"""How many hardware queues CUDA gives each device to feed its streams: `CUDA_DEVICE_MAX_CONNECTIONS`.

CUDA maps every stream of a process onto one of N hardware work queues (N = the variable, 8 when it
is unset, at most 32). Within a queue, work runs in the order it was enqueued, whatever stream it
came from. With N = 1 (what Megatron-LM's tensor-parallel overlap asks for, so that its
communication kernel is scheduled before its GEMM) every stream of the process shares one queue:

- a stream wait (`cuStreamWaitValue32`) enqueued before a kernel holds the kernel back until the
  word arrives, whichever stream each is on;
- a kernel that spins on a flag holds back what was enqueued after it only while it has not started:
  kernels start in enqueue order, then run side by side as usual.

So the runtime enqueues its device waits behind the kernel where the variable is 1 (the variable is
read when CUDA makes the device's context; it is read here once per process, as CUDA does).
"""
from __future__ import annotations

import functools
import os

DEFAULT = 8  # CUDA's default number of connections


@functools.lru_cache(maxsize=None)
def connections() -> int:
    """`CUDA_DEVICE_MAX_CONNECTIONS` as CUDA reads it (an unset or unreadable value: CUDA's default)."""
    text = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "").strip()
    try:
        value = int(text)
    except ValueError:
        return DEFAULT
    return min(max(value, 1), 32)


def single_queue() -> bool:
    """Do all of this process's streams share one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1)?"""
    return connections() == 1
