"""Stream-ordered memory operations, one driver call each: copy, 32-bit write, 32-bit wait, events.

    side stream   [wait flag >= e]---[copy chunk]---[write flag = e]
                  cuStreamWaitValue32  cuMemcpyAsync  cuStreamWriteValue32 (memory barrier first)

Why these and not torch ops:
- A flag raised by a *copy* behind its chunk relies on the copy engine finishing one copy's writes
  before the next copy's, which CUDA does not document for an observer that polls concurrently (a
  kernel on another stream, a peer over NVLink). `cuStreamWriteValue32` is the documented
  primitive: without CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER it is preceded by a memory barrier
  that makes the stream's earlier writes visible first.
- `cuStreamWaitValue32` makes a stream wait for a word a kernel releases: a copy triggered by a
  flag, with no host thread polling and no SM spinning (producer overlap on the device).
- Host time. A torch `copy_` of a view costs several microseconds of dispatch; these calls take
  raw pointers (made once per context) and cost about one microsecond through ctypes.

The driver is reached through ctypes on libcuda, which every CUDA machine has (torch links it):
no new dependency, and the same code runs under torch 2.11 and 2.13. `HostOps` is the same
interface between CPU buffers for tests under the Triton interpreter: a stream is a worker thread
that runs its operations in order (or None: done when enqueued, like the compute "stream" of an
interpreted launch); a wait that is not satisfied within its deadline records a `StreamTimeout`
on the stream instead of hanging.
"""
from __future__ import annotations

import contextlib
import ctypes
import queue
import threading
import time
import weakref

import torch

from syncopy.errors import LaunchError
from syncopy.runtime.where import switch_threads_often

CU_STREAM_WAIT_VALUE_GEQ = 0  # (int32)(*addr - value) >= 0: a cyclic comparison, epochs may wrap
CU_STREAM_MEM_OP_WRITE_VALUE_32 = 2
MAX_BATCH = 255  # cuStreamBatchMemOp takes fewer than 256 operations a call


class _WriteValueOp(ctypes.Structure):
    """CUstreamBatchMemOpParams as a write-value (cuda.h: a 48-byte union; `value` is the union of
    cuuint32_t and cuuint64_t, little-endian, so its low half is the 32-bit value)."""

    _fields_ = [("operation", ctypes.c_uint), ("address", ctypes.c_uint64), ("value", ctypes.c_uint64),
                ("flags", ctypes.c_uint), ("alias", ctypes.c_uint64), ("pad", ctypes.c_uint64)]


assert ctypes.sizeof(_WriteValueOp) == 48
CU_EVENT_DISABLE_TIMING = 2
CU_STREAM_CAPTURE_MODE_GLOBAL = 0  # CUstreamCaptureMode: a thread's default
CU_STREAM_CAPTURE_MODE_RELAXED = 2  # the thread's unsafe calls (cuEventQuery) never invalidate another thread's capture
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_NOT_SUPPORTED = 801


def ptr(t: torch.Tensor) -> int:
    """The address of a tensor's first element (host or device: CUDA's addressing is unified)."""
    return t.data_ptr()


