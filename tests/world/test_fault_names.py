"""Launch options every rank must agree on, and injected faults that name no send (issue 15): one
LaunchError line on every rank at the first launch, never a hang or a fault silently skipped. The
shared world of three ranks serves every test here."""
from __future__ import annotations

import pytest

from tests.world import fault_name_workers as workers
from tests.world import shared

WORLD = 3


# A job of the shared world (tests/world/shared.py): each refusal is agreed at the first launch, before
# any transfer, so the world stays as it was.
shared.register(__name__, WORLD, {"fault names": (f"{workers.__name__}:run_fault_names", ())})


def _world() -> list[dict]:
    return shared.results(__name__, WORLD, "fault names")


def _refused(outcome: dict, text: str, kind: str = "LaunchError") -> None:
    assert outcome == {"type": kind, "str": text, "rank": None, "chunk": None, "epoch": None}, outcome


@pytest.mark.world
def test_ranks_that_disagree_on_verify_chunks_are_refused_on_every_rank():
    fix = ("give every rank the same verify_chunks (a rank that checksums its chunks cannot read a peer's that do not "
           "carry one)")
    for rank, r in enumerate(_world()):
        # Rank 0 alone checksums: each rank names the first rank that differs from it.
        other = 1 if rank == 0 else 0
        _refused(r["verify_differs"], f"rank {other} launched with verify_chunks={other == 0} but rank {rank} with "
                                      f"verify_chunks={rank == 0}; {fix}")
        for launch in r["verify_agrees"]:
            assert launch["type"] is None and launch["err"] <= r["tol"], launch


@pytest.mark.world
def test_ranks_that_inject_different_faults_are_refused_on_every_rank():
    for rank, r in enumerate(_world()):
        other = 1 if rank == 0 else 0
        spec = lambda k: "delay=0:0:100" if k == 0 else "(none)"  # noqa: E731
        _refused(r["faults_differ"], f"rank {other} injects faults {spec(other)} but rank {rank} {spec(rank)}; pass the "
                                     "same faults= on every rank (each fault names the rank that acts on it)")


@pytest.mark.world
def test_a_fault_on_a_chunk_or_rank_that_does_not_exist_is_refused_on_every_rank():
    for r in _world():
        _refused(r["chunk_past_shard"], "injected fault drop=1:2 names a send rank 1 never makes: CHUNK is a chunk of "
                                        "rank 1's own shard (0..1), and rank 1 sends 0, 1; name one of those", "FaultError")
        _refused(r["rank_past_group"], f"injected fault kill={WORLD}:0 names rank {WORLD}, but the group has {WORLD} rank(s); "
                                       f"name a rank 0..{WORLD - 1}", "FaultError")


@pytest.mark.world
def test_a_producer_fault_on_a_chunk_its_rank_never_sends_is_refused_on_every_rank():
    # A ring reduce_scatter passes on other ranks' chunks: rank 1 never sends its own (2 and 3).
    for r in _world():
        _refused(r["producer_own_chunk"], "injected fault corrupt=1:2 names a send rank 1 never makes: CHUNK is a global "
                                          "chunk id (rank d's rows of the result are chunks d*2..d*2+1), and rank 1 sends "
                                          "0, 1, 4, 5; name one of those", "FaultError")


@pytest.mark.world
def test_a_producer_delay_fault_delays_that_send_and_the_result_is_right():
    results = _world()
    for r in results:
        run = r["producer_delay"]
        assert run["type"] is None and all(e <= r["tol"] for e in run["errs"]), run
    src, chunk = workers.DELAY
    for sends in results[src]["producer_delay"]["sends"]:  # both launches: a fault holds every epoch
        (began, handed), = [v for (g, _), v in sends.items() if g == chunk]
        assert handed - began >= 0.9 * workers.DELAY_S, sends
