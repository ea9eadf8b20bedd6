"""The context of one fused operator: buffers, signal pad, tile orders, epoch. Allocated once per
(schedule, group, shard shape, dtype) and reused by every launch; nothing is reset between launches
because signals carry the epoch of the launch that raised them."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

from syncopy import device as dev
from syncopy.runtime.plan import RankPlan


@dataclass
class Trace:
    """What one launch did, as seen by one rank (times in seconds from the launch start)."""

    rank: int
    epoch: int
    chunk_rows: dict[int, tuple[int, int]]
    arrivals: dict[int, float] = field(default_factory=dict)  # chunk -> time it landed (local: 0)
    tile_ranges: list[tuple[int, int]] = field(default_factory=list)  # chunks each tile waits for
    tile_order: list[int] = field(default_factory=list)  # tile run by execution slot s
    tile_starts: list[tuple[int, int, int]] = field(default_factory=list)  # (tile, sequence, chunks arrived)
    kernel_s: tuple[float, float] = (0.0, 0.0)
    total_chunks: int = 0
    started_at: float = 0.0  # wall-clock time (time.time()) of the launch start: aligns the traces of several ranks
    planned: str = ""  # for `auto` schedules: the planner's choice (Resolution.describe())

    def overlapped_tiles(self) -> int:
        """Tiles that started while some chunk of this launch had not landed yet."""
        return sum(1 for _, _, arrived in self.tile_starts if arrived < self.total_chunks)

    def summary(self) -> str:
        """Per chunk: when it landed and how many tiles had already started (the overlap)."""
        lines = [f"rank {self.rank} epoch {self.epoch}: kernel {self.kernel_s[0] * 1e3:.1f}..{self.kernel_s[1] * 1e3:.1f} ms, "
                 f"{self.overlapped_tiles()}/{len(self.tile_starts)} tiles started before the last chunk landed"]
        if self.planned:
            lines.append(f"  {self.planned}")
        for k, g in enumerate(sorted(self.arrivals, key=self.arrivals.__getitem__), start=1):
            lo, hi = self.chunk_rows.get(g, (0, 0))
            waiting = sum(1 for r in self.tile_ranges if r[0] <= g <= r[1])
            before = sum(1 for _, _, arrived in self.tile_starts if arrived < k)
            lines.append(f"  chunk {g:3d} rows {lo:6d}..{hi:<6d} landed {self.arrivals[g] * 1e3:8.1f} ms; "
                         f"{waiting:4d} tiles read it; {before:4d} tiles had started before it landed")
        return "\n".join(lines)


class Context:
    """Buffers and signals of one fused all-gather operator on one rank."""

    def __init__(self, plan: RankPlan, shard_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, dim: int):
        self.plan = plan
        self.dim = dim
        full = list(shard_shape)
        full[dim] *= plan.world
        self.buffer = torch.empty(full, dtype=dtype, device=device)
        n = plan.world * plan.chunks_per_rank
        self.n_chunks = n
        # [error x4 | flags x n | arrived | started]
        self.signals = torch.zeros(dev.SIG_HEADER + n + 2, dtype=torch.int32, device=device)
        self.ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64, device=device)
        self.ctx[dev.CTX_RANK.value] = plan.rank
        self.ctx[dev.CTX_ROWS.value] = plan.rows_per_rank
        self.ctx[dev.CTX_CHUNKS.value] = plan.chunks_per_rank
        self.ctx[dev.CTX_STRIDE_BYTES.value] = self.buffer.stride(dim) * self.buffer.element_size()
        self.ctx[dev.CTX_SIZE.value] = full[dim]
        self.ctx[dev.CTX_WORLD.value] = plan.world
        self.epoch = 0
        self.orders: dict[tuple, tuple[torch.Tensor, list[tuple[int, int]], list[int]]] = {}
        self.broken: str | None = None
        # Set by the launcher: the schedule as lowered (auto resolved) and the planner's choice, if any.
        self.schedule = None
        self.resolution = None
        self.lock = threading.Lock()
        self.trace: Trace | None = None
        self.t0 = 0.0
        self.t0_wall = 0.0

    def chunk_view(self, chunk: int) -> torch.Tensor:
        lo, hi = self.plan.bounds(chunk)
        return self.buffer.narrow(self.dim, lo, hi - lo)

    def begin(self, spin_limit: int) -> int:
        self.epoch += 1
        self.ctx[dev.CTX_EPOCH.value] = self.epoch
        self.ctx[dev.CTX_SPIN_LIMIT.value] = spin_limit
        self.signals[: dev.SIG_HEADER] = 0
        self.signals[dev.SIG_HEADER + self.n_chunks :] = 0
        self.t0 = time.perf_counter()
        self.t0_wall = time.time()
        return self.epoch

    def land(self, chunk: int) -> None:
        """Raise chunk `chunk`'s flag to this epoch (after its data is in place), count it as arrived."""
        with self.lock:
            # Count first, then raise the flag: a tile released by the flag must see the count.
            self.signals[dev.SIG_HEADER + self.n_chunks] += 1
            self.signals[dev.SIG_HEADER + chunk] = self.epoch
            if self.trace is not None:
                self.trace.arrivals[chunk] = time.perf_counter() - self.t0

    def error(self) -> tuple[int, int, int] | None:
        flag, rank, chunk, epoch = (int(x) for x in self.signals[: dev.SIG_HEADER].tolist())
        return (rank, chunk, epoch) if flag else None
