"""A pipeline launch without host syncs (issue 12 item 1, issue 14 item 1), tested without a GPU: the
links' per-launch words as one batch of stream write-values, their error words read off the launch
path (a pinned ring, read once the launch's event is done), and the rule that places op 2 on a side
stream beside op 1 (which stream, which order, and the fallback, from grid and SM counts)."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from syncopy import device as dev
from syncopy.errors import SyncopyTimeout
from syncopy.runtime.launch.kernel import Built
from syncopy.runtime.streams import streamops
from syncopy.runtime.pipeline.placement import IN_ORDER, Placement, place, reader_side_limit
from syncopy.runtime.pipeline.links import LinkSignals, Reader


def _link(rows=10, chunks=3) -> LinkSignals:
    link = LinkSignals(torch.zeros(rows, 4), chunks)
    link.reader = Reader(1, "A", "mlp_down_kernel", "mlp_up_kernel", 0, 2.0)
    return link


def _words(link: LinkSignals) -> dict:
    n, s = link.chunks, link.signals.tolist()
    h = dev.SIG_HEADER
    return {"error": s[:h], "flags": s[h:h + n], "counters": s[h + n + 2:h + 2 * n + 2], "targets": s[h + 2 * n + 2:],
            "epoch": int(link.ctx[dev.CTX_EPOCH.value]), "limit": int(link.ctx[dev.CTX_SPIN_LIMIT.value])}


def test_begin_writes_a_launchs_words_as_one_batch_of_stream_writes():
    link = _link()
    link.signals[: dev.SIG_HEADER] = torch.tensor([1, 0, 2, 1], dtype=torch.int32)  # the last launch's starved reader
    link.signals[dev.SIG_HEADER + link.chunks + 2:][:3] = 7  # the last launch's counts
    assert link.begin([2, 0, 3], (5 << 32) + 9, None) == 1
    assert _words(link) == {"error": [0] * 4, "flags": [0, 1, 0], "counters": [0, 0, 0], "targets": [2, 0, 3], "epoch": 1,
                            "limit": (5 << 32) + 9}
    link.begin([2, 0, 3], 9, None)
    assert _words(link)["flags"] == [0, 2, 0] and _words(link)["epoch"] == 2 and _words(link)["limit"] == 9
    assert len(link._starts) == 2  # made once per (tiles per chunk, bound), reused after


def test_begin_is_enqueued_on_the_stream_not_done_on_the_host():
    link, stream, gate = _link(), streamops.HostStream(5.0), threading.Event()
    link.ops = streamops.HostOps()
    stream.put(gate.wait)  # the stream is busy (a kernel before the launch)
    link.begin([1, 1, 1], 100, stream)
    assert _words(link)["targets"] == [0, 0, 0] and _words(link)["epoch"] == 0
    gate.set()
    stream.synchronize()
    assert _words(link)["targets"] == [1, 1, 1] and _words(link)["epoch"] == 1


def test_a_starved_reader_is_raised_once_its_launch_is_done_never_waited_for_on_the_launch_path():
    link, stream, gate = _link(), streamops.HostStream(5.0), threading.Event()
    stream.put(gate.wait)  # the launch's kernels have not run yet
    epoch = link.begin([1, 1, 1], 100, stream)
    stream.put(lambda: link.signals[: dev.SIG_HEADER].copy_(torch.tensor([1, 0, 2, epoch], dtype=torch.int32)))
    link.errors.record(epoch, stream)
    link.errors.check()  # the next launch: not done yet, nothing raised, nothing waited for
    assert len(link.errors.pending) == 1
    gate.set()
    with pytest.raises(SyncopyTimeout) as err:
        link.errors.check(wait=True)  # synchronize()
    assert str(err.value) == ("rank 1 waited 2s for chunk 2 of rank 1 (epoch 1) and it never arrived; it is rows 6..9 of 'A', "
                              "which mlp_down_kernel waits for and mlp_up_kernel (launch 1 of the pipeline) writes; check that "
                              "mlp_up_kernel writes every row mlp_down_kernel reads, or raise timeout_s")
    assert not link.errors.pending


def test_a_launch_that_finds_the_ring_full_reads_the_oldest_first():
    link = _link()
    for epoch in range(1, LinkSignalsRing.RING + 2):
        link.errors.make_room()  # before the launch's kernels (Pipeline.run): a full ring reads its oldest
        link.errors.record(epoch, None)
    assert len(link.errors.pending) == LinkSignalsRing.RING  # the oldest was read to free its slot


LinkSignalsRing = type(_link().errors)

H100 = dict(sms=132, reserved=0)


@pytest.mark.parametrize("kwargs, want", [
    pytest.param(dict(cuda=False, interpreted=True, warm=True, chain=True), Placement(False, False, "interpreter"), id="cpu"),
    pytest.param(dict(cuda=True, interpreted=False, warm=False, chain=True), Placement(False, False, "first launch"), id="cold"),
    pytest.param(dict(cuda=True, interpreted=False, warm=True, chain=False), Placement(False, False, "two linked"), id="three-ops"),
    pytest.param(dict(reader_ctas=131, reader_first_ok=True), Placement(True, True, "enqueued first"), id="world1-beside"),
    pytest.param(dict(reader_ctas=64, reader_first_ok=False), Placement(True, False, "after op 1"), id="p2p-beside"),
    pytest.param(dict(reader_ctas=132, reader_first_ok=True), Placement(False, False, "at most 131"), id="fills-gpu"),
    pytest.param(dict(reader_ctas=60, writer_ctas=70, reserved=8, reader_first_ok=True), Placement(False, False, "at most 54"),
                 id="nccl-both-over"),
    pytest.param(dict(reader_ctas=54, writer_ctas=70, reserved=8, reader_first_ok=True), Placement(True, True, "first"),
                 id="nccl-both-fit"),
])
def test_op2_runs_beside_op1_only_where_its_waiting_tiles_leave_op1_an_sm(kwargs, want):
    args = dict(cuda=True, interpreted=False, warm=True, chain=True, reader_ctas=1, writer_ctas=4096, **H100,
                reader_first_ok=False)
    got = place(**{**args, **kwargs})
    assert (got.side, got.reader_first) == (want.side, want.reader_first)
    assert want.why in got.why and (got.side or got.why.startswith(IN_ORDER)), got.why


def test_the_fallback_says_in_one_line_what_to_change():
    got = place(cuda=True, interpreted=False, warm=True, chain=True, reader_ctas=512, writer_ctas=4096, sms=132, reserved=0,
                reader_first_ok=True)
    assert got.why == ("in order on the caller's stream: op 2 launches 512 CTAs and at most 131 may wait beside op 1 on 132 SMs "
                       "(0 kept for transfers); make it a persistent kernel of at most 131 programs to run it beside op 1")
    assert reader_side_limit(132, 8, 100) == 24 and reader_side_limit(108, 0, 100) == 107


class _Recorder:
    """A linked variant that records its launch (and the links it was given) instead of running."""

    def __init__(self, name: str, calls: list):
        self.name, self.calls, self.link_args = name, calls, {}

    def __getitem__(self, grid):
        return lambda *args, group=None, **kwargs: self.calls.append((self.name, sorted(self.link_args)))


@pytest.mark.parametrize("reader_first, want", [(False, ["up", "down"]), (True, ["down", "up"])])
def test_the_placement_decides_the_order_operators_are_enqueued_in(reader_first, want):
    from syncopy.runtime.pipeline.edges import Edge, Launch
    from syncopy.runtime.pipeline import Pipeline
    from syncopy.runtime.pipeline.run import Plan

    calls: list = []
    link = _link()
    plan = Plan([Edge(0, "C", 1, "A")], [_Recorder("up", calls), _Recorder("down", calls)], {Edge(0, "C", 1, "A"): link})
    launches = [Launch(None, (1,), (), {}, None), Launch(None, (1,), (), {}, None)]
    Pipeline()._enqueue(plan, launches, Placement(False, reader_first, ""), None)
    assert [name for name, _ in calls] == want
    assert dict(calls) == {"up": ["syncopy_out_ctx", "syncopy_out_signals"], "down": ["syncopy_in_ctx", "syncopy_in_signals"]}


@pytest.mark.parametrize("reader_first, want", [(False, ["up", "down"]), (True, ["down", "up"])])
def test_beside_op1_op2_is_forked_then_joined_and_follows_its_last_launch_through_the_fork(reader_first, want, monkeypatch):
    import contextlib

    from syncopy.runtime.pipeline import run as pipeline
    from syncopy.runtime.pipeline.edges import Edge, Launch
    from syncopy.runtime.pipeline import Pipeline
    from syncopy.runtime.pipeline.run import Plan

    calls: list = []
    plan = Plan([Edge(0, "C", 1, "A")], [_Recorder("up", calls), _Recorder("down", calls)], {Edge(0, "C", 1, "A"): _link()})
    launches = [Launch(None, (1,), (), {}, None), Launch(None, (1,), (), {}, None)]
    pipe = Pipeline()  # streams that record the fork and the join (no GPU here)
    monkeypatch.setattr(pipe, "_side_stream", lambda caller: _FakeStream(calls, "side"))
    monkeypatch.setattr(pipeline, "_forked", lambda variant, x, stream: calls.append(("forked", variant.name)))
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    pipe._enqueue(plan, launches, Placement(True, reader_first, ""), _FakeStream(calls, "caller"))
    assert [c[0] for c in calls] == ["side waits for caller", "forked", *want, "caller waits for side"]
    assert calls[1] == ("forked", "down")


def test_forked_is_the_last_stream_a_launch_of_the_reader_follows(monkeypatch):
    # What _forked records is the key sequence.follow_last_launch reads: the reader's launch
    # on the side stream then waits for no earlier stream (the caller's would hold op 1).
    from syncopy.runtime.pipeline import run as pipeline
    from syncopy.runtime.transport.backends import control
    from syncopy.runtime.launch import sequence

    monkeypatch.setattr(control, "group_token", lambda group: 7)
    monkeypatch.setattr("syncopy.runtime.launch.contexts.checked_group", lambda group: group)
    monkeypatch.setattr(pipeline, "_cuda_device", lambda launches: "gpu0")
    calls: list = []
    caller, side = _FakeStream(calls, "caller"), _FakeStream(calls, "side")
    reader = SimpleNamespace(contexts=SimpleNamespace(last_stream={(7, "gpu0"): caller}))  # its cold launches ran on the caller's
    pipeline._forked(reader, pipeline.Launch(None, (1,), (), {}, "group"), side)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: side)
    sequence.follow_last_launch(reader.contexts.last_stream, 7, "gpu0")
    assert calls == [] and reader.contexts.last_stream == {(7, "gpu0"): side}


class _FakeStream:
    def __init__(self, calls: list, name: str):
        self.calls, self.name = calls, name

    def wait_stream(self, other):
        self.calls.append((f"{self.name} waits for {other.name}", None))


class _Variant:
    """What `Pipeline._placement` reads of a linked operator."""

    def __init__(self, grid, producer, backend=None, trace=False):
        self.grid, self.producer, self.trace = grid, producer, trace
        self.contexts = SimpleNamespace(table={("shape",): (object(), backend)})
        self.kernel = SimpleNamespace(built=Built(SimpleNamespace(checked=False), None, None, None))
        self.orders = SimpleNamespace(shape_key=lambda grid, args: (tuple(grid),))


class _Backend:
    def __init__(self, name, asynchronous):
        self.name, self.asynchronous = name, asynchronous


@pytest.mark.parametrize("backend, down_grid, want", [
    pytest.param(None, (64, 2), (True, True), id="world1-fits"),
    pytest.param(None, (64, 3), (False, False), id="world1-fills-gpu"),
    pytest.param(_Backend("p2p", True), (64, 2), (True, False), id="p2p-async"),
    pytest.param(_Backend("p2p", False), (64, 2), (True, False), id="p2p-shared-gpu"),
    pytest.param(_Backend("nccl", True), (64, 2), (False, False), id="nccl-writer-and-reader-over"),
])
def test_a_plans_placement_is_decided_at_its_second_launch_from_grids_backends_and_sms(monkeypatch, backend, down_grid, want):
    from syncopy.runtime.streams import occupancy
    from syncopy.runtime.pipeline import run as pipeline
    from syncopy.runtime.pipeline.edges import Edge, Launch
    from syncopy.runtime.pipeline import Pipeline
    from syncopy.runtime.pipeline.run import Plan

    monkeypatch.setattr(pipeline, "interpreting", lambda: False)
    monkeypatch.setattr(occupancy, "sm_count", lambda device: 132)
    up, down = _Variant((8192,), False, backend), _Variant(down_grid, True, backend)
    plan = Plan([Edge(0, "C", 1, "A")], [up, down], {})
    launches = [Launch(None, (8192,), (), {}, None), Launch(None, down_grid, (), {}, None)]
    pipe, gpu = Pipeline(), torch.device("cuda", 0)
    cold = pipe._placement(plan, launches, gpu)
    assert (cold.side, cold.reader_first) == (False, False) and "first launch" in cold.why
    warm = pipe._placement(plan, launches, gpu)
    assert (warm.side, warm.reader_first) == want, warm.why
    assert pipe._placement(plan, launches, gpu) is warm  # decided once per launch shapes
