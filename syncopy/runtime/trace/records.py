"""What a launch did, as one rank saw it: the record a traced launch fills (tiles, chunks, times),
read by `fused.last_trace`, the Chrome trace and the timeline picture."""
from __future__ import annotations

from dataclasses import dataclass, field

import syncopy.device as device

#: Words a traced tile writes into the trace buffer (device.trace_clocks).
TRACE_WORDS = int(device.TRACE_WORDS)


@dataclass
class Trace:
    """What one launch did, as seen by one rank (times in seconds from the launch start)."""

    rank: int
    epoch: int
    chunk_rows: dict[int, tuple[int, int]]
    arrivals: dict[int, float] = field(default_factory=dict)  # chunk -> time it landed (local: 0)
    tile_ranges: list[tuple[int, int]] = field(default_factory=list)  # flags each tile waits for (chunks; units with explicit slices)
    tile_order: list[int] = field(default_factory=list)  # tile run by execution slot s
    tile_starts: list[tuple[int, int, int]] = field(default_factory=list)  # (tile, sequence, chunks arrived)
    kernel_s: tuple[float, float] = (0.0, 0.0)
    total_chunks: int = 0
    started_at: float = 0.0  # wall-clock time (time.time()) of the launch start: aligns the traces of several ranks
    # Producer patterns: when the kernel finished each chunk (its flag rose), when this rank's
    # contribution left, and (in `arrivals`) when the reduced chunk landed in the output.
    ready: dict[int, float] = field(default_factory=dict)
    sent: dict[int, float] = field(default_factory=dict)
    producer: bool = False
    planned: str = ""  # for `auto` schedules: the planner's choice (Resolution.describe())
    # tile -> (began waiting or None where the backend cannot tell, started): seconds from the launch start
    tile_times: dict[int, tuple[float | None, float]] = field(default_factory=dict)
    device_clock: bool = False  # tile times from the GPU's clock, placed at the kernel's enqueue (tracing._tile_times)
    # (chunk, peer) -> (began, handed to the link's send) on the sending rank: the emulated wire time on CPU worlds
    sends: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    t0_perf: float = 0.0  # the launch start on this process's perf_counter clock
    kernel: str = ""  # the fused kernel's name

    def overlapped_tiles(self) -> int:
        """Tiles that started while some chunk of this launch had not landed yet."""
        return sum(1 for _, _, arrived in self.tile_starts if arrived < self.total_chunks)

    def sent_before_end(self) -> list[int]:
        """Producer: chunks whose data left this rank while the kernel was still running."""
        return sorted(g for g, t in self.sent.items() if t < self.kernel_s[1])

    def summary(self) -> str:
        """Per chunk: when it landed and how many tiles had already started (the overlap)."""
        if self.producer:
            return self._producer_summary()
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

    def _producer_summary(self) -> str:
        early = self.sent_before_end()
        lines = [f"rank {self.rank} epoch {self.epoch}: kernel {self.kernel_s[0] * 1e3:.1f}..{self.kernel_s[1] * 1e3:.1f} ms, "
                 f"{len(early)}/{len(self.sent)} chunks sent before the kernel ended"]

        def ms(d, g):
            return f"{d[g] * 1e3:8.1f} ms" if g in d else "       -   "

        for g in sorted(set(self.ready) | set(self.arrivals), key=lambda g: self.ready.get(g, self.arrivals.get(g, 0.0))):
            lo, hi = self.chunk_rows.get(g, (0, 0))
            lines.append(f"  chunk {g:3d} rows {lo:6d}..{hi:<6d} written {ms(self.ready, g)}; sent {ms(self.sent, g)}; "
                         f"reduced here {ms(self.arrivals, g)}")
        return "\n".join(lines)
