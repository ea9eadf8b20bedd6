"""The cost model: seconds for a tile, a kernel, a message and a reduction, from a profile.

Compute is a roofline per tile. One SM runs one tile at a time at 1/sm_count of the device's
sustained FLOP/s and memory bandwidth; a tile costs the larger of its FLOP time and its share of
the kernel's memory traffic, plus a fixed per-program overhead. A kernel of n tiles on s SMs runs
in ceil(n / s) waves: the wave quantisation that makes small per-chunk GEMMs wasteful.

Communication is alpha-beta per message on the profile's link (`Link.seconds`); the simulator
decides which messages share a port or a ring link.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from syncopy.planner.hardware import HardwareProfile
from syncopy.planner.workloads import Workload


@dataclass(frozen=True)
class ComputeCost:
    """Tile geometry and timing of one workload on one profile."""

    tile_m: int  # rows per tile
    col_tiles: int  # tiles across the columns of the output
    tile_s: float  # one tile of the full-size kernel on one SM
    sync_s: float  # extra per tile in the fused kernel (wait check / notify)

    def row_tiles(self, rows: int) -> int:
        """Row tiles of a kernel over `rows` rows (a ragged last tile costs a whole tile)."""
        return math.ceil(rows / self.tile_m)


def compute_cost(workload: Workload, profile: HardwareProfile, world: int) -> ComputeCost:
    """The per-tile cost of `workload`'s kernel over all its M rows."""
    tile_m, tile_n = profile.compute.tile
    return ComputeCost(
        tile_m=tile_m,
        col_tiles=workload.col_tiles(tile_n),
        tile_s=tile_seconds(workload, profile, world, workload.m),
        sync_s=profile.overheads.tile_sync_s * _sharing(profile, world),
    )


def tile_seconds(workload: Workload, profile: HardwareProfile, world: int, rows: int) -> float:
    """One tile of a kernel over `rows` rows, on one SM."""
    c = profile.compute
    tile_m, tile_n = c.tile
    tiles = math.ceil(rows / tile_m) * workload.col_tiles(tile_n)
    peak = profile.gemm_flops(workload.dtype) if workload.kind == "gemm" else profile.vector_flops()
    flop_s = workload.tile_flops(tile_m, tile_n) / (peak * c.efficiency / c.sm_count)
    memory_s = workload.kernel_bytes(rows) / tiles / (c.memory_bandwidth / c.sm_count)
    return (max(flop_s, memory_s) + c.tile_overhead_s) * _sharing(profile, world)


def kernel_seconds(n_tiles: int, tile_s: float, sms: int) -> float:
    """A kernel of `n_tiles` equal tiles on `sms` SMs, launch not included."""
    return math.ceil(n_tiles / sms) * tile_s


def add_seconds(profile: HardwareProfile, nbytes: float) -> float:
    """Summing two partial chunks of `nbytes`: read both, write one, at memory bandwidth."""
    return 3.0 * nbytes / profile.compute.memory_bandwidth


def _sharing(profile: HardwareProfile, world: int) -> float:
    # More ranks than the machine can run at once (CPU cores) share the cores' time.
    concurrent = profile.compute.concurrent_ranks
    return max(1.0, world / concurrent) if concurrent else 1.0
