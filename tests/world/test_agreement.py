"""The usual mistakes, made by one rank of a group inside a world of three: every rank of the group
raises one line that names the rank at fault and what differs, from the launch's own exchange
(runtime/launch/agreement.py) -- not a chunk's timeout -- and the group launches right afterwards;
a rank that refuses after the exchange, or never makes a launch, is named by the peers it leaves
waiting. One spawn (tests/world/agreement_workers.py) runs every case, each on a group of its own."""
from __future__ import annotations

import re

import pytest

from tests.world import agreement_workers as workers
from tests.world.harness import spawn
from tests.world.workers import once

SAME = ("every rank of the group must launch the same operators, with the same shapes, the same number of times, in the same "
        "order")


@once
def _world() -> list[dict]:
    return spawn(workers.run_mistakes, 3, timeout_s=400)


def _right(outcome: dict) -> None:
    assert outcome["type"] is None and outcome["err"] <= 1e-4, outcome  # NaN-aware: a NaN is inf there


def _refused_at_once(outcome: dict, text: str) -> None:
    """A LaunchError with exactly `text`, raised by the exchange: no chunk's wait ran out first."""
    assert outcome["type"] == "LaunchError" and not outcome["timeout"], outcome
    assert outcome["str"] == text, outcome


@pytest.mark.world
def test_shard_rows_that_differ_from_the_second_launch_on_name_both_shapes_on_every_rank():
    r0, r1, r2 = _world()
    for rank, r in ((0, r0), (1, r1)):
        _right(r["rows_first"])
        other = 1 - rank
        theirs, mine = ([8, 16], [12, 16]) if rank == 1 else ([12, 16], [8, 16])
        _refused_at_once(r["rows_second"], f"rank {other} passed 'A' with shape {theirs} torch.float32 but rank {rank} passed "
                                          f"{mine} torch.float32; all_gather needs the same size along dim 0 on every rank "
                                          "(pad the last shard)")
        for after in r["rows_after"]:  # the group was never broken: no chunk moved
            _right(after)
    assert "rows_first" not in r2  # outside the group


@pytest.mark.world
def test_a_dtype_that_differs_at_a_warm_launch_is_named():
    r0, r1, _ = _world()
    _right(r0["dtype_first"])
    _refused_at_once(r0["dtype_second"], "rank 1 passed 'A' as torch.float16 but rank 0 passed torch.float32 (both [8, 16]); "
                                        "all_gather needs the same dtype on every rank: cast every rank's 'A' to one dtype")
    _refused_at_once(r1["dtype_second"], "rank 0 passed 'A' as torch.float32 but rank 1 passed torch.float16 (both [8, 16]); "
                                        "all_gather needs the same dtype on every rank: cast every rank's 'A' to one dtype")
    for r in (r0, r1):
        _right(r["dtype_after"])


@pytest.mark.world
def test_a_non_contiguous_shard_on_one_rank_is_named_by_every_other_rank_at_once():
    results = _world()
    own = "'A' must be contiguous; pass A.contiguous()"
    _refused_at_once(results[2]["noncontig"], own)
    for rank in (0, 1):
        _refused_at_once(results[rank]["noncontig"], f"rank {rank}: launch 1 on this group (mm): rank 2 refused it: {own}")
    for r in results:
        _right(r["noncontig_after"])


@pytest.mark.world
def test_another_operator_launched_in_between_is_named_on_both_ranks():
    _, r1, r2 = _world()
    for rank, r in ((1, r1), (2, r2)):
        _right(r["other_first"])
        other = 3 - rank
        theirs, mine = (1, 2) if rank == 1 else (2, 1)
        # Group ranks: world rank 1 is rank 0 of the group [1, 2], world rank 2 its rank 1.
        g_rank, g_other = rank - 1, other - 1
        _refused_at_once(r["other_between"], f"rank {g_rank}: launch 2 on this group: rank {g_other} launched mm with "
                                            f"chunks_per_rank: {theirs} but rank {g_rank} with chunks_per_rank: {mine}; every "
                                            "rank must launch the same operators in the same order, each with the same "
                                            "schedule (the same file and the same overlap() overrides)")
        _right(r["other_after"])


