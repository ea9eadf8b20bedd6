"""The error ring's order of calls (runtime/streams/error_ring.py; issue 28 items 3 to 5), on CPU with
HostOps behind a fake device that records the ring's calls and holds its events pending (a GPU
still running the launches) until the test lets them complete:

- slots come from the ring's own counter: launches whose epochs skip (two receive buffers each see
  every other epoch) never share a slot, so no launch's failure is overwritten before it is read;
- room is made before a launch's kernel: an older launch's failure raises before anything of the
  current launch is enqueued, and every kernel enqueued has its error words copied;
- a failure says what became of the launches pending behind it, and an operator's context refuses
  its later launches saying why;
- a wait for a launch is bounded: one whose event never completes is a LaunchError naming it;
- the watchdog thread relaxes its own stream-capture mode before its first event query on a CUDA
  ring (tests/gpu/test_watchdog_capture.py runs the capture itself on a GPU)."""
from __future__ import annotations

import threading
import time

import pytest
import torch
import triton

import syncopy
from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.launch.contexts import refuse_broken_context
from syncopy.runtime.state.context import Context
from syncopy.runtime.state.plan import all_gather
from syncopy.runtime.streams import error_ring, streamops, watchdog
from syncopy.runtime.streams.error_ring import ErrorRing, LaunchErrors
from syncopy.runtime.streams.streamops import HostOps, ptr
from syncopy.runtime.transport.backends import control
from syncopy.schedule import Schedule


class _Device:
    """HostOps whose events recorded while `holding` complete only once released (all of them, or
    after `release_after` more queries: the device finishing while the host waits); every call of
    the ring's is logged as (call, thread name), copies with the slot they fill."""

    def __init__(self, ops, device_type: str = "cpu"):
        self.ops, self.device_type = ops, device_type
        self.log: list[tuple] = []
        self.holding, self.held, self.release_after = True, set(), None

    def __getattr__(self, name):
        return getattr(self.ops, name)

    def _note(self, *what) -> None:
        self.log.append((*what, threading.current_thread().name))

    def copy(self, dst, src, n, stream) -> None:
        self._note("copy", dst)
        self.ops.copy(dst, src, n, stream)

    def record(self, event, stream) -> None:
        if self.holding:
            self.held.add(id(event))
        self.ops.record(event, stream)

    def done(self, event) -> bool:
        self._note("done")
        if id(event) in self.held and self.release_after is not None:
            self.release_after -= 1
            if self.release_after <= 0:
                self.release()
        return id(event) not in self.held and self.ops.done(event)

    def release(self) -> None:
        self.held.clear()

    def exchange_capture_mode(self, mode: int) -> int:
        self._note("exchange", mode)
        return self.ops.exchange_capture_mode(mode)


class _Ring(ErrorRing):
    """A ring whose launches fail when their words' flag is set: a SyncopyTimeout for the unit the words name."""

    def __init__(self, ops):
        self.words_t = torch.zeros(dev.SIG_HEADER, dtype=torch.int32)
        super().__init__(ops, lambda t: t, ptr(self.words_t))

    def failed(self, words, epoch):
        raise SyncopyTimeout(words[1], (0, words[2]), epoch, 1.0)

    def launch(self, epoch: int, fails: bool = False) -> None:
        """What a launch does to the ring: room before the kernel, then the kernel's words and the record behind it."""
        self.make_room()
        self.kernel(epoch, fails)

    def kernel(self, epoch: int, fails: bool = False) -> None:
        """The kernel's error words (failed or not), then the record behind it."""
        self.words_t.copy_(torch.tensor([1, 0, 7, epoch] if fails else [0, 0, 0, 0], dtype=torch.int32))
        self.record(epoch, None)


@pytest.fixture
def ring():
    r = _Ring(_Device(HostOps()))
    yield r
    r.close()


