"""The watchdog beside a CUDA graph capture (issue 28 item 3): while the main thread captures in
torch's default global mode (CUDAGraph.capture_begin, and torch.cuda.graph), the watchdog thread
keeps querying the events of a ring's launches (still pending, in the first test); its own capture
mode is relaxed first (runtime/streams/watchdog.py), so the capture succeeds and replays. And a
wait for a launch stuck behind a long kernel is bounded. Skipped cleanly without CUDA;
tests/unit/test_error_ring_slots.py checks the order of calls on CPU."""
import os
import threading
import time

import pytest
import torch

from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.streams import streamops, watchdog
from syncopy.runtime.streams.error_ring import ErrorRing

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs a CUDA device (and TRITON_INTERPRET unset)"),
]

SLEEP_CYCLES = int(2e9)  # about a second of device time on a ~2 GHz GPU: the ring's launches stay pending


class _Counting:
    """The process's CudaOps, noting each event query's thread and time."""

    def __init__(self, ops):
        self.ops, self.queries = ops, []

    def __getattr__(self, name):
        return getattr(self.ops, name)

    def done(self, event) -> bool:
        done = self.ops.done(event)
        self.queries.append((threading.current_thread().name, time.monotonic(), done))
        return done


class _Ring(ErrorRing):
    def failed(self, words, epoch):
        raise SyncopyTimeout(words[1], (0, words[2]), epoch, 1.0)


def _pending_ring(launches: int):
    """A ring on the CUDA driver whose `launches` launches sit behind a long kernel on a side stream."""
    ops = _Counting(streamops.cuda_ops())
    words = torch.zeros(dev.SIG_HEADER, dtype=torch.int32, device="cuda")
    ring = _Ring(ops, lambda t: t.pin_memory(), words.data_ptr())
    ring.keep = words
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
    for epoch in range(1, launches + 1):
        ring.make_room()
        ring.record(epoch, ops.handle(side))
    return ring, side


@pytest.fixture
def looking(monkeypatch):
    monkeypatch.setattr(watchdog, "_local", threading.local())
    watchdog.configure(mode="warn", interval_s=0.002)
    yield watchdog
    watchdog._mode = watchdog._interval_s = None


def test_a_graph_captured_while_the_watchdog_queries_pending_launches_succeeds_and_replays(looking):
    ring, side = _pending_ring(8)
    try:
        deadline = time.monotonic() + 10
        while not any(q[0] == "syncopy-watchdog" for q in ring.ops.queries) and time.monotonic() < deadline:
            time.sleep(0.002)
        x = torch.randn(4096, device="cuda")
        capture = torch.cuda.Stream()
        capture.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        # capture_begin in torch's default global mode, on a stream of its own: unlike torch.cuda.graph's
        # entry, no device synchronize first, so the ring's launches are still pending during the capture.
        with torch.cuda.stream(capture):
            t0 = time.monotonic()
            graph.capture_begin(capture_error_mode="global")
            y = x * 2 + 1
            for _ in range(20):
                y = y * 0.5 + 0.25
            time.sleep(0.05)  # the watchdog looks some 25 times while the capture is open
            graph.capture_end()
            t1 = time.monotonic()
        during = [q for q in ring.ops.queries if q[0] == "syncopy-watchdog" and t0 < q[1] < t1]
        assert during and not all(q[2] for q in during), "the watchdog queried no pending launch during the capture"
        x.copy_(torch.randn(4096, device="cuda"))  # a replay reads what the captured tensor holds by then
        expect = x * 2 + 1
        for _ in range(20):
            expect = expect * 0.5 + 0.25
        torch.cuda.current_stream().synchronize()
        graph.replay()
        torch.cuda.current_stream().synchronize()
        assert torch.allclose(y, expect)
    finally:
        side.synchronize()
        ring.check(wait=True)
        ring.close()


def test_torch_cuda_graph_beside_the_watchdog(looking):
    ring, side = _pending_ring(4)  # done once torch.cuda.graph synchronizes the device on entry, still queried
    try:
        x = torch.randn(4096, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            t0 = time.monotonic()  # after its entry's device synchronize
            y = x * 3 - 1
            time.sleep(0.05)
        t1 = time.monotonic()
        assert any(q[0] == "syncopy-watchdog" and t0 < q[1] < t1 for q in ring.ops.queries)
        x.copy_(torch.randn(4096, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.allclose(y, x * 3 - 1)
    finally:
        side.synchronize()
        ring.check(wait=True)
        ring.close()


def test_a_wait_for_a_launch_stuck_behind_a_long_kernel_is_bounded():
    ring, side = _pending_ring(1)
    try:
        t0 = time.monotonic()
        with pytest.raises(LaunchError, match=r"^launch 1 was not done 0.2s after syncopy began waiting for it"):
            ring.check(wait=True, bound_s=0.2)
        assert time.monotonic() - t0 < 0.9 and ring.pending  # well before the kernel ends; still in flight
    finally:
        side.synchronize()
        ring.check(wait=True)
        ring.close()
