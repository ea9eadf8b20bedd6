"""Traces of fused launches as Chrome / Perfetto trace files (the JSON "Trace Event Format").

One process per rank (pid = rank), four lanes each: the kernel, its tiles (the wait of each tile,
then its work), the chunks that came in (from the moment the sender handed the chunk to the link
to the moment it landed here) and the chunks that went out. A file of several operators (a
pipeline's) gives each operator four lanes of its own (tid 4 x its index + lane, named after it):
on CPU ranks as on GPUs a pipeline's second operator runs beside its first, and one lane would
draw their tiles over each other. Categories say what an event is:
`kernel`, `wait`, `tile`, `chunk`, `signal`. Times come from each rank's Trace (seconds from its
launch start) placed on the wall clock of the launch starts, so ranks on one host line up.
Open a file at https://ui.perfetto.dev or chrome://tracing; `syncopy trace FILE -o PNG` draws it.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

KERNEL, TILES, CHUNKS_IN, CHUNKS_OUT = 0, 1, 2, 3
LANES = {KERNEL: "kernel", TILES: "tiles", CHUNKS_IN: "chunks in", CHUNKS_OUT: "chunks out"}


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _span(name, cat, pid, tid, t0, t1, **args) -> dict:  # args say chunk, tile, epoch: what a tool filters on
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": _us(t0), "dur": _us(max(t1 - t0, 0.0)), "args": args}


def _instant(name, cat, pid, tid, t, **args) -> dict:
    return {"name": name, "cat": cat, "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": _us(t), "args": args}


def launch_events(traces: list, origin: float, lanes: dict | None = None) -> list[dict]:
    """Events of one launch, every rank's Trace in `traces` (rank order); `origin` is the wall-clock
    time (time.time()) that ts 0 stands for; `lanes`: kernel name -> its first tid (default 0)."""
    events = []
    by_rank = {t.rank: t for t in traces}
    for t in traces:
        first = len(events)
        shift = t.started_at - origin  # this rank's launch start on the common clock

        def at(seconds, shift=shift):
            return shift + seconds

        r = t.rank
        k0, k1 = t.kernel_s
        events.append(_span(f"kernel {t.kernel}", "kernel", r, KERNEL, at(k0), at(k1), epoch=t.epoch, producer=t.producer,
                            tiles=len(t.tile_starts), overlapped_tiles=t.overlapped_tiles()))
        events += _tile_events(t, at)
        for g, landed in sorted(t.arrivals.items()):
            what = "reduced" if t.producer else "landed"
            sender, began = _sender(by_rank, g, r)
            if sender is None:
                events.append(_instant(f"chunk {g} {what}", "chunk", r, CHUNKS_IN, at(landed), chunk=g, rows=list(t.chunk_rows.get(g, ()))))
            else:
                began_here = by_rank[sender].started_at - origin + began
                events.append(_span(f"chunk {g} from rank {sender}", "chunk", r, CHUNKS_IN, began_here, at(landed), chunk=g,
                                    source=sender, event=what, rows=list(t.chunk_rows.get(g, ()))))
        for g, ready in sorted(t.ready.items()):
            events.append(_instant(f"chunk {g} flag", "signal", r, CHUNKS_OUT, at(ready), chunk=g))
        for (g, peer), (b, h) in sorted(t.sends.items()):
            events.append(_span(f"chunk {g} to rank {peer}", "chunk", r, CHUNKS_OUT, at(b), at(h), chunk=g, peer=peer))
        shift_tid = (lanes or {}).get(t.kernel, 0)
        for e in events[first:]:
            e["args"]["epoch"] = t.epoch  # which launch: the n-th launch of an operator has one epoch on every rank
            e["args"]["kernel"] = t.kernel  # which operator
            e["tid"] += shift_tid
    return events


def lane_of(event: dict) -> int:
    """KERNEL, TILES, CHUNKS_IN or CHUNKS_OUT: which of its operator's lanes an event is on."""
    return event.get("tid", 0) % len(LANES)


def _lanes(launches: list[list]) -> dict:
    """Each operator's first tid: 0 for a file of one operator, 4 x its index (first seen first) for several."""
    names = list(dict.fromkeys(t.kernel for traces in launches for t in traces))
    return {name: (len(LANES) * i if len(names) > 1 else 0) for i, name in enumerate(names)}


def _tile_events(t, at) -> list[dict]:
    """Each tile's wait (where the backend records it) and its work: on CPU ranks the interpreter runs
    a rank's tiles one after another, so a tile's work lasts until the next tile begins waiting."""
    events, r = [], t.rank
    ranges = t.tile_ranges
    ordered = sorted(t.tile_times.items(), key=lambda kv: kv[1][1])
    for i, (tile, (began, started)) in enumerate(ordered):
        lo, hi = ranges[tile] if tile < len(ranges) else (0, -1)
        if began is not None and started > began:
            events.append(_span(f"wait {tile}", "wait", r, TILES, at(began), at(started), tile=tile, chunks=[lo, hi]))
        if t.device_clock:
            events.append(_instant(f"tile {tile}", "tile", r, TILES, at(started), tile=tile, chunks=[lo, hi]))
            continue
        nxt = ordered[i + 1][1] if i + 1 < len(ordered) else None
        end = (nxt[0] if nxt[0] is not None else nxt[1]) if nxt is not None else t.kernel_s[1]
        events.append(_span(f"tile {tile}", "tile", r, TILES, at(started), at(max(end, started)), tile=tile, chunks=[lo, hi]))
    return events


def _sender(by_rank: dict, chunk: int, dst: int):
    """The rank that handed `chunk` to the link last on its way to `dst`, and when (its own seconds)."""
    best = None
    for rank, t in by_rank.items():
        hop = t.sends.get((chunk, dst))
        if hop is not None and (best is None or hop[0] > best[1]):
            best = (rank, hop[0])
    return best if best is not None else (None, None)


def document(launches: list[list]) -> dict:
    """The trace file's JSON: every launch (a list of per-rank Traces) on one clock."""
    if not launches:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    origin = min(t.started_at for traces in launches for t in traces)
    lanes = _lanes(launches)
    events = []
    for traces in launches:
        events += launch_events(traces, origin, lanes)
    ranks = sorted({t.rank for traces in launches for t in traces})
    for r in ranks:
        events.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": r, "args": {"sort_index": r}})
        for kernel, base in lanes.items():
            for lane, name in LANES.items():
                label = name if len(lanes) == 1 else f"{kernel} {name}"
                events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": base + lane, "args": {"name": label}})
                events.append({"name": "thread_sort_index", "ph": "M", "pid": r, "tid": base + lane, "args": {"sort_index": base + lane}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "syncopy", "launches": len(launches), "ranks": len(ranks)}}


def write(path, launches: list[list]) -> None:
    """Write the trace file atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(document(launches), f)
    os.replace(tmp, path)
