"""LoopbackWorld(side="graph") on the CPU engine: a launch's chunk copies and flags are recorded once
(per peer list and withheld set) and replayed on the side stream, with the launch's epoch copied
into the word the flags are copied from. Same results as the per-call path, launch after launch."""
from __future__ import annotations

import time

import pytest
import torch
import triton

import syncopy
from syncopy.errors import LaunchError
from syncopy.runtime.loopback import LoopbackWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

WORLD, ROWS, N, K = 3, 16, 16, 16
META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)


def _fused(timeout_s=20.0, pattern="all_gather", tensor="A"):
    return syncopy.overlap(dict(pattern=pattern, tensor=tensor, dim=0, chunks_per_rank=2, order="ring"), timeout_s=timeout_s)(ag_gemm_kernel)


def _case(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(ROWS, K, generator=g) for _ in range(WORLD)], torch.randn(K, N, generator=g)


def _launch(lw: LoopbackWorld, shards, b, rank=0, **kw):
    m = ROWS * WORLD
    c = torch.full((m, N), float("nan"))
    for ctx in lw.contexts.values():
        ctx.buffer.fill_(float("nan"))  # stale rows cannot pass
    a = shards[rank]
    grid = (triton.cdiv(m, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)
    ctx = lw.launch(grid, (a, b, c, m, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
                    dict(META), shards, **kw)
    return c, ctx


def _err(c, shards, b) -> float:
    ref = torch.cat(shards) @ b
    return float(torch.nan_to_num((c - ref).abs(), nan=float("inf")).max())


class _Calls:
    """Counts the stream operations a launch makes itself, by name: not those a replayed graph or a
    write batch makes inside them (what a GPU launch pays one host call for)."""

    NAMES = ("copy", "write32", "write_batch", "record", "wait_event", "launch_graph", "capture")

    def __init__(self, ops, monkeypatch):
        self.counts: dict[str, int] = {}
        self.depth = 0
        for name in self.NAMES:
            real = getattr(ops, name)
            monkeypatch.setattr(ops, name, self._counting(name, real))

    def _counting(self, name, real):
        def call(*args):
            if self.depth == 0:
                self.counts[name] = self.counts.get(name, 0) + 1
            self.depth += 1
            try:
                return real(*args)
            finally:
                self.depth -= 1

        return call

    def take(self) -> dict[str, int]:
        out, self.counts = self.counts, {}
        return out


def test_replayed_side_work_equals_torch_launch_after_launch_with_new_data_in_place(monkeypatch):
    lw = LoopbackWorld(_fused(), WORLD, 1, device="cpu", side="graph")
    calls = _Calls(lw.ops, monkeypatch)
    shards, b = _case(0)
    c, ctx = _launch(lw, shards, b, rank=1, sync=False)  # first launch: records the graph
    lw.synchronize()
    assert _err(c, shards, b) < 1e-4
    first = calls.take()
    assert first["capture"] == 1 and first["launch_graph"] == 1
    for seed in (1, 2, 3):  # new data in the same peer tensors: the graph is reused and reads it
        new, b = _case(seed)
        for s, x in zip(shards, new):
            s.copy_(x)
        c, ctx = _launch(lw, shards, b, rank=1, sync=False)
        lw.synchronize()
        assert _err(c, shards, b) < 1e-4, f"launch with seed {seed}"
        warm = calls.take()
        # The 2 x 2 remote chunks' copies and flags are one replay: no capture, one copy of the
        # epoch's word to its mirror, the own rows and the error words; no per-chunk call.
        assert warm == dict(record=3, wait_event=2, copy=3, write_batch=1, write32=1, launch_graph=1), warm
    (loop,) = lw.loops.values()
    assert len(loop.side_graphs) == 1 and ctx.epoch == 4 and int(ctx.ctx[0]) == 4


def test_new_peer_storage_records_a_new_graph_and_reads_it(monkeypatch):
    # The graph freezes the peers' addresses: a peer tensor whose storage was swapped in place
    # (same object, new address) must not be served by the old graph.
    lw = LoopbackWorld(_fused(), WORLD, 0, device="cpu", side="graph")
    shards, b = _case(4)
    c, _ = _launch(lw, shards, b)
    assert _err(c, shards, b) < 1e-4
    (loop,) = lw.loops.values()
    old = loop.side_graphs[frozenset()]
    new, _ = _case(5)
    shards[2].set_(new[2].clone())
    c, _ = _launch(lw, shards, b)
    assert _err(c, shards, b) < 1e-4
    assert loop.side_graphs[frozenset()] is not old and old == []  # the old graph was dropped


def test_replayed_chunks_land_while_the_kernel_runs(monkeypatch):
    # The replay runs on the side stream's worker: the interpreted kernel starts before the last
    # chunk has landed (each copy made slow), and its tiles wait for the flags.
    lw = LoopbackWorld(_fused(), WORLD, 0, device="cpu", side="graph")
    shards, b = _case(6)
    _launch(lw, shards, b)  # warm: the graph recorded with the slow copies below only from the next peer list
    landed, started = [], []
    real_copy = lw.ops.copy

    def slow_copy(dst, src, n, stream):
        real_copy(dst, src, n, stream)
        if stream is not None and n > 4:  # a chunk on the side stream, not a flag or a word
            stream.put(lambda: (time.sleep(0.05), landed.append(time.perf_counter())))

    monkeypatch.setattr(lw.ops, "copy", slow_copy)
    real_enqueue = lw.engine.enqueue
    monkeypatch.setattr(lw.engine, "enqueue", lambda launch: (started.append(time.perf_counter()), real_enqueue(launch)))
    shards = [s.clone() for s in shards]  # a new peer list: recorded again, with the slow copies
    c, _ = _launch(lw, shards, b)
    assert _err(c, shards, b) < 1e-4
    assert len(landed) == (WORLD - 1) * 2 and started[0] < max(landed), (started, landed)


def test_a_withheld_chunk_is_still_a_timeout_naming_it():
    lw = LoopbackWorld(_fused(timeout_s=0.3), WORLD, 2, device="cpu", side="graph")
    shards, b = _case(7)
    c, _ = _launch(lw, shards, b, rank=2)
    assert _err(c, shards, b) < 1e-4
    with pytest.raises(syncopy.SyncopyTimeout) as info:
        _launch(lw, shards, b, rank=2, withhold=frozenset({1}))
    assert (info.value.rank, info.value.chunk, info.value.epoch) == (2, (0, 1), 2)
    (loop,) = lw.loops.values()
    assert set(loop.side_graphs) == {frozenset(), frozenset({1})}
    c, ctx = _launch(lw, shards, b, rank=2)  # the context goes on with the full graph
    assert _err(c, shards, b) < 1e-4 and ctx.epoch == 3


def test_paced_presignalled_and_timelined_launches_issue_their_calls_as_before():
    lw = LoopbackWorld(_fused(), WORLD, 0, device="cpu", side="graph")
    shards, b = _case(8)
    for kw in (dict(delay_s=0.01), dict(presignal=True), dict(timeline=True), dict(copies="before"), {}):
        c, _ = _launch(lw, shards, b, **kw)
        assert _err(c, shards, b) < 1e-4, kw
    (loop,) = lw.loops.values()
    assert list(loop.side_graphs) == [frozenset()]  # only the plain launch replays


def test_bad_side_settings_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^side='copy': expected one of calls, graph$"):
        LoopbackWorld(_fused(), WORLD, 0, device="cpu", side="copy")
    with pytest.raises(LaunchError, match=r"^side='graph' replays the chunk copies of host-epoch all_gather launches; leave it out for graph=True$"):
        LoopbackWorld(_fused(), WORLD, 0, device="cpu", side="graph", graph=True)
    with pytest.raises(LaunchError, match=r"leave it out for reduce_scatter$"):
        LoopbackWorld(_fused(pattern="reduce_scatter", tensor="C"), WORLD, 0, device="cpu", side="graph")
