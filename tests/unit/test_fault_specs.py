"""Injected faults name real sends (issue 15): what each rank's plan lets a fault name, the one line
for a fault that names none, the faults' canonical text (the ranks compare it), and `syncopy run`
stopping on such a fault as on any user mistake instead of counting it as a launch's outcome.
The collective check on CPU worlds: tests/world/test_fault_names.py."""
from __future__ import annotations

import pytest

from syncopy.errors import FaultError
from syncopy.run import RunOptions, RunResult, _one_launch, first_failure
from syncopy.runtime.transport import link as links
from syncopy.runtime.state import plan as planning
from syncopy.runtime.transport.link import Faults
from syncopy.schedule import from_dict


def _schedule(pattern: str, order: str = "ring"):
    return from_dict({"pattern": pattern, "kernel": "k", "tensor": "A", "dim": 0, "chunks_per_rank": 2, "order": order})


def test_the_same_faults_read_the_same_whatever_order_they_were_given_in():
    a = Faults.of(drop=[(1, 0), (0, 2)], delay={(1, 0): 0.3}, kill=(2, 1), corrupt=[(0, 0)])
    b = Faults.of(corrupt=[(0, 0)], kill=(2, 1), delay={(1, 0): 0.3}, drop=[(0, 2), (1, 0)])
    assert a.spec() == b.spec() == "corrupt=0:0,delay=1:0:300,drop=0:2,drop=1:0,kill=2:1"
    assert Faults().spec() == ""


@pytest.mark.parametrize("order", ["ring", "local_first", "bidirectional_ring"])
def test_a_consumer_rank_sends_each_of_its_own_chunks_and_no_relay_counts(order):
    for rank in range(3):
        assert links.sends(planning.all_gather(_schedule("all_gather", order), rank, 3, 8)) == {(rank, 0), (rank, 1)}
    assert links.sends(planning.all_gather(_schedule("all_gather", order), 0, 1, 8)) == set()  # a world of one


def test_a_ring_reduce_scatter_rank_sends_every_chunk_but_its_own():
    made = [links.sends(planning.reduce(_schedule("reduce_scatter"), rank, 3, 16)) for rank in range(3)]
    assert made == [{(0, 2), (0, 3), (0, 4), (0, 5)}, {(1, 0), (1, 1), (1, 4), (1, 5)}, {(2, 0), (2, 1), (2, 2), (2, 3)}]


def test_a_fault_that_names_no_send_is_one_line_saying_what_can_be_named():
    made = {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert links.missing(Faults.of(drop=[(1, 1)], delay={(0, 0): 0.5}), 2, made, False, 2) is None
    assert links.missing(Faults.of(delay={(1, 3): 0.25}), 2, made, False, 2) == (
        "injected fault delay=1:3 names a send rank 1 never makes: CHUNK is a chunk of rank 1's own shard (0..1), and "
        "rank 1 sends 0, 1; name one of those")
    assert links.missing(Faults.of(drop=[(0, 0)]), 1, set(), False, 2) == (
        "injected fault drop=0:0 names a send, but a world of one rank sends nothing; drop the fault or launch on more ranks")
    assert links.missing(Faults.of(corrupt=[(5, 0)]), 2, made, True, 2) == (
        "injected fault corrupt=5:0 names rank 5, but the group has 2 rank(s); name a rank 0..1")


def test_syncopy_run_stops_on_a_fault_that_names_no_send():
    class Template:
        @staticmethod
        def launch(fused, **inputs):
            raise FaultError("injected fault drop=1:5 names a send rank 1 never makes: ...")

    opts = RunOptions("ag_gemm", faults=Faults.of(drop=[(1, 5)]))
    with pytest.raises(FaultError):  # not an outcome "error" of the launch: the run's one-line user error
        _one_launch(None, Template, {}, opts, 2, 2)


def test_a_killed_run_reports_when_the_launcher_found_the_dead_rank():
    # The killed rank leaves no records; its launch's start (a stamp it writes) to the launcher's report.
    assert first_failure(RunResult([], {1: 75}, kill_detected_s=1.25)) == {
        "it": None, "rank": 1, "outcome": "died", "s": 1.25, "error": "rank 1 died (exit code 75); the launcher stopped the others"}
