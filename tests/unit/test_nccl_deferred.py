"""nccl's deferred launch bookkeeping, without NCCL or a peer: what a launch whose rounds never
complete reports once the bound after its kernel passed, what one that completes leaves behind,
and that the host running a ring of launches ahead waits for the oldest. The rounds run on the
CPU engine's worker stream (HostStreams); a round that "never completes" is one whose body blocks
until the test releases it."""
from __future__ import annotations

import collections
import threading
import time

import pytest
import torch

from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.transport.backends import nccl
from syncopy.runtime.transport.backends.nccl import HostStreams, NcclBackend, Rounds
from syncopy.runtime.state.context import Context
from syncopy.runtime.streams.error_ring import LaunchErrors
from syncopy.runtime.state.plan import all_gather
from syncopy.schedule import Schedule

BOUND_S = 0.3


@pytest.fixture
def backend(monkeypatch):
    """Rank 0 of 3 on a ring, 2 chunks a rank: its rounds lowered, a worker stream, no transport."""
    monkeypatch.setattr(nccl, "wait_bound", lambda timeout_s: BOUND_S)
    monkeypatch.setattr(LaunchErrors, "RING", 4)  # a ring of 4 launches (64 on a GPU)
    schedule = Schedule(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring")
    ctx = Context(all_gather(schedule, 0, 3, 4), (4, 2), torch.float32, torch.device("cpu"), 0)
    ctx.schedule = schedule
    be = object.__new__(NcclBackend)
    be.engine, be.timeout_s, be.owns_nccl = HostStreams(), 0.1, True
    be.stream, be.ops = be.engine.stream(), be.engine.make_ops(BOUND_S)
    be.rounds, be.errors, be.pending, be.events = None, None, collections.deque(), []
    be._lower(ctx)
    be.errors = LaunchErrors(ctx, be.ops, be.engine.pin, be.timeout_s)
    be.events = [[be.ops.event() for _ in range(len(be.rounds) + 1)] for _ in range(LaunchErrors.RING)]
    aborted = []  # what a failure did to the group: marked broken (its later launches refuse), communicator aborted
    be.engine.abort = lambda pg: aborted.append(pg)
    monkeypatch.setattr(nccl, "mark_broken", lambda group, why: aborted.append(("broken", group)))
    be.nccl, be.group, be.user_group = "communicator", "control group", "group"
    monkeypatch.setattr(nccl, "control_group", lambda group, timeout_s=None: "control group")
    yield be, ctx, aborted
    be.stream.put(lambda: None, always=True)


def _launch(be, ctx, epoch: int, body) -> Rounds:
    """A launch whose rounds each run `body(ops)` on the worker stream instead of NCCL."""
    ctx.begin(100)
    r = Rounds(be, ctx, epoch, be.events[epoch % LaunchErrors.RING])
    for ops, event in r.rounds:
        be.engine.submit(be.stream, lambda hs, ops=ops: body(ops), be.ops, event)
    r.join()
    return r


def test_a_launch_whose_rounds_complete_leaves_nothing_pending(backend):
    be, ctx, aborted = backend
    assert [[kind for kind, _, _ in ops] for ops in be.rounds] == [["send", "recv"]] * 4  # a ring of 3, 2 chunks a rank
    _launch(be, ctx, 1, lambda ops: None)
    be.check(wait=True)
    assert not be.pending and not aborted and ctx.broken is None


def test_a_receive_that_never_completes_is_a_timeout_naming_its_chunk_once_the_bound_passed(backend):
    be, ctx, aborted = backend
    release = threading.Event()
    # The first round completes; the second one's receive never does (its peer never sent).
    done = []

    def body(ops):
        if done:
            release.wait(10)
        done.append(ops)

    _launch(be, ctx, 1, body)
    be.check()  # the kernel is done, the bound has not passed: nothing to say yet
    assert len(be.pending) == 1
    time.sleep(BOUND_S + 0.05)
    with pytest.raises(SyncopyTimeout) as err:
        be.check()
    recv = next(g for kind, g, _ in be.rounds[1] if kind == "recv")
    assert err.value.rank == 0 and err.value.epoch == 1 and err.value.chunk == divmod(recv, 2)
    assert f"its NCCL receive never completed within {BOUND_S:g}s" in str(err.value)
    # The operator is done for: its rounds got a bound more, then the communicator was aborted.
    assert ctx.broken.startswith("SyncopyTimeout: rank 0 waited") and aborted == [("broken", "control group"), "communicator"] and not be.pending
    release.set()


def test_sends_a_peer_never_received_are_a_launch_error_naming_the_peer(backend):
    be, ctx, aborted = backend
    release = threading.Event()
    # Every receive lands; the last round's send is never taken.
    last = be.rounds[-1]
    be.rounds[-1] = [op for op in last if op[0] == "send"]
    stuck_done = threading.Event()
    _launch(be, ctx, 1, lambda ops: (release.wait(10), stuck_done.set()) if ops is be.rounds[-1] else None)
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as err:
        be.check(wait=True)  # synchronize(): waits the bound, not forever
    assert BOUND_S <= time.monotonic() - t0 and not stuck_done.is_set()  # the bound, not the stuck round's end
    peer = be.rounds[-1][0][2]
    assert str(err.value).startswith(f"rank 0: NCCL sends of launch 1 to rank(s) {peer} did not complete within {BOUND_S:g}s")
    assert aborted == [("broken", "control group"), "communicator"]
    release.set()


def test_the_host_a_ring_of_launches_ahead_waits_for_the_oldest(backend, monkeypatch):
    be, ctx, _ = backend
    gate = threading.Event()
    _launch(be, ctx, 1, lambda ops: gate.wait(10))
    for epoch in range(2, LaunchErrors.RING + 1):
        _launch(be, ctx, epoch, lambda ops: None)
    assert len(be.pending) == LaunchErrors.RING
    threading.Timer(0.1, gate.set).start()
    monkeypatch.setattr(Rounds, "start", lambda self: self)  # no transport: only the wait for a slot is under test
    be.start(ctx, LaunchErrors.RING + 1)  # the oldest launch's events are about to be reused: it waits for them
    assert gate.is_set() and len(be.pending) < LaunchErrors.RING


def test_synchronize_reads_a_launchs_rounds_before_the_next_kernels_words(backend):
    # On a GPU the next launch's kernel, and the copy of its error words, sit on the compute stream
    # behind this launch's wait for its rounds: with this launch's sends never received, that
    # copy never completes. synchronize() must report the sends within the bound, not wait for it.
    be, ctx, aborted = backend
    release = threading.Event()
    be.rounds[-1] = [op for op in be.rounds[-1] if op[0] == "send"]
    stuck_done = threading.Event()
    _launch(be, ctx, 1, lambda ops: (release.wait(10), stuck_done.set()) if ops is be.rounds[-1] else None)
    _launch(be, ctx, 2, lambda ops: None)
    epoch, slot = be.errors.pending[-1]
    assert epoch == 2
    be.errors.done[slot].clear()  # launch 2's words: behind launch 1's rounds on the compute stream
    with pytest.raises(LaunchError, match="^rank 0: NCCL sends of launch 1 to rank"):
        be.check(wait=True)
    assert not stuck_done.is_set() and aborted == [("broken", "control group"), "communicator"]  # read within the bound
    release.set()
