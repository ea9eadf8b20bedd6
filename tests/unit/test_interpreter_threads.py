"""Two interpreted kernels at once on two threads of one process (runtime/pipeline/interpreter_threads.py), what a
pipeline's reader on its side thread needs on CPU ranks: each thread sees its own program ids, and a
kernel that outlives the other still runs on the interpreter's patches. (Without `enable()` this reader
reads the writer's program ids and, once the writer's grid ends, fails with "x >= grid_dim[0]".)"""
import os
import threading
import time

import pytest
import torch
import triton
import triton.language as tl

from syncopy.runtime.pipeline import interpreter_threads

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the Triton interpreter's own state")


@triton.jit
def _writer(flags, log):
    pid = tl.program_id(0)
    for i in range(200):  # long enough for the reader's thread to take turns inside this program
        tl.store(log + pid, i)
    tl.atomic_xchg(flags + pid, 1)


@triton.jit
def _poll(flag):  # a device function: the interpreter patches triton.language again at each call
    return tl.atomic_add(flag, 0)


@triton.jit
def _reader(flags, out, N: tl.constexpr):
    if tl.program_id(0) < N:
        v = _poll(flags + tl.program_id(0))
        while v == 0:
            v = _poll(flags + tl.program_id(0))
    tl.store(out + tl.program_id(0), tl.program_id(0) * 10 + 1)


def test_a_reader_waits_on_a_writers_flags_from_another_thread_and_outlives_it():
    originals = (tl.load, tl.program_id, tl.atomic_add)
    assert interpreter_threads.enable() and interpreter_threads.enable()  # idempotent
    flags, log = torch.zeros(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    out = torch.full((12,), -1, dtype=torch.int32)
    failed = []

    def read():
        try:
            _reader[(12,)](flags, out, 8)  # programs 8..11 wait on nothing: they run after the writer's grid ended
        except Exception as exc:
            failed.append(exc)

    side = threading.Thread(target=read)
    side.start()
    time.sleep(0.2)  # the reader's first program is spinning
    _writer[(8,)](flags, log)
    side.join(30)
    assert not side.is_alive() and failed == []
    assert out.tolist() == [p * 10 + 1 for p in range(12)] and log.tolist() == [199] * 8
    _writer[(8,)](torch.zeros(8, dtype=torch.int32), log)  # the patches are back to one kernel's use
    # No grid runs: every patch is undone (triton.language as imported) and none is kept, however many
    # device-function calls patched again (each poll of the spinning reader did).
    assert (tl.load, tl.program_id, tl.atomic_add) == originals
    assert interpreter_threads._scopes == [] and interpreter_threads._active == 0
