"""CUDA_DEVICE_MAX_CONNECTIONS=1 (issue 28, defect 7), decided on the CPU with the variable's reading
monkeypatched: one hardware queue for every stream of the process.

- A warm world-of-one pipeline enqueued its reader (op 2) first, on a side stream: with one queue,
  the copy of op 2's result behind its kernel held op 1 back until op 2's waits ran out (a
  SyncopyTimeout on every launch). Now both run in order on the caller's stream, writer first, and
  `placement.why` and a one-time warning say that the overlap needs more than one queue.
- nccl's consumer rounds were enqueued before the fused kernel: with one queue, each round's wait
  for its NCCL kernel sat ahead of the fused kernel, which then started only after the last chunk
  landed. Now they are enqueued behind it, from a mark taken before it (the kernel's own slot is
  still what they follow), so they run beside it.
"""
from __future__ import annotations

import types

import pytest
import torch

from syncopy.runtime.pipeline import placement as placing
from syncopy.runtime.pipeline import run
from syncopy.runtime.streams import hardware_queues, occupancy
from syncopy.runtime.transport.backends import nccl
from tests.unit import test_nccl_deferred


def _world_of_one_chain():
    """A warm plan of two linked operators in a world of one (no backend: no transfers), op 2 a producer."""
    def variant(producer: bool):
        return types.SimpleNamespace(orders=types.SimpleNamespace(shape_key=lambda grid, bound: grid), producer=producer,
                                     kernel=types.SimpleNamespace(built=None), contexts=types.SimpleNamespace(table={}))

    plan = types.SimpleNamespace(variants=[variant(False), variant(True)], edges=[types.SimpleNamespace(src=0, dst=1)],
                                 placements={((4, 1, 1), (8, 1, 1)): None})  # seen once: warm
    launches = [types.SimpleNamespace(grid=(4, 1, 1), bound={}, kwargs={}), types.SimpleNamespace(grid=(8, 1, 1), bound={}, kwargs={})]
    return plan, launches

@pytest.fixture
def nccl_rank0(monkeypatch):
    """test_nccl_deferred's rank 0 of 3 on CPU streams: (backend, context, what a failure aborted)."""
    yield from test_nccl_deferred.backend.__wrapped__(monkeypatch)


@pytest.fixture
def gpu_decision(monkeypatch):
    """Pipeline._placement as on an H100, without one."""
    monkeypatch.setattr(run, "interpreting", lambda: False)
    monkeypatch.setattr(occupancy, "sm_count", lambda device: 132)
    told = getattr(placing, "_tell_single_queue", None)  # said once per process: said again in each test
    if told is not None:
        told.cache_clear()

    def decide():
        plan, launches = _world_of_one_chain()
        return run.Pipeline._placement(object.__new__(run.Pipeline), plan, launches, torch.device("cuda", 0))

    yield decide
    if told is not None:
        told.cache_clear()


def test_with_several_queues_the_world_of_one_reader_goes_first_beside_the_writer(gpu_decision, monkeypatch):
    monkeypatch.setattr(hardware_queues, "single_queue", lambda: False)
    p = gpu_decision()
    assert (p.side, p.reader_first) == (True, True), p


def test_with_one_queue_the_writer_goes_first_in_order_and_the_placement_says_why(gpu_decision, monkeypatch):
    monkeypatch.setattr(hardware_queues, "single_queue", lambda: True)
    with pytest.warns(UserWarning, match="CUDA_DEVICE_MAX_CONNECTIONS=1 puts every stream in one hardware queue"):
        p = gpu_decision()
    assert (p.side, p.reader_first) == (False, False), p
    assert p.why.startswith(placing.IN_ORDER) and "CUDA_DEVICE_MAX_CONNECTIONS=1" in p.why, p.why
    assert "raise it to 2 or more" in p.why  # what to change


def test_the_variable_is_read_as_cuda_reads_it(monkeypatch):
    for text, expected in (("1", 1), ("", 8), ("x", 8), ("0", 1), ("64", 32), ("4", 4)):
        hardware_queues.connections.cache_clear()
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", text)
        assert hardware_queues.connections() == expected, text
    hardware_queues.connections.cache_clear()


class _Recording(nccl.HostStreams):
    """The CPU engine, with a GPU's single-queue ordering asked for, recording what it enqueues."""

    def __init__(self, log):
        self.log = log

    @property
    def rounds_before_kernel(self):
        return not hardware_queues.single_queue()

    def submit(self, stream, body, ops, event=None):
        self.log.append("round")
        super().submit(stream, body, ops, event)

    def mark(self, stream):
        self.log.append("mark")
        return super().mark(stream)


@pytest.mark.parametrize("one_queue", [False, True])
def test_nccl_consumer_rounds_go_behind_the_kernel_with_one_queue(nccl_rank0, monkeypatch, one_queue):
    be, ctx, _ = nccl_rank0
    log: list[str] = []
    be.engine = _Recording(log)
    monkeypatch.setattr(hardware_queues, "single_queue", lambda: one_queue)
    monkeypatch.setattr(nccl.Rounds, "_round", lambda self, ops, hs: None)  # no transport
    ctx.begin(100)
    rounds = nccl.Rounds(be, ctx, 1, be.events[1]).start()
    log.append("kernel")  # where the launch enqueues the fused kernel
    rounds.join()
    be.check(wait=True)
    n = len(be.rounds)
    if one_queue:
        assert log == ["mark", "kernel"] + ["round"] * n, log  # behind the kernel, after a mark taken before it
    else:
        assert log == ["round"] * n + ["kernel"], log  # ahead of it: the first round may start before the kernel