class CudaOps:
    """The driver calls, bound once per process (see module doc)."""

    device_type = "cuda"

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise LaunchError(f"cannot load the CUDA driver (libcuda.so.1: {exc}); stream operations need a CUDA machine") from None
        u64, u32, vp = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p
        self._memcpy = _bind(lib, ("cuMemcpyAsync",), (u64, u64, ctypes.c_size_t, vp))
        self._write = _bind(lib, ("cuStreamWriteValue32_v2", "cuStreamWriteValue32"), (vp, u64, u32, ctypes.c_uint))
        self._wait = _bind(lib, ("cuStreamWaitValue32_v2", "cuStreamWaitValue32"), (vp, u64, u32, ctypes.c_uint))
        self._memset = _bind(lib, ("cuMemsetD32Async",), (u64, ctypes.c_uint, ctypes.c_size_t, vp))
        self._batch = _bind(lib, ("cuStreamBatchMemOp_v2", "cuStreamBatchMemOp"), (vp, ctypes.c_uint, ctypes.c_void_p, ctypes.c_uint),
                            required=False)
        self._event_create = _bind(lib, ("cuEventCreate",), (ctypes.POINTER(vp), ctypes.c_uint))
        self._event_record = _bind(lib, ("cuEventRecord",), (vp, vp))
        self._event_query = _bind(lib, ("cuEventQuery",), (vp,))
        self._event_destroy = _bind(lib, ("cuEventDestroy_v2", "cuEventDestroy"), (vp,))
        self._stream_wait_event = _bind(lib, ("cuStreamWaitEvent",), (vp, vp, ctypes.c_uint))
        self._exchange_capture_mode = _bind(lib, ("cuThreadExchangeStreamCaptureMode",), (ctypes.POINTER(ctypes.c_int),))
        self._error_string = lib.cuGetErrorString
        self._error_string.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))

    @staticmethod
    def handle(stream) -> int:
        """The CUstream of a torch stream (0: the legacy default stream)."""
        return stream.cuda_stream

    # The hot calls test the result inline: a launch makes dozens of them.
    def copy(self, dst: int, src: int, n: int, stream: int) -> None:
        rc = self._memcpy(dst, src, n, stream)
        if rc:
            self._check(rc, "cuMemcpyAsync")

    def write32(self, addr: int, value: int, stream: int) -> None:
        """After everything before it on `stream` (a memory barrier first), store `value` at `addr`."""
        rc = self._write(stream, addr, value & 0xFFFFFFFF, 0)
        if rc:
            self._check(rc, "cuStreamWriteValue32")

    def batch(self, writes: list[tuple[int, int | None]]) -> "WriteBatch":
        """Made once: write-values to these addresses, each of its value or (None) of the value
        passed to `write_batch` at each launch."""
        return WriteBatch(writes, self._batch is not None and len(writes) <= MAX_BATCH)

    def write_batch(self, batch: "WriteBatch", value: int, stream: int) -> None:
        """The batch's writes, in order, each as `write32` would do it, in one driver call
        (cuStreamBatchMemOp), or one call each where the driver lacks it."""
        if batch.params is None:
            for addr, v in batch.writes:
                self.write32(addr, value if v is None else v, stream)
            return
        word = value & 0xFFFFFFFF
        for i in batch.variable:
            batch.params[i].value = word
        rc = self._batch(stream, len(batch.writes), ctypes.addressof(batch.params), 0)
        if rc == CUDA_ERROR_NOT_SUPPORTED:  # nothing was enqueued: one call each from now on
            self._batch, batch.params = None, None
            self.write_batch(batch, value, stream)
        elif rc:
            self._check(rc, "cuStreamBatchMemOp")

    def wait32(self, addr: int, value: int, stream: int) -> None:
        """`stream` goes on once the int32 at `addr` is >= `value` (cyclically)."""
        self._check(self._wait(stream, addr, value & 0xFFFFFFFF, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32")

    def zero32(self, addr: int, count: int, stream: int) -> None:
        self._check(self._memset(addr, 0, count, stream), "cuMemsetD32Async")

    def event(self) -> int:
        ev = ctypes.c_void_p()
        self._check(self._event_create(ctypes.byref(ev), CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        return ev.value

    def destroy(self, event: int) -> None:
        """Free an event made by `event()`. One still pending is freed once it completes (the
        driver's rule), so a context can let its events go while its last launch still runs."""
        self._check(self._event_destroy(event), "cuEventDestroy")

    def record(self, event: int, stream: int) -> None:
        self._check(self._event_record(event, stream), "cuEventRecord")

    def done(self, event: int) -> bool:
        """Has the work before the event's record completed? Never blocks."""
        rc = self._event_query(event)
        if rc == CUDA_ERROR_NOT_READY:
            return False
        self._check(rc, "cuEventQuery")
        return True

    def wait_event(self, stream: int, event: int) -> None:
        self._check(self._stream_wait_event(stream, event, 0), "cuStreamWaitEvent")

    def exchange_capture_mode(self, mode: int) -> int:
        """Set the calling thread's stream-capture mode (CU_STREAM_CAPTURE_MODE_*); returns the one
        it had. A thread in the default global mode that queries an event while another thread
        captures invalidates that capture; the watchdog relaxes its own (runtime/streams/watchdog.py)."""
        value = ctypes.c_int(mode)
        self._check(self._exchange_capture_mode(ctypes.byref(value)), "cuThreadExchangeStreamCaptureMode")
        return value.value

    def _check(self, rc: int, what: str) -> None:
        if rc:
            text = ctypes.c_char_p()
            self._error_string(rc, ctypes.byref(text))
            raise LaunchError(f"{what} failed with CUDA error {rc} ({(text.value or b'?').decode()})")


class WriteBatch:
    """Write-values made once per context (see CudaOps.batch): the driver's parameter array,
    reused at every launch with only the launch's value changed (the driver reads it during the call)."""

    def __init__(self, writes: list[tuple[int, int | None]], native: bool):
        self.writes = list(writes)
        self.variable = [i for i, (_, v) in enumerate(self.writes) if v is None]
        self.params = None
        if native:
            self.params = (_WriteValueOp * len(self.writes))()
            for op, (addr, v) in zip(self.params, self.writes):
                op.operation, op.address, op.value = CU_STREAM_MEM_OP_WRITE_VALUE_32, addr, (v or 0) & 0xFFFFFFFF

    def assign(self, index: int, value: int) -> None:
        """Write `index` writes `value` from the next `write_batch` on (a value of this launch that is
        not the batch's one, e.g. a producer's per-chunk targets)."""
        addr, _ = self.writes[index]
        self.writes[index] = (addr, value)
        if self.params is not None:
            self.params[index].value = value & 0xFFFFFFFF


def _bind(lib, names: tuple[str, ...], argtypes: tuple, required: bool = True):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            return fn
    if not required:
        return None
    raise LaunchError(f"the CUDA driver has none of {', '.join(names)}; update the driver (stream memory operations need CUDA 11.7+)")


class StreamTimeout(RuntimeError):
    """A HostOps wait whose word never reached its value within the stream's deadline."""

    def __init__(self, addr: int, value: int, seen: int):
        super().__init__(f"a stream waited for the word at {addr:#x} to reach {value} but it stayed at {seen}")
        self.addr, self.value, self.seen = addr, value, seen


class HostStream:
    """A CPU stand-in for a CUDA stream: a worker thread runs the enqueued operations in order."""

    _STOP = object()

    def __init__(self, deadline_s: float = 60.0, name: str = "syncopy-stream"):
        switch_threads_often()  # its waits must pass while an interpreted kernel runs on another thread
        self.deadline_s = deadline_s
        self.errors: list[BaseException] = []
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        # The worker holds the queue and the error list, not the stream: a stream nobody holds any
        # more (an operator let go without release()) is collected, and its thread ends then too.
        self._thread = threading.Thread(target=HostStream._run, args=(self._work, self.errors), name=name, daemon=True)
        self._thread.start()
        self._stop = weakref.finalize(self, self._work.put, (HostStream._STOP, True))

    def put(self, op, always: bool = False) -> None:
        """Enqueue `op`; after a failure the stream runs only `always` operations (events: no hang)."""
        if not self._stop.alive:  # closed (a finalizer runs once)
            raise RuntimeError(f"{self._thread.name}: the stream was closed")
        self._work.put((op, always))

    def close(self) -> None:
        """The worker thread ends once what was enqueued before has run (its owner let it go)."""
        self._stop()

    def synchronize(self, timeout_s: float | None = None) -> bool:
        """Wait until everything enqueued so far ran (at most `timeout_s`); False if it did not."""
        done = threading.Event()
        self.put(done.set, always=True)
        return done.wait(timeout_s)

    def drain(self, bound_s: float) -> None:
        """`synchronize`, bounded (a world's synchronize() never blocks for good): a LaunchError naming
        the stream if what was enqueued has not all run within `bound_s`."""
        if not self.synchronize(bound_s):
            raise LaunchError(f"{self._thread.name}: its operations still ran {bound_s:g}s after synchronize() began waiting for "
                              f"them, though each of its waits gives up after {self.deadline_s:g}s; find what blocks that stream")

    @staticmethod
    def _run(work: queue.SimpleQueue, errors: list) -> None:
        while True:
            op, always = work.get()
            if op is HostStream._STOP:
                return
            if always or not errors:
                try:
                    op()
                except BaseException as exc:  # surfaced by whoever checks the stream
                    errors.append(exc)
            del op  # nothing of the last operation stays referenced while the worker waits


class HostOps:
    """CudaOps' interface between CPU buffers (see module doc): a stream is a HostStream, or None
    for operations done when enqueued; addresses are host addresses."""

    device_type = "cpu"

    def __init__(self, deadline_s: float = 60.0):
        self.deadline_s = deadline_s  # of a wait done when enqueued (a HostStream's own deadline otherwise)

    @staticmethod
    def handle(stream):
        return stream if isinstance(stream, HostStream) else None

    def _on(self, stream, op, always: bool = False) -> None:
        if stream is None:
            op()
        else:
            stream.put(op, always)

    def copy(self, dst: int, src: int, n: int, stream) -> None:
        self._on(stream, lambda: ctypes.memmove(dst, src, n))

    def write32(self, addr: int, value: int, stream) -> None:
        # x86 keeps stores in order, so the copies before this store are visible before it.
        self._on(stream, lambda: setattr(ctypes.c_int32.from_address(addr), "value", wrap32(value)))

    def batch(self, writes: list[tuple[int, int | None]]) -> WriteBatch:
        return WriteBatch(writes, native=False)

    def write_batch(self, batch: WriteBatch, value: int, stream) -> None:
        for addr, v in batch.writes:
            self.write32(addr, value if v is None else v, stream)

    def wait32(self, addr: int, value: int, stream) -> None:
        word = ctypes.c_int32.from_address(addr)
        deadline_s = stream.deadline_s if stream is not None else self.deadline_s

        def wait():
            end = time.monotonic() + deadline_s
            while wrap32(word.value - value) < 0:
                if time.monotonic() > end:
                    raise StreamTimeout(addr, value, word.value)
                time.sleep(20e-6)

        self._on(stream, wait)

    def zero32(self, addr: int, count: int, stream) -> None:
        self._on(stream, lambda: ctypes.memset(addr, 0, 4 * count))

    def delay(self, seconds: float, stream) -> None:
        """The stream pauses (an emulated link's time on the wire; a CPU graph replays it)."""
        self._on(stream, lambda: time.sleep(seconds))

    def event(self) -> threading.Event:
        return threading.Event()

    def destroy(self, event: threading.Event) -> None:
        pass  # garbage-collected

    def record(self, event: threading.Event, stream) -> None:
        event.clear()
        self._on(stream, event.set, always=True)

    def done(self, event: threading.Event) -> bool:
        return event.is_set()

    def wait_event(self, stream, event: threading.Event) -> None:
        if stream is None:
            event.wait()
        else:
            stream.put(event.wait, always=True)

    _capture_modes = threading.local()  # per thread, as the driver keeps it

    def exchange_capture_mode(self, mode: int) -> int:
        """CudaOps.exchange_capture_mode's bookkeeping: the calling thread's mode is kept and
        returned, and changes nothing else (no CPU stream is captured by the driver)."""
        previous = getattr(self._capture_modes, "mode", CU_STREAM_CAPTURE_MODE_GLOBAL)
        self._capture_modes.mode = mode
        return previous


def free_with(owner, ops, events: list) -> weakref.finalize:
    """Free `events` (made by `ops.event()`) once `owner` is collected, or at once by calling what
    this returns (at most once either way): a context's events go with it, released or not. Not at
    interpreter exit, where the driver may already be gone."""
    free = weakref.finalize(owner, _destroy_events, ops, events)
    free.atexit = False
    return free


def _destroy_events(ops, events: list) -> None:
    for event in events:
        # A driver that refuses (no context current on a collecting thread, or the context torn
        # down) leaves the event to the context's own teardown: nothing else can be done here.
        with contextlib.suppress(LaunchError):
            ops.destroy(event)
    events.clear()


def wrap32(x: int) -> int:
    """`x` as an int32 word holds it (two's complement: what device additions and epochs wrap to)."""
    return (x + 2**31) % 2**32 - 2**31


_cuda_ops: CudaOps | None = None


def cuda_ops() -> CudaOps:
    """The process's CudaOps (the driver is bound once)."""
    global _cuda_ops
    if _cuda_ops is None:
        _cuda_ops = CudaOps()
    return _cuda_ops