def test_epochs_that_skip_take_every_slot_and_lose_no_failure(ring):
    # Two receive buffers: each ring sees every other epoch. 40 launches pending (more than 32):
    # epoch % 64 would give launch 35 (epoch 70) the slot of launch 3 (epoch 6) and lose its failure.
    for k in range(40):
        ring.kernel(2 * (k + 1), fails=(k == 2))  # 40 < 64 pending: room is not at stake here
    slots = [slot for _, slot in ring.pending]
    ring.ops.release()
    with pytest.raises(SyncopyTimeout) as info:
        ring.check(wait=True)
    assert info.value.epoch == 6 and info.value.chunk == (0, 7)
    assert str(info.value).endswith("; the 37 later launches still pending (epochs 8..80) were dropped unread "
                                    "(a failed context is not trusted)")
    assert not ring.pending and slots == list(range(40))  # one slot each, from the ring's counter
    ring.ops.holding = False
    for k in range(100):  # the counter goes on around the ring, launch after launch
        ring.launch(1000 + k)
    ring.check(wait=True)
    assert not ring.pending


def test_a_full_ring_waits_for_its_oldest_launch_before_the_kernel(ring):
    for k in range(64):
        ring.launch(k + 1, fails=(k == 0))
    ring.ops.release_after = 3  # the device finishes the oldest launch while the host waits for it
    with pytest.raises(SyncopyTimeout) as info:
        ring.make_room()
    assert info.value.epoch == 1 and "the 63 later launches still pending (epochs 2..64) were dropped unread" in str(info.value)
    ring.launch(65)  # room: the failed launch's context dropped what it no longer trusts
    assert [e for e, _ in ring.pending] == [65]


def test_recording_into_a_full_ring_is_an_internal_error_never_an_overwrite(ring):
    for k in range(ErrorRing.RING):
        ring.launch(k + 1)
    with pytest.raises(LaunchError, match=r"^launch 65 found its error ring full \(64 launches unread\): syncopy's internal order "
                                          r"was broken \(room is made before a launch's kernel, ErrorRing\.make_room\); please report"):
        ring.record(65, None)
    assert [e for e, _ in ring.pending] == list(range(1, 65))


def _context() -> Context:
    schedule = Schedule(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring")
    ctx = Context(all_gather(schedule, 1, 3, 4), (4, 2), torch.float32, torch.device("cpu"), 0)
    ctx.schedule = schedule
    return ctx


def test_a_failure_says_its_later_launches_were_dropped_and_the_operator_refuses_more():
    ctx = _context()
    errors = LaunchErrors(ctx, _Device(HostOps()), lambda t: t, 0.5)
    try:
        words = ctx.signals[: dev.SIG_HEADER]
        for epoch in (1, 2, 3):
            ctx.epoch = epoch
            words.copy_(torch.tensor([1, 1, 0, ctx.word] if epoch == 1 else [0, 0, 0, 0], dtype=torch.int32))
            errors.record(epoch, None)
        errors.ops.release()
        with pytest.raises(SyncopyTimeout) as info:
            errors.check(wait=True)
        first = "rank 1 waited 0.5s for chunk 0 of rank 0 (epoch 1) and it never arrived"
        assert str(info.value).startswith(first)
        assert str(info.value).endswith("; the 2 later launches still pending (epochs 2..3) were dropped unread, and this operator "
                                        "refuses its later launches (a failed context is not trusted)")
        assert ctx.broken.startswith(f"SyncopyTimeout: {first}") and "dropped" not in ctx.broken
        with pytest.raises(LaunchError, match=r"^this operator's transfers broke in an earlier launch \(SyncopyTimeout: rank 1 waited"):
            refuse_broken_context(ctx)
    finally:
        errors.close()


def test_waiting_for_a_launch_that_never_finishes_is_bounded(monkeypatch):
    monkeypatch.setattr(error_ring, "wait_bound", lambda timeout_s: 0.3, raising=False)
    ctx = _context()
    errors = LaunchErrors(ctx, _Device(HostOps()), lambda t: t, 0.5)
    errors.record(7, None)  # its event never completes: a kernel behind something that never ends
    got: list[BaseException] = []

    def synchronize():
        try:
            errors.check(wait=True)
        except BaseException as exc:
            got.append(exc)

    t0 = time.monotonic()
    waiter = threading.Thread(target=synchronize, daemon=True)
    waiter.start()
    waiter.join(15)
    try:
        assert not waiter.is_alive(), "check(wait=True) blocked past its bound"
        assert time.monotonic() - t0 < 10
        (exc,) = got
        assert isinstance(exc, LaunchError) and str(exc).startswith(
            "rank 1: launch 7 was not done 0.3s after syncopy began waiting for it, though its kernel's waits give up after timeout_s=0.5s")
        assert ctx.broken.startswith("LaunchError: rank 1: launch 7 was not done")
        assert [e for e, _ in errors.pending] == [7]  # still in flight: its slot stays taken
    finally:
        errors.ops.release()
        errors.close()


def test_the_wait_bound_is_controls():
    for timeout_s in (None, 0.1, 1.0, 30.0):
        assert error_ring.wait_bound(timeout_s) == control.wait_bound(timeout_s)


# -- make_room at a call site: the loopback world's launch, kernels logged beside the ring's calls ------

WORLD, ROWS, N, K = 3, 16, 16, 16
META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)


