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
#: The legend: bars, then ticks (instant events), each listed only where the picture has one.
BAR_LEGEND = (("kernel", "kernel"), ("wait", "tile waits"), ("tile", "tile works"),
              ("chunk_in", "chunk in flight -> landed"), ("chunk_out", "chunk sent"))
TICK_LEGEND = {"signal": "chunk's flag raised (ready to send)", "chunk": "chunk landed (no send recorded: e.g. its own rows)",
               "tile": "tile started (GPU clock)"}
FIGURE_WIDTH_IN, LABEL_FONT_PT = 14, 7
#: Width of one character of a chunk label, as a fraction of the axes' width (7 pt text on about 12 inches of axes).
LABEL_CHAR = 0.6 * LABEL_FONT_PT / (72 * 0.86 * FIGURE_WIDTH_IN)


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
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 1.5 + 0.55 * lanes * len(ranks)))
    yticks, ylabels = [], []
    labels: dict[float, list[tuple[float, str]]] = {}  # lane's y -> (x, chunk id) of each chunk label
    ticks: set[str] = set()
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
                ticks.add(_tick_kind(e))
                ax.plot([start, start], [y - 0.35, y + 0.35], color=_tick_color(e), linewidth=1)
                continue
            width = max(e.get("dur", 0) / 1e3, 1e-3)
            color = _color(e)
            ax.broken_barh([(start, width)], (y - 0.35, 0.7), facecolors=color, edgecolors="white", linewidth=0.3)
            if e["cat"] == "chunk":
                labels.setdefault(y, []).append((start + width, str(e["args"].get("chunk", ""))))
            elif e["cat"] == "kernel":  # which operator (a pipeline runs several on one lane)
                ax.text(start, y, f" {e['name'].removeprefix('kernel ')}", va="center", ha="left", fontsize=6, clip_on=True)
    span = max(max((e["ts"] + e.get("dur", 0) - t0) / 1e3 for e in events), 1e-3)
    for y, items in labels.items():
        for x, text in chunk_labels(items, LABEL_CHAR * span * 1.1):
            ax.text(x, y, f" {text}", va="center", ha="left", fontsize=LABEL_FONT_PT)
    ax.set_yticks(yticks, ylabels, fontsize=8)
    ax.set_xlabel("ms")
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    launches = doc.get("otherData", {}).get("launches")
    ax.set_title(title or f"syncopy: {len(ranks)} ranks" + (f", {launches} launches" if launches else ""), fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k, _ in BAR_LEGEND]
    names = [text for _, text in BAR_LEGEND]
    for kind in (k for k in TICK_LEGEND if k in ticks):
        handles.append(plt.Line2D([0], [0], color=_tick_color({"cat": kind}), linewidth=1.5))
        names.append(TICK_LEGEND[kind])
    # Below the axes, not over the first lanes' bars.
    ax.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=7, ncols=min(len(names), 4),
              frameon=False)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def chunk_labels(items: list[tuple[float, str]], char: float) -> list[tuple[float, str]]:
    """The chunk labels of one lane, (x, text), none over another: labels that would overlap the one
    before (`char`: one character's width in the picture's x units) are written as one, "2,3"."""
    out: list[tuple[float, str]] = []
    end = float("-inf")
    for x, text in sorted(items, key=lambda item: (item[0], _chunk_key(item[1]))):
        if out and x < end:
            joined = f"{out[-1][1]},{text}"
            out[-1] = (out[-1][0], joined)
        else:
            out.append((x, text))
        end = out[-1][0] + (len(out[-1][1]) + 1.5) * char
    return out


def _chunk_key(text: str):
    return (0, int(text)) if text.isdigit() else (1, text)


def _tick_kind(e: dict) -> str:
    return e["cat"] if e["cat"] in TICK_LEGEND else "signal"


def _tick_color(e: dict) -> str:
    return {"signal": COLORS["signal"], "chunk": COLORS["chunk_in"], "tile": COLORS["tile"]}[_tick_kind(e)]


def _color(e: dict) -> str:
    if e["cat"] == "chunk":
        return COLORS["chunk_in"] if e.get("tid", 0) % len(LANE_NAMES) == 2 else COLORS["chunk_out"]
    return COLORS.get(e["cat"], "#607d8b")
