"""Uneven all_to_all (MoE routing) on CPU worlds of 2 and 3: split sizes that change every launch,
ragged, empty (an expert with no tokens, a peer sending nothing, a rank receiving nothing) and skewed
(every token to one rank), through the a2a_gemm template against all_to_all_single with the same
splits and the per-expert GEMM; NaN-poisoned receive buffers, checked mode, and a link that holds
each chunk until a program is seen waiting for it (so a tile that waits for the wrong chunks reads NaN)."""
from __future__ import annotations

import pytest

from syncopy.runtime.transport.link import Link
from tests.world import moe_workers, shared

# launches[l][r] = rank r's counts [d][e] at launch l: rows it sends to expert e of rank d.
WORLD2 = [
    dict(chunks=2, launches=[
        [[[5, 0], [2, 9]], [[0, 3], [7, 1]]],            # ragged, an empty expert on each side
        [[[0, 0], [17, 4]], [[1, 0], [0, 0]]],           # skewed: rank 1 receives 21 rows, rank 0 one
        [[[3, 3], [0, 0]], [[0, 0], [6, 2]]],            # no peer sends anything: only local rows
    ]),
    dict(chunks=3, exchange=True, launches=[            # output_split_sizes left out: exchanged
        [[[1, 0], [0, 0]], [[0, 2], [0, 0]]],            # rank 1 receives nothing at all; 1-2 rows < 3 chunks
        [[[4, 4], [4, 4]], [[4, 4], [4, 4]]],            # equal counts through the uneven path
    ]),
]
WORLD3 = [
    dict(chunks=2, launches=[
        [[[2, 1], [0, 0], [5, 6]], [[0, 0], [3, 0], [1, 1]], [[9, 0], [0, 4], [0, 0]]],
        [[[0, 0], [0, 0], [0, 7]], [[0, 0], [0, 0], [13, 2]], [[0, 0], [0, 0], [1, 0]]],  # everything to rank 2
    ]),
]


HOLD = Link(latency_s=0.002, hold_until_waited=True, hold_s=3.0)


# Every rank receives ACROSS[l][s] rows from rank s: 12 rows at every launch (one grid, one set of
# arguments), so only the split sizes say that the chunks moved; empty blocks between two others.
ACROSS = [[4, 0, 8], [8, 4, 0], [2, 0, 10]]


# Jobs of the shared worlds (tests/world/shared.py): every operator gets the holding link; a split that
# does not fit is refused on every rank before anything moves.
for _size, (_cases, _across) in {2: (WORLD2, None), 3: (WORLD3, ACROSS)}.items():
    shared.register(__name__, _size, {"moe": (f"{moe_workers.__name__}:moe_world", (_cases, _across, _size == 2, HOLD))})


def _world(world: int) -> list[dict]:
    return shared.results(__name__, world, "moe")


def _received(cases: list[dict], world: int, case: int, launch: int, rank: int) -> int:
    return sum(sum(cases[case]["launches"][launch][src][rank]) for src in range(world))


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3])
def test_routed_launches_match_all_to_all_single_and_the_expert_gemm(world):
    cases = WORLD2 if world == 2 else WORLD3
    for rank, per_case in enumerate(r["routed"] for r in _world(world)):
        for ci, r in enumerate(per_case):
            assert len(r["errs"]) == 2 * len(cases[ci]["launches"])  # against all_to_all_single and recomputed
            for k, err in enumerate(r["errs"]):
                assert err <= 1e-4, f"world {world} rank {rank} case {ci} launch {k // 2}: error {err}"
            for li, rows in enumerate(r["rows"]):
                assert rows == _received(cases, world, ci, li, rank)


@pytest.mark.world
def test_split_sizes_that_do_not_fit_are_refused_in_one_line():
    for rank, got in enumerate(r["errors"] for r in _world(2)):
        assert got["short"] == ("launch of 'expert_gemm_kernel': input_split_sizes [4, 3] sums to 7 but 'X' has 8 rows along "
                                "dim 0; give counts that sum to 8 (rows sent to each rank, in rank order)")
        assert got["length"] == ("launch of 'expert_gemm_kernel': input_split_sizes has 1 counts but the group has 2 ranks; "
                                 "give one count per rank")
        assert "has a negative count" in got["negative"]
        assert got["output"] == ("launch of 'expert_gemm_kernel': output_split_sizes [5, 3] on rank 0 but the ranks send "
                                 "it [4, 4] (rank 0's input_split_sizes[0] is 4); pass output_split_sizes = what "
                                 "all_to_all_single of the input counts gives, or leave it out")
        assert got["one_rank_sum"] == ("launch of 'expert_gemm_kernel': rank 1 refused its split sizes (its own error says "
                                       "why), so rank 0 does not launch either; fix the split sizes there" if rank == 0 else
                                       "launch of 'expert_gemm_kernel': input_split_sizes [5, 5] sums to 10 but 'X' has 8 rows "
                                       "along dim 0; give counts that sum to 8 (rows sent to each rank, in rank order)")
        assert got["one_rank_output"] == ("launch of 'expert_gemm_kernel': output_split_sizes [3, 5] on rank 0 but the ranks "
                                          "send it [4, 4] (rank 0's input_split_sizes[0] is 4); pass output_split_sizes = what "
                                          "all_to_all_single of the input counts gives, or leave it out")
        assert got["good"] == "ran" and got["good_err"] <= 1e-4
        assert all("\n" not in v for v in got.values() if isinstance(v, str))


@pytest.mark.world
def test_tiles_across_blocks_wait_for_the_chunks_of_this_launchs_splits():
    for rank, per_launch in enumerate(r["across"] for r in _world(3)):
        for li, r in enumerate(per_launch):
            assert r["err"] <= 1e-6 and r["ref_err"] <= 1e-6, f"rank {rank} launch {li}: {r}"
