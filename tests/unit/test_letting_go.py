"""What a context made is let go with it: a CPU stream's worker thread ends after its queued work,
an error ring frees its events and leaves the watchdog's sight, and a retired context's backend is
closed even when reading its last launches raises (runtime/launch/contexts.py, pending.py, streamops.py)."""
from __future__ import annotations

import gc
import threading
import types

import pytest
import torch

from syncopy.errors import LaunchError
from syncopy.runtime.launch import contexts
from syncopy.runtime.streams import streamops, watchdog
from syncopy.runtime.streams.error_ring import ErrorRing
from syncopy.runtime.streams.streamops import ptr


class CountingOps(streamops.HostOps):
    def __init__(self):
        super().__init__()
        self.destroyed = []

    def destroy(self, event) -> None:
        self.destroyed.append(event)


def test_a_closed_stream_runs_what_it_had_then_its_thread_ends():
    stream = streamops.HostStream(name="syncopy-test-stream")
    ran = []
    gate = threading.Event()
    stream.put(gate.wait)
    stream.put(lambda: ran.append(1))
    stream.close()
    assert stream._thread.is_alive()  # still behind the gate
    gate.set()
    stream._thread.join(timeout=5)
    assert ran == [1] and not stream._thread.is_alive()
    with pytest.raises(RuntimeError, match="the stream was closed"):
        stream.put(lambda: None)


def test_a_stream_nobody_holds_ends_its_thread():
    stream = streamops.HostStream(name="syncopy-test-stream")
    ran = []
    stream.put(lambda: ran.append(1))
    thread = stream._thread
    del stream
    gc.collect()
    thread.join(timeout=5)
    assert ran == [1] and not thread.is_alive()


def _ring(ops) -> ErrorRing:
    words = torch.zeros(4, dtype=torch.int32)
    ring = ErrorRing(ops, lambda t: t, ptr(words))
    ring.keep = words
    return ring


def test_a_closed_ring_frees_every_event_and_the_watchdog_stops_looking():
    ops = CountingOps()
    ring = _ring(ops)
    events = list(ring.done)
    ring.record(1, None)
    assert ring in watchdog._rings and len(ring.pending) == 1
    ring.close()
    assert ops.destroyed == events and len(events) == ErrorRing.RING
    assert ring not in watchdog._rings and not ring.pending and ring.first_failure() is None
    ring.check(wait=True)  # nothing left to read


def test_a_ring_nobody_holds_frees_its_events():
    ops = CountingOps()
    ring = _ring(ops)
    ring.record(1, None)
    del ring
    gc.collect()
    assert len(ops.destroyed) == ErrorRing.RING


def test_a_retired_context_is_closed_even_when_its_last_launch_raises():
    closed = []

    class Backend:
        asynchronous = True  # launches return before their kernel ran (where.deferred)

        def check(self, wait=False):
            raise LaunchError("rank 0's last launch failed")

        def close(self):
            closed.append("backend")

    ops = CountingOps()
    own = _ring(ops)
    with pytest.raises(LaunchError, match="last launch failed"):
        contexts._retire(types.SimpleNamespace(own_errors=own), Backend())
    assert closed == ["backend"] and len(ops.destroyed) == ErrorRing.RING  # the backend and the world of one's ring


def test_a_world_of_ones_ring_is_read_before_it_is_freed():
    ops = CountingOps()
    own = _ring(ops)
    own.record(1, None)
    read = []
    real = own.check
    own.check = lambda wait=False, upto=None: (read.append(wait), real(wait=wait, upto=upto))
    contexts._retire(types.SimpleNamespace(own_errors=own), None)
    assert read == [True] and len(ops.destroyed) == ErrorRing.RING and not own.pending


def test_an_event_the_driver_refuses_to_free_does_not_stop_the_others():
    class Refusing(CountingOps):
        def destroy(self, event) -> None:
            if not self.destroyed:
                self.destroyed.append(None)
                raise LaunchError("cuEventDestroy failed: invalid context")
            self.destroyed.append(event)

    ops = Refusing()
    ring = _ring(ops)
    ring.close()  # on a thread with no context current, say: the rest still go, nothing raises
    assert len(ops.destroyed) == ErrorRing.RING and not ring.done
