"""The cost model: seconds for a tile, a kernel and a reduction, from a hardware profile.

Compute is a roofline per tile. One SM runs one tile at a time at 1/sm_count of the device's
sustained FLOP/s. Memory traffic is counted once per operand per kernel (L2 serves the reuse
between tiles) and shared evenly by the kernel's tiles; tiles that start together share the
device's bandwidth, so a batch of n <= SMs tiles takes at least n tiles' bytes / bandwidth. A tile
costs the larger of the two, plus a fixed per-program overhead. A kernel of n tiles on s SMs runs
in ceil(n / s) waves: the wave quantisation that makes small per-chunk GEMMs wasteful; and each
small kernel reads the whole weight again.

Communication is alpha-beta per message on the profile's link (`hardware.Link.seconds`); the
simulator decides which messages share a port or a ring link.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from syncopy.planner.hardware import HardwareProfile
from syncopy.planner.workloads import Workload


@dataclass(frozen=True)
class ComputeCost:
    """Tile geometry and timing of one workload's kernel on one profile and SM budget."""

    workload: Workload
    tile_m: int  # rows per tile
    col_tiles: int  # tiles across the columns of the output
    sms: int  # SMs the kernel runs on
    flop_s: float  # FLOP time of one tile on one SM
    memory_bandwidth: float  # bytes/s the kernel's tiles share
    overhead_s: float  # fixed cost per program
    sync_s: float  # extra per tile in the fused kernel (wait check / notify)
    scale: float  # >1 when ranks share the machine's cores

    def row_tiles(self, rows: int) -> int:
        """Row tiles of a kernel over `rows` rows (a ragged last tile costs a whole tile)."""
        return math.ceil(rows / self.tile_m)

    def tile_s(self, rows: int, together: int) -> float:
        """One tile of a kernel over `rows` rows when `together` tiles start at once."""
        tile_bytes = self.workload.kernel_bytes(rows) / (self.row_tiles(rows) * self.col_tiles)
        memory_s = tile_bytes * min(together, self.sms) / self.memory_bandwidth
        return (max(self.flop_s, memory_s) + self.overhead_s) * self.scale

    def kernel_s(self, rows: int) -> float:
        """A kernel of its own over `rows` rows, launch not included."""
        tiles = self.row_tiles(rows) * self.col_tiles
        return math.ceil(tiles / self.sms) * self.tile_s(rows, tiles)


def compute_cost(workload: Workload, profile: HardwareProfile, world: int, sms: int) -> ComputeCost:
    """The cost of `workload`'s tiles on `sms` SMs of `profile`, with `world` ranks on the machine."""
    c = profile.compute
    tile_m, tile_n = c.tile
    peak = profile.gemm_flops(workload.dtype) if workload.kind in ("gemm", "attention") else profile.vector_flops()
    # More ranks than the machine runs at once (CPU cores) share the cores' time.
    scale = max(1.0, world / c.concurrent_ranks) if c.concurrent_ranks else 1.0
    return ComputeCost(
        workload=workload,
        tile_m=tile_m,
        col_tiles=workload.col_tiles(tile_n),
        sms=sms,
        flop_s=workload.tile_flops(tile_m, tile_n) / (peak * c.efficiency / c.sm_count),
        memory_bandwidth=c.memory_bandwidth,
        overhead_s=c.tile_overhead_s,
        sync_s=profile.overheads.tile_sync_s * scale,
        scale=scale,
    )


def add_seconds(profile: HardwareProfile, nbytes: float) -> float:
    """Summing two partial chunks of `nbytes`: read both, write one, at memory bandwidth."""
    return 3.0 * nbytes / profile.compute.memory_bandwidth
