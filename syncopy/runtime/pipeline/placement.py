"""Where a warm launch of a pipeline runs its two operators: in order on the caller's stream, or the
reader beside the writer (a side stream on GPUs, a side thread on CPU ranks), and why.

With CUDA_DEVICE_MAX_CONNECTIONS=1 (streams/hardware_queues.py) every stream of the process feeds one
hardware queue, in enqueue order, so two streams no longer run side by side past a dependency:

    reader first   queue  [op 2 kernel: spins on h][op 2's copy of its result: waits for op 2][op 1 ...]
                          op 1 is behind a copy that waits for op 2, which waits for op 1: op 2's waits
                          run out, a SyncopyTimeout on every launch
    writer first   queue  [op 1 kernel][op 1's error words: wait for op 1][op 2 kernel]
                          correct, but op 2 starts after op 1 ended: no overlap

Each launch enqueues work behind its kernel (its error words' copy at least), so with one queue the
reader can never start before the writer ended, in either order: the operators run in order on the
caller's stream, `why` says so, and the process is told once (a warning), not left to find the
overlap gone."""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """Where a launch of the pipeline runs its operators (see the module doc, "Streams").

    side: the reader (op 2) runs on the pipeline's side stream, beside the writer (op 1) on the
    caller's; reader_first: the reader is enqueued before the writer; why: one line, the reason."""

    side: bool
    reader_first: bool
    why: str


IN_ORDER = "in order on the caller's stream"


SIDE_THREAD = ("op 2 on a side thread, started first, beside op 1 on the caller's thread (two interpreted kernels "
               "take turns under the GIL)")


SINGLE_QUEUE = (f"{IN_ORDER}: CUDA_DEVICE_MAX_CONNECTIONS=1 puts every stream in one hardware queue, where op 2 could start "
                "only after what op 1's launch enqueues behind its kernel (and, enqueued first, would hold op 1 back behind "
                "its own until its waits ran out); unset it, or raise it to 2 or more, to run op 2 beside op 1")


def place(*, cuda: bool, interpreted: bool, warm: bool, chain: bool, reader_ctas: int, writer_ctas: int, sms: int,
          reserved: int, reader_first_ok: bool, threads: bool = False, single_queue: bool = False) -> Placement:
    """The rule of the module doc: the reader beside the writer only where its waiting tiles can never
    hold every SM the writer's tiles (or an SM transport's kernels) still need; on CPU ranks, beside it
    on a side thread where the interpreter can run two kernels at once (`threads`); on GPUs, never
    with one hardware queue (`single_queue`: CUDA_DEVICE_MAX_CONNECTIONS=1, see the module doc)."""
    if not warm:
        return Placement(False, False, f"{IN_ORDER}: the first launch of these shapes compiles, probes and meets the peers")
    if not chain:
        return Placement(False, False, f"{IN_ORDER}: only a pipeline of two linked operators runs them side by side so far")
    if not cuda and interpreted and threads:
        return Placement(True, True, SIDE_THREAD)
    if not cuda or interpreted:
        return Placement(False, False, f"{IN_ORDER}: the interpreter runs one kernel at a time per process")
    if single_queue:
        _tell_single_queue()
        return Placement(False, False, SINGLE_QUEUE)
    limit = reader_side_limit(sms, reserved, writer_ctas)
    if reader_ctas > limit:
        # Fallback: the reader's spinning tiles could fill the GPU before the writer's last tiles start.
        return Placement(False, False, f"{IN_ORDER}: op 2 launches {reader_ctas} CTAs and at most {limit} may wait beside op 1 "
                                       f"on {sms} SMs ({reserved} kept for transfers); make it a persistent kernel of at most "
                                       f"{limit} programs to run it beside op 1")
    if reader_first_ok:
        return Placement(True, True, "op 2 on the side stream, enqueued first; op 1 on the caller's stream")
    return Placement(True, False, "op 2 on the side stream, enqueued after op 1; op 1 on the caller's stream")


def reader_side_limit(sms: int, reserved: int, writer_ctas: int) -> int:
    """The most CTAs the reader may launch beside the writer. Copy-engine transports (nothing
    reserved): all but one SM, so some SM holds no waiting reader tile and the writer's tiles always
    find room. SM transports (nccl keeps `reserved` SMs): writer and reader together within the SMs
    not reserved, as one fused kernel is held (occupancy.check_grid), so the transfers' kernels find theirs."""
    if reserved:
        return sms - reserved - writer_ctas
    return sms - 1


@functools.lru_cache(maxsize=None)
def _tell_single_queue() -> None:
    """Once per process: the overlap a pipeline exists for is gone, and why."""
    warnings.warn(f"syncopy pipeline: {SINGLE_QUEUE} (pipe.placement.why)", stacklevel=4)
