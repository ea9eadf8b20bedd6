"""A traced launch's record: when each tile started, how many chunks had landed, per rank."""
from __future__ import annotations


import torch

from syncopy.runtime.context import Context, Trace
from syncopy.runtime.order import slot_tiles


class Tracing:
    """How a traced launch records its tiles (FusedKernel mixes this in)."""

    def _new_trace(self, ctx: Context, epoch: int, n_tiles: int) -> tuple[Trace | None, torch.Tensor]:
        """This launch's Trace (None without trace=True) and the buffer its tiles record starts in."""
        trace = None
        if self.trace:
            trace = Trace(ctx.plan.rank, epoch, {g: ctx.plan.bounds(g) for g in range(ctx.n_chunks)}, total_chunks=ctx.n_chunks,
                          producer=self.producer, started_at=ctx.t0_wall,
                          planned=ctx.resolution.describe() if ctx.resolution is not None else "")
        ctx.trace = trace
        if trace is not None:
            return trace, torch.zeros(2 * n_tiles, dtype=torch.int32, device=ctx.buffer.device)
        return None, ctx.no_trace

    def _finish_trace(self, trace: Trace, trace_buf: torch.Tensor, order: torch.Tensor, ranges: list, exec_order: list,
                      kernel_s: tuple[float, float], persistent: bool = False) -> None:
        """Tile starts from the kernel's records (slot -> tile through the order table), then publish."""
        n_tiles = len(ranges)
        flat = trace_buf.tolist()
        by_slot = list(range(n_tiles)) if persistent else slot_tiles(order, n_tiles)
        trace.tile_ranges = ranges
        trace.tile_order = exec_order
        trace.tile_starts = sorted(
            ((by_slot[s], flat[2 * s] - 1, flat[2 * s + 1]) for s in range(n_tiles) if flat[2 * s] > 0), key=lambda x: x[1]
        )
        trace.kernel_s = kernel_s
        self.last_trace = trace