def _loopback_launch(lw, shards, b, **kw):
    m = ROWS * WORLD
    c = torch.full((m, N), float("nan"))
    a = shards[0]
    grid = (triton.cdiv(m, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)
    lw.launch(grid, (a, b, c, m, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
              dict(META), shards, sync=False, **kw)
    return float(torch.nan_to_num((c - torch.cat(shards) @ b).abs(), nan=float("inf")).max())


def test_an_older_failure_raises_before_the_current_kernel_is_enqueued(monkeypatch):
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    monkeypatch.setattr(LaunchErrors, "RING", 2)
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring"), timeout_s=0.3)(ag_gemm_kernel)
    lw = LoopbackWorld(fk, WORLD, 0, device="cpu")
    g = torch.Generator().manual_seed(0)
    shards, b = [torch.randn(ROWS, K, generator=g) for _ in range(WORLD)], torch.randn(K, N, generator=g)
    assert _loopback_launch(lw, shards, b) < 1e-4
    (loop,) = lw.loops.values()
    device = loop.errors.ops = _Device(loop.errors.ops)
    enqueue = lw.engine.enqueue
    lw.engine.enqueue = lambda launch: (device._note("kernel"), enqueue(launch))
    _loopback_launch(lw, shards, b, withhold=frozenset({3}))  # epoch 2: chunk 1 of rank 1 never comes; returns
    assert _loopback_launch(lw, shards, b) < 1e-4  # epoch 3: the ring is full behind it
    device.release_after = 2  # launch 2 completes while launch 4 waits for room
    with pytest.raises(SyncopyTimeout) as info:
        _loopback_launch(lw, shards, b)
    # Launch 4 raised before its kernel: every kernel enqueued had its error words copied behind it.
    order = [entry[0] for entry in device.log if entry[0] in ("kernel", "copy")]
    assert order == ["kernel", "copy", "kernel", "copy"], device.log
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (0, (1, 1), 2)
    assert str(info.value).endswith("; the 1 later launch still pending (epoch 3) was dropped unread (a failed context is not trusted)")
    device.holding = False
    assert _loopback_launch(lw, shards, b) < 1e-4  # the loopback world goes on (it takes launches after a failure)
    lw.synchronize()
    assert order + ["kernel", "copy"] == [entry[0] for entry in device.log if entry[0] in ("kernel", "copy")]


# -- the watchdog's capture mode -------------------------------------------------------------------------

@pytest.fixture
def looking(monkeypatch):
    monkeypatch.setattr(watchdog, "_local", threading.local(), raising=False)  # no thread relaxed yet
    yield watchdog
    watchdog._mode = watchdog._interval_s = None


def test_the_watchdog_relaxes_its_capture_mode_before_its_first_query_on_a_cuda_ring(looking):
    ring = _Ring(_Device(HostOps(), device_type="cuda"))
    try:
        ring.kernel(1)  # pending until released: every look queries its event
        watchdog.look()  # a look from the caller's own thread leaves its capture mode alone
        assert [e[0] for e in ring.ops.log if e[-1] == threading.current_thread().name] == ["copy", "done"]
        watchdog.configure(mode="warn", interval_s=0.01)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(e[:1] == ("done",) and e[-1] == "syncopy-watchdog" for e in ring.ops.log) < 3:
            time.sleep(0.01)
        mine = [e[:-1] for e in ring.ops.log if e[-1] == "syncopy-watchdog"]
        assert mine[0] == ("exchange", 2) and mine[1:] == [("done",)] * (len(mine) - 1), mine
        assert len(mine) >= 4  # relaxed once, then looked again and again
        assert streamops.CU_STREAM_CAPTURE_MODE_RELAXED == 2  # cuda.h's value
    finally:
        ring.close()


def test_a_cpu_ring_never_changes_a_threads_capture_mode(looking):
    ring = _Ring(_Device(HostOps()))
    try:
        ring.kernel(1)
        watchdog.look(relax=True)
        assert [e[0] for e in ring.ops.log if e[-1] == threading.current_thread().name] == ["copy", "done"]
    finally:
        ring.close()


def test_host_ops_keep_a_capture_mode_per_thread():
    ops, seen = HostOps(), []
    assert ops.exchange_capture_mode(streamops.CU_STREAM_CAPTURE_MODE_RELAXED) == streamops.CU_STREAM_CAPTURE_MODE_GLOBAL
    relaxed = streamops.CU_STREAM_CAPTURE_MODE_RELAXED
    other = threading.Thread(target=lambda: seen.append(streamops.HostOps().exchange_capture_mode(relaxed)))
    other.start()
    other.join()
    assert seen == [streamops.CU_STREAM_CAPTURE_MODE_GLOBAL]
    assert ops.exchange_capture_mode(streamops.CU_STREAM_CAPTURE_MODE_GLOBAL) == streamops.CU_STREAM_CAPTURE_MODE_RELAXED


def test_two_buffers_each_ring_sees_every_other_epoch_and_loses_no_failure(monkeypatch):
    # The defect as the loopback world met it: with buffers=2 each context's ring sees every other
    # epoch, so with epoch % RING launches 3 and 7 shared a slot of a ring of 4 and launch 3's failure was lost.
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    monkeypatch.setattr(LaunchErrors, "RING", 4)
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring"), timeout_s=0.3)(ag_gemm_kernel)
    lw = LoopbackWorld(fk, WORLD, 0, device="cpu", buffers=2)
    g = torch.Generator().manual_seed(1)
    shards, b = [torch.randn(ROWS, K, generator=g) for _ in range(WORLD)], torch.randn(K, N, generator=g)
    assert _loopback_launch(lw, shards, b) < 1e-4 and _loopback_launch(lw, shards, b) < 1e-4  # epochs 1, 2: both contexts made
    (odd,), (even,) = lw.loops.values(), lw.twins.values()
    for loop in (odd, even):
        loop.errors.ops = _Device(loop.errors.ops)
    _loopback_launch(lw, shards, b, withhold=frozenset({3}))  # epoch 3: chunk 1 of rank 1 never comes; returns
    for _ in range(4):  # epochs 4..7, pending behind it (the device has not finished them)
        _loopback_launch(lw, shards, b)
    assert [e for e, _ in odd.errors.pending] == [3, 5, 7] and [e for e, _ in even.errors.pending] == [4, 6]
    for loop in (odd, even):
        loop.errors.ops.release()
    with pytest.raises(SyncopyTimeout) as info:
        lw.synchronize()
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (0, (1, 1), 3)


def test_a_cpu_worlds_synchronize_waits_for_its_streams_within_a_bound():
    stream, never = streamops.HostStream(1.0, name="syncopy-loopback-stream"), threading.Event()
    stream.put(never.wait, always=True)  # an operation that never ends
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"^syncopy-loopback-stream: its operations still ran 0.2s after synchronize\(\) began "
                                          r"waiting for them, though each of its waits gives up after 1s; find what blocks that stream$"):
        stream.drain(0.2)
    assert time.monotonic() - t0 < 5
    never.set()
    stream.drain(5.0)
    stream.close()
