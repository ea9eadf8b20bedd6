"""The watchdog: the errors of launches that returned before their kernel ran, surfaced without a
call from the user's thread (after ProcessGroupNCCL's watchdog and its async error handling).

A warm launch on a GPU enqueues and returns; a wait that ran out in its kernel is read from the
launch's error ring (runtime/streams/error_ring.py) at the operator's next launch or `synchronize()`. A program
that launches once and then only reads the output would never hear of it, and would use a result
some of whose rows never arrived. So one daemon thread per process looks at every ring's finished
launches every `SYNCOPY_WATCHDOG_S` seconds (default 1; event queries, never a wait) and, for a
failure the launching thread has not raised by the next look:

    SYNCOPY_ASYNC_ERRORS=warn    (default) one line on stderr naming rank, chunk and epoch; the error
                                 still raises at the next launch or synchronize()
    SYNCOPY_ASYNC_ERRORS=abort   that line, then the process ends (os.abort(), as NCCL's teardown):
                                 for jobs whose launcher restarts failed ranks
    SYNCOPY_ASYNC_ERRORS=off     no thread

`configure(mode=..., interval_s=...)` sets the same from Python. On CPU ranks (gloo) a launch
raises its own errors as it returns, so the watchdog has nothing to add there; the CPU thread
world defers them as a GPU does.

CUDA graph capture. A thread in CUDA's default (global) capture mode that calls cuEventQuery while
another thread captures a stream in global mode (torch.cuda.graph's default) invalidates that
capture: the user's graph would fail for a query made on our thread. So before its first event
query on a CUDA ring the watchdog thread relaxes its own capture mode, once
(cuThreadExchangeStreamCaptureMode, CU_STREAM_CAPTURE_MODE_RELAXED), and leaves the user's threads
as they are. This is PyTorch's fix for ProcessGroupNCCL's watchdog, whose event queries broke
captures the same way (pytorch/pytorch#105182, then #148594: the querying thread's mode is changed,
not the capturing one's).
"""
from __future__ import annotations

import os
import sys
import threading
import time
import weakref

from syncopy.errors import LaunchError
from syncopy.runtime.streams.streamops import CU_STREAM_CAPTURE_MODE_RELAXED

MODES = ("warn", "abort", "off")

_lock = threading.Lock()
_rings: "weakref.WeakSet" = weakref.WeakSet()
_seen: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # ring -> the failed epoch seen at the last look
_reported: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # ring -> epochs already reported
_thread: threading.Thread | None = None
_local = threading.local()  # per thread: `relaxed`, its capture mode was relaxed (_relax_capture)
_mode: str | None = None
_interval_s: float | None = None


def mode() -> str:
    if _mode is not None:
        return _mode
    value = os.environ.get("SYNCOPY_ASYNC_ERRORS", "warn").strip().lower() or "warn"
    if value not in MODES:
        raise LaunchError(f"SYNCOPY_ASYNC_ERRORS={value!r}: expected one of {', '.join(MODES)}")
    return value


def interval_s() -> float:
    if _interval_s is not None:
        return _interval_s
    value = os.environ.get("SYNCOPY_WATCHDOG_S", "1")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise LaunchError(f"SYNCOPY_WATCHDOG_S={value!r}: expected a number of seconds > 0")
    return seconds


def configure(mode: str | None = None, interval_s: float | None = None) -> None:
    """Set the watchdog's mode ("warn", "abort", "off") and how often it looks (seconds)."""
    global _mode, _interval_s
    if mode is not None and mode not in MODES:
        raise LaunchError(f"watchdog mode {mode!r}: expected one of {', '.join(MODES)}")
    if interval_s is not None and not interval_s > 0:
        raise LaunchError(f"watchdog interval {interval_s!r}: expected seconds > 0")
    _mode, _interval_s = (mode if mode is not None else _mode), (interval_s if interval_s is not None else _interval_s)
    if _mode != "off" and _rings:
        _start()


def unwatch(ring) -> None:
    """Stop looking at `ring` (its context was let go: runtime/launch/contexts.py)."""
    with _lock:
        _rings.discard(ring)
        _seen.pop(ring, None)
        _reported.pop(ring, None)


def watch(ring) -> None:
    """Look at `ring` (an ErrorRing) from now on, for as long as it lives. The settings are read here,
    on the launching thread, so that a bad one is this launch's one-line error, not a dead watchdog."""
    current = mode()
    interval_s()
    with _lock:
        _rings.add(ring)
    if current != "off":
        _start()


def _start() -> None:
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="syncopy-watchdog", daemon=True)
            _thread.start()


def _run() -> None:
    while True:
        try:
            time.sleep(interval_s())
            if mode() != "off":
                look(relax=True)
        except Exception as exc:  # the watchdog must outlive whatever one ring (or a changed setting) does
            sys.stderr.write(f"syncopy watchdog: {type(exc).__name__}: {exc}\n")
            time.sleep(1.0)


def look(relax: bool = False) -> list[str]:
    """One look at every ring: report each failure that was already there at the last look and is
    still unraised; returns the lines written. `relax`: the looking thread is the watchdog's, whose
    capture mode is relaxed before its first query on a CUDA ring (module doc); a caller's own
    thread is left as it is."""
    lines = []
    with _lock:
        rings = list(_rings)
    for ring in rings:
        if relax:
            _relax_capture(ring.ops)
        found = ring.first_failure()
        if found is None:
            _seen.pop(ring, None)
            continue
        epoch, error = found
        if _seen.get(ring) != epoch:
            _seen[ring] = epoch  # the launching thread may be about to raise it itself: next look
            continue
        done = _reported.setdefault(ring, set())
        if epoch in done:
            continue
        done.add(epoch)
        lines.append(_report(error))
    return lines


def _relax_capture(ops) -> None:
    """This thread's stream-capture mode relaxed, once, before it queries a CUDA ring's events."""
    if ops.device_type != "cuda" or getattr(_local, "relaxed", False):
        return
    ops.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED)  # a failure raises before any query: tried again next look
    _local.relaxed = True


def _report(error: BaseException) -> str:
    action = ("this process ends now (SYNCOPY_ASYNC_ERRORS=abort)" if mode() == "abort" else
              "it raises at that operator's next launch or synchronize(); SYNCOPY_ASYNC_ERRORS=abort ends the process instead")
    line = f"syncopy watchdog: a launch that already returned failed: {error} ({action})"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    if mode() == "abort":
        os.abort()
    return line
