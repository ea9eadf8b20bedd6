"""A trace file (syncopy/runtime/trace/chrome_trace.py) drawn as a picture: per rank, a lane for the kernel,
one for its tiles (each tile's wait in red, its work in blue), one for the chunks coming in (from the
moment the sender handed a chunk to the link to its landing, labelled with the chunk id) and one for
the chunks going out; a pipeline's file has these lanes per operator (the lanes no event uses are
left out), so that a reader sees the second operator's tiles start beside the first's. A reader
sees chunks land and tiles start as they land.

matplotlib draws it (the `plot` extra: pip install 'syncopy[plot]').
"""
from __future__ import annotations

import json
from pathlib import Path

from syncopy.errors import SyncopyError

COLORS = {"kernel": "#9e9e9e", "wait": "#e53935", "tile": "#1e88e5", "chunk_in": "#43a047", "chunk_out": "#fb8c00",
          "signal": "#6a1b9a"}
LANE_NAMES = ("kernel", "tiles", "chunks in", "chunks out")


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed (CI, ranks, servers)
        import matplotlib.pyplot as plt
    except ImportError:
        raise SyncopyError("drawing a timeline needs matplotlib: pip install 'syncopy[plot]' (or matplotlib)") from None
    return plt


def load(path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SyncopyError(f"{path}: not a trace file syncopy can read ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise SyncopyError(f"{path}: not a Chrome trace (no traceEvents list); write one with trace='run.json' or --trace")
    return doc


def draw(doc: dict, out, title: str | None = None) -> Path:
    """Draw the trace `doc` (a loaded trace file) into `out` (.png, .svg or .pdf: matplotlib decides by suffix)."""
    plt = _pyplot()
    events = [e for e in doc["traceEvents"] if e.get("ph") in ("X", "i")]
    if not events:
        raise SyncopyError("the trace has no events to draw (was the operator launched with trace=...?)")
    ranks = sorted({e["pid"] for e in events})
    t0 = min(e["ts"] for e in events)
    tids = sorted({e.get("tid", 0) for e in events})  # the lanes drawn: those some event of some rank is on
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("name") == "thread_name"}
    lanes = len(tids)
    fig, ax = plt.subplots(figsize=(14, 1.1 + 0.55 * lanes * len(ranks)))
    yticks, ylabels = [], []
    for i, rank in enumerate(ranks):
        base = (len(ranks) - 1 - i) * (lanes + 1)
        row = {tid: base + lanes - 1 - k for k, tid in enumerate(tids)}
        for tid in tids:
            yticks.append(row[tid])
            ylabels.append(f"rank {rank}  {names.get((rank, tid), LANE_NAMES[tid % len(LANE_NAMES)])}")
        for e in (e for e in events if e["pid"] == rank):
            y = row[e.get("tid", 0)]
            start = (e["ts"] - t0) / 1e3
            if e["ph"] == "i":
                ax.plot([start, start], [y - 0.35, y + 0.35], color=COLORS["signal"], linewidth=1)
                continue
            width = max(e.get("dur", 0) / 1e3, 1e-3)
            color = _color(e)
            ax.broken_barh([(start, width)], (y - 0.35, 0.7), facecolors=color, edgecolors="white", linewidth=0.3)
            if e["cat"] == "chunk":
                ax.text(start + width, y, f" {e['args'].get('chunk', '')}", va="center", ha="left", fontsize=7)
            elif e["cat"] == "kernel":  # which operator (a pipeline runs several on one lane)
                ax.text(start, y, f" {e['name'].removeprefix('kernel ')}", va="center", ha="left", fontsize=6, clip_on=True)
    ax.set_yticks(yticks, ylabels, fontsize=8)
    ax.set_xlabel("ms")
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    launches = doc.get("otherData", {}).get("launches")
    ax.set_title(title or f"syncopy: {len(ranks)} ranks" + (f", {launches} launches" if launches else ""), fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in ("kernel", "wait", "tile", "chunk_in", "chunk_out")]
    ax.legend(handles, ["kernel", "tile waits", "tile works", "chunk in flight -> landed", "chunk sent"], loc="upper right",
              fontsize=7, ncols=5)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def _color(e: dict) -> str:
    if e["cat"] == "chunk":
        return COLORS["chunk_in"] if e.get("tid", 0) % len(LANE_NAMES) == 2 else COLORS["chunk_out"]
    return COLORS.get(e["cat"], "#607d8b")