@pytest.mark.world
def test_another_kernel_altogether_is_named_with_its_pattern_and_tensor():
    r0, r1, _ = _world()
    _refused_at_once(r0["kernel_between"], f"rank 0: launch 1 on this group: rank 1 launched mm (all_gather of 'A') but rank 0 "
                                          f"ag_gemm_kernel (all_gather of 'A'); {SAME}")
    _refused_at_once(r1["kernel_between"], f"rank 1: launch 1 on this group: rank 0 launched ag_gemm_kernel (all_gather of 'A') "
                                          f"but rank 1 mm (all_gather of 'A'); {SAME}")


@pytest.mark.world
def test_a_rank_that_refuses_after_the_exchange_is_named_by_the_peers_its_chunks_leave_waiting():
    results = _world()
    own = results[1]["short_second"]
    assert own["type"] == "LaunchError" and not own["timeout"], own
    assert own["str"] == ("launch of 'mm': the grid writes rows up to 23 of 'C', which has 8 rows; give 'C' at least 24 rows, "
                          "or a grid and bounds that write 8"), own
    for rank in (0, 2):
        _right(results[rank]["short_first"])
        r = results[rank]["short_second"]
        # Its peers wait for its chunks and time out, naming rank 1 and quoting its own error.
        assert r["type"] == "SyncopyTimeout", r
        assert r["str"].endswith(f" (epoch 2) and it never arrived; rank 1 refused launch 2 on this group: {own['str']}; {SAME}"), r


@pytest.mark.world
def test_a_rank_launching_fewer_times_is_named_with_its_launch_count():
    r0, r1, _ = _world()
    for r in (r0, r1):
        _right(r["fewer_first"])
    r = r0["fewer_second"]
    # A warm launch: what never comes is the missing rank's chunks, so it is a SyncopyTimeout naming one,
    # and the rank, and how many launches it made.
    assert r["type"] == "SyncopyTimeout", r
    assert r["str"] == (f"rank 0 waited {workers.TIMEOUT_S:g}s for chunk 0 of rank 1 (epoch 2) and it never arrived; launch 2 "
                        f"on this group: rank(s) 1 did not make it within {workers.TIMEOUT_S:g}s (rank 1 made 1 launch here, "
                        f"the last of mm); {SAME}, or raise timeout_s"), r
    # The group's launches are out of step now: later ones refuse at once, saying why.
    assert r0["fewer_refused"]["type"] == "LaunchError", r0["fewer_refused"]
    assert re.match(r"^rank 0: launch 2 of this group never met every peer's; create a new process group", r0["fewer_refused"]["str"])


@pytest.mark.world
def test_a_warm_launch_that_does_not_wait_for_its_exchange_still_names_the_rank_at_fault():
    # The GPU path: the exchange completes in the background; a chunk's timeout asks what it found
    # (agreement.cause), and so does the next launch, which raises the earlier disagreement.
    r0, r1, _ = _world()
    for rank, r in ((0, r0), (1, r1)):
        d = r["deferred"]
        assert d["first"] == 1 and d["second_n"] == 2, d
        other = 1 - rank
        rows = {0: 8, 1: 12}
        assert d["cause"] == (f"rank {other} passed 'A' with shape [{rows[other]}, 16] torch.float32 but rank {rank} passed "
                              f"[{rows[rank]}, 16] torch.float32; all_gather needs the same size along dim 0 on every rank "
                              "(pad the last shard)"), d
        rows = {0: 8, 1: 10}
        assert d["next"] == (f"LaunchError: rank {other} passed 'A' with shape [{rows[other]}, 16] torch.float32 but rank {rank} "
                             f"passed [{rows[rank]}, 16] torch.float32; all_gather needs the same size along dim 0 on every rank "
                             "(pad the last shard)"), d
