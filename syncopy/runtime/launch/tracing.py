"""A traced launch's record: when each tile started, how many chunks had landed, per rank."""
from __future__ import annotations

import torch

import syncopy.device as device
from syncopy.runtime.launch.order import slot_tiles
from syncopy.runtime.state.context import Context
from syncopy.runtime.trace.records import TRACE_WORDS, Trace

CLOCK_WRAP = 1 << 31  # the kernel's clocks are microseconds modulo 2^31 (device.trace_clocks)


#: Launches a trace file keeps (the latest ones): a long job's file stays a size a viewer opens.
TRACED_LAUNCHES = 32


class Tracer:
    """How an operator's traced launches record their tiles: `op` is the operator (api.FusedKernel),
    whose `trace` turns it on and whose `last_trace` and `traced_launches` receive the records."""

    def __init__(self, op):
        self.op = op

    def write(self, group) -> None:
        """`trace="run.json"`: rank 0 gathers every rank's trace of this launch over syncopy's control
        group (bounded by timeout_s) and rewrites the file with the latest launches."""
        import torch.distributed as dist

        from syncopy.runtime.trace import chrome_trace
        from syncopy.runtime.transport.backends import control

        op = self.op
        cg = control.control_group(group, op.timeout_s)
        first = dist.get_global_rank(cg, 0)
        gathered = [None] * dist.get_world_size(cg) if dist.get_rank() == first else None
        dist.gather_object(op.last_trace, gathered, dst=first, group=cg)
        if gathered is not None:
            op.traced_launches = [*op.traced_launches, gathered][-TRACED_LAUNCHES:]
            chrome_trace.write(op.trace_file, op.traced_launches)

    def start(self, ctx: Context, epoch: int, n_tiles: int) -> tuple[Trace | None, torch.Tensor]:
        """This launch's Trace (None without trace=True) and the buffer its tiles record starts in."""
        trace, op = None, self.op
        if op.trace:
            trace = Trace(ctx.plan.rank, epoch, {g: ctx.plan.bounds(g) for g in range(ctx.n_chunks)}, total_chunks=ctx.n_chunks,
                          producer=op.producer, started_at=ctx.t0_wall, t0_perf=ctx.t0, kernel=op.local.fn.__name__,
                          planned=ctx.resolution.describe() if ctx.resolution is not None else "")
        ctx.trace = trace
        if trace is not None:
            return trace, torch.zeros(TRACE_WORDS * n_tiles, dtype=torch.int32, device=ctx.buffer.device)
        return None, ctx.no_trace

    def finish(self, trace: Trace, trace_buf: torch.Tensor, order: torch.Tensor, ranges: list, exec_order: list,
               kernel_s: tuple[float, float], persistent: bool = False) -> None:
        """Tile starts from the kernel's records (slot -> tile through the order table), then publish."""
        n_tiles, w = len(ranges), TRACE_WORDS
        flat = trace_buf.tolist()
        by_slot = list(range(n_tiles)) if persistent else slot_tiles(order, n_tiles)
        trace.tile_ranges = ranges
        trace.tile_order = exec_order
        ran = [s for s in range(n_tiles) if flat[w * s] > 0]
        trace.tile_starts = sorted(((by_slot[s], flat[w * s] - 1, flat[w * s + 1]) for s in ran), key=lambda x: x[1])
        trace.kernel_s = kernel_s
        trace.tile_times = _tile_times({by_slot[s]: (flat[w * s + 2], flat[w * s + 3]) for s in ran}, trace, kernel_s)
        self.op.last_trace = trace


def _tile_times(clocks: dict, trace: Trace, kernel_s: tuple[float, float]) -> dict:
    """tile -> (began waiting, started), seconds from the launch start, from the kernel's clock words.

    Interpreted kernels read the host's perf_counter, the clock of the launch start and of every
    landing, so their times are taken as they are. Compiled kernels read %globaltimer, whose origin
    the host does not know: their times are placed so that the first tile starts with the kernel's
    enqueue (an approximation of the offset only; the differences between tiles are the GPU's), and
    their wait begins are unknown (None)."""
    if not clocks:
        return {}
    if device.INTERPRETED:
        t0 = int(trace.t0_perf * 1e6) % CLOCK_WRAP  # the launch start, in the kernel's microseconds
        return {tile: (((b - t0) % CLOCK_WRAP) / 1e6 if b else None, ((s - t0) % CLOCK_WRAP) / 1e6) for tile, (b, s) in clocks.items()}
    first = min(s for _, s in clocks.values())
    trace.device_clock = True
    return {tile: (None, kernel_s[0] + ((s - first) % CLOCK_WRAP) / 1e6) for tile, (_, s) in clocks.items()}

