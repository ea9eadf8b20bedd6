"""The timeline picture (syncopy/runtime/trace/timeline.py): chunk labels never print over each other,
and every kind of mark drawn is in the legend, the ticks of instant events included."""
from __future__ import annotations

import pytest

from syncopy.runtime.trace import timeline

matplotlib = pytest.importorskip("matplotlib")


@pytest.mark.parametrize(("items", "expected"), [
    pytest.param([(10.0, "0"), (50.0, "1")], [(10.0, "0"), (50.0, "1")], id="apart"),
    pytest.param([(10.0, "3"), (10.0, "2")], [(10.0, "2,3")], id="same-end"),
    pytest.param([(10.0, "0"), (10.5, "1"), (11.0, "2"), (40.0, "3")], [(10.0, "0,1,2"), (40.0, "3")], id="a-run"),
    pytest.param([(10.0, "10"), (12.9, "11")], [(10.0, "10,11")], id="wide-label"),
    pytest.param([(10.0, "1"), (12.6, "2")], [(10.0, "1"), (12.6, "2")], id="just-clear"),
])
def test_chunk_labels_that_would_overlap_are_written_as_one(items, expected):
    # char = 1.0: a label "x" covers x .. x + 2.5 (its text, a leading space, a margin).
    assert timeline.chunk_labels(items, 1.0) == expected


def _doc():
    def span(name, cat, tid, ts, dur, **args):
        return {"name": name, "cat": cat, "ph": "X", "pid": 0, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = [span("kernel k", "kernel", 0, 0, 50_000), span("tile 0", "tile", 1, 1_000, 40_000, tile=0),
              span("chunk 2 from rank 1", "chunk", 2, 0, 20_000, chunk=2, source=1),
              span("chunk 3 from rank 1", "chunk", 2, 0, 20_000, chunk=3, source=1),
              {"name": "chunk 0 flag", "cat": "signal", "ph": "i", "s": "t", "pid": 0, "tid": 3, "ts": 30_000,
               "args": {"chunk": 0}}]
    return {"traceEvents": events, "otherData": {"launches": 1}}


def test_the_picture_labels_chunks_once_and_lists_its_ticks(tmp_path, monkeypatch):
    monkeypatch.setitem(matplotlib.rcParams, "svg.fonttype", "none")  # text stays text in the SVG
    out = timeline.draw(_doc(), tmp_path / "t.svg")
    svg = out.read_text()
    assert svg.count(" 2,3<") == 1 and " 2<" not in svg and " 3<" not in svg
    assert "flag raised (ready to send)" in timeline.TICK_LEGEND["signal"]
    assert svg.count(timeline.TICK_LEGEND["signal"]) == 1
    assert timeline.TICK_LEGEND["chunk"] not in svg  # no such tick drawn, none listed
    for _, name in timeline.BAR_LEGEND:
        assert name.replace(">", "&gt;") in svg
