"""Where a warm launch of a pipeline runs its two operators: in order on the caller's stream, or the
reader beside the writer (a side stream on GPUs, a side thread on CPU ranks), and why."""
from __future__ import annotations

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


def place(*, cuda: bool, interpreted: bool, warm: bool, chain: bool, reader_ctas: int, writer_ctas: int, sms: int,
          reserved: int, reader_first_ok: bool, threads: bool = False) -> Placement:
    """The rule of the module doc: the reader beside the writer only where its waiting tiles can never
    hold every SM the writer's tiles (or an SM transport's kernels) still need; on CPU ranks, beside it
    on a side thread where the interpreter can run two kernels at once (`threads`)."""
    if not warm:
        return Placement(False, False, f"{IN_ORDER}: the first launch of these shapes compiles, probes and meets the peers")
    if not chain:
        return Placement(False, False, f"{IN_ORDER}: only a pipeline of two linked operators runs them side by side so far")
    if not cuda and interpreted and threads:
        return Placement(True, True, SIDE_THREAD)
    if not cuda or interpreted:
        return Placement(False, False, f"{IN_ORDER}: the interpreter runs one kernel at a time per process")
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
