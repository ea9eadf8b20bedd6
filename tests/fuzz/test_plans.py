"""Fuzzer (c): every lowered plan, run on paper by the symbolic executor (tests/fuzz/executor.py),
lands each chunk exactly once on every rank that needs it, adds every partial exactly once into
every sum, and has no wait that depends on itself -- for random patterns, worlds, chunk counts,
shard sizes, named, offset and explicit orders and explicit slices. Pure Python: many examples.

Budget: see tests/fuzz/profiles.py. Long run: `SYNCOPY_FUZZ=long python -m pytest tests/fuzz/<this file>`.
"""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from syncopy.runtime.state import plan as planning
from syncopy.runtime.transport.backends import nccl
from syncopy.schedule import Schedule, expand
from tests.fuzz import executor
from tests.fuzz.plans import schedules
from tests.fuzz.profiles import fuzz

LOWERING = {"all_gather": planning.all_gather, "all_to_all": planning.all_to_all}


def lower(s: Schedule, world: int, rows: int, nbytes: int, size: int) -> list:
    """Every rank's plan of one launch."""
    if s.pattern in LOWERING:
        return [LOWERING[s.pattern](s, r, world, rows) for r in range(world)]
    return [planning.reduce(s, r, world, rows, nbytes, size=size) for r in range(world)]


@st.composite
def launches(draw, max_world: int = 4):
    """(schedule, world, rows per rank, bytes, full rows): a shard big enough for the chunk count; the
    bytes pick one-shot all_reduce or not, and an all_reduce's last part may be short."""
    s, world = draw(schedules(max_world=max_world))
    units = s.units_per_rank or s.chunks_per_rank
    rows = draw(st.integers(units, units + 5))
    size = world * rows
    if s.pattern == "all_reduce":
        size = draw(st.integers((world - 1) * rows + 1, world * rows))  # rows per part = ceil(size / world)
    nbytes = draw(st.sampled_from([0, planning.ONE_SHOT_MAX_BYTES + 1]))
    return s, world, rows, nbytes, size


def _expanded(s: Schedule, world: int) -> Schedule | None:
    """The named order written out, when `s` has one: its plans must be as sound."""
    if s.transfers is not None or s.pattern == "all_reduce":
        return None  # an all_reduce's named order may run one-shot, its written-out form never does
    return expand(s, world)


@fuzz(ci=200, long=20_000)
@given(launches())
@example((Schedule(pattern="all_gather", tensor="A", chunks_per_rank=2, order="bidirectional_ring"), 2, 3, 0, 6))
@example((Schedule(pattern="all_reduce", tensor="A", chunks_per_rank=2, order=[2, 1]), 3, 2, 10**6, 5))
def test_every_lowered_plan_delivers_each_chunk_once_without_cycles(launch):
    s, world, rows, nbytes, size = launch
    plans = lower(s, world, rows, nbytes, size)
    problems, _ = executor.check(plans)
    assert not problems, f"{s.key()} on {world} ranks, {rows} rows:\n" + "\n".join(problems[:10])
    if s.pattern in LOWERING:
        nccl.rounds(plans)  # the NCCL backend orders the same transfers into rounds without a stall
    full = _expanded(s, world)
    if full is not None:
        problems, _ = executor.check(lower(full, world, rows, nbytes, size))
        assert not problems, f"expand({s.key()}, {world}):\n" + "\n".join(problems[:10])


# The executor itself: it must see what it is for.
def _gather(world=3, c=1, order="ring"):
    return lower(Schedule(pattern="all_gather", tensor="A", chunks_per_rank=c, order=order), world, 4, 0, 4 * world)


def test_the_executor_passes_a_ring():
    problems, events = executor.check(_gather())
    assert problems == [] and events == 12  # 3 ranks x (2 sends + 2 landings)


def test_the_executor_finds_a_relay_that_does_not_wait():
    plans = _gather()
    relay = next(i for i, n in enumerate(plans[1].nodes) if n.kind == "send" and n.after)
    plans[1].nodes[relay] = dataclasses.replace(plans[1].nodes[relay], after=())
    problems, _ = executor.check(plans)
    assert any("relays chunk 0 to rank 2 without waiting" in p for p in problems), problems


def test_the_executor_finds_a_lost_and_a_doubled_chunk():
    plans = _gather()
    plans[2].nodes = [n for n in plans[2].nodes if not (n.kind == "recv" and n.chunk == 1)]
    problems, _ = executor.check(plans)
    assert "rank 2 receives chunk 1 0 times, needs it 1 times" in problems
    assert "message 1 from rank 1 to rank 2 is sent 1 times and received 0 times" in problems


def test_the_executor_finds_a_cycle():
    plans = _gather(world=2)
    # Rank 0 sends its chunk only after rank 1's landed, and rank 1 likewise: each waits for the other.
    for r in (0, 1):
        plans[r].nodes = [dataclasses.replace(n, after=(1 - r,)) if n.kind == "send" else n for n in plans[r].nodes]
    problems, _ = executor.check(plans)
    assert problems and problems[-1].startswith("a wait depends on itself: "), problems


def test_the_executor_finds_a_partial_added_twice():
    s = Schedule(pattern="reduce_scatter", tensor="A", chunks_per_rank=1, order="local_first")
    plans = lower(s, 3, 2, 0, 6)
    extra = next(st for st in plans[1].steps if st.kind == "send" and st.peer == 0)
    plans[1].steps.append(extra)
    plans[0].steps.append(planning.Step("reduce", extra.chunk, 1))
    problems, _ = executor.check(plans)
    assert any("rank 0 ends chunk 0 with the partials {0: 1, 1: 2, 2: 1}" in p for p in problems), problems


@pytest.mark.parametrize("pattern", ["reduce_scatter", "all_reduce"])
def test_the_executor_passes_named_reduce_orders(pattern):
    for order in ("ring", "local_first", "bidirectional_ring"):
        for nbytes in (0, 10**6):
            problems, _ = executor.check(lower(Schedule(pattern=pattern, tensor="A", chunks_per_rank=2, order=order), 3, 3, nbytes, 9))
            assert problems == [], (order, nbytes, problems)
