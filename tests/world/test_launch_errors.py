"""Launch mistakes on a CPU world of two: each is one LaunchError line on the rank that made it,
raised before any transfer starts, and the operator still gives the right result when launched
right afterwards. One job of the shared world of two (tests/world/shared.py: the mistakes raise before
any transfer, so the group and every rank stay as they were) serves every test here."""
from __future__ import annotations

import pytest

from tests.world import launch_error_workers as workers
from tests.world import shared
from tests.world.workers import TOL

WORLD = 2
NOT_MEMBER = ("rank 1 is not a member of the group passed as group= (dist.new_group returned GroupMember.NON_GROUP_MEMBER "
              "on this rank); launch on a group that contains this rank, or skip the launch on this rank")


shared.register(__name__, WORLD, {"launch errors": (f"{workers.__name__}:run_launch_errors", ())})


def _world() -> list[dict]:
    return shared.results(__name__, WORLD, "launch errors")


def _right(outcome: dict) -> None:
    assert outcome["type"] is None, outcome
    assert outcome["err"] <= TOL["float32"], outcome


@pytest.mark.world
def test_group_without_this_rank_is_refused_before_anything_else():
    rank0, rank1 = _world()
    _right(rank0["not_member"])  # rank 0 is the whole group: a world of one
    assert rank1["not_member"] == {"type": "LaunchError", "str": NOT_MEMBER}
    assert rank0["template_not_member"] == {"type": None, "err": workers.ROWS}
    assert rank1["template_not_member"] == {"type": "LaunchError", "str": NOT_MEMBER}
    for r in (rank0, rank1):
        assert r["group_list"] == {"type": "LaunchError", "str": "group= must be a process group (from dist.new_group) or None "
                                                                 "for the default group, got list"}


@pytest.mark.world
def test_rows_past_the_gathered_tensor_name_the_row_count_to_pass():
    for r in _world():
        assert r["rows_past_gather"] == {"type": "LaunchError", "str": (
            "the grid reads rows up to 63 of 'A' but the gathered 'A' has 32 rows (16 per rank x 2 ranks); pass M = 32, "
            "the gathered rows")}
        _right(r["ag_right"])
        assert r["persistent_rows_past_gather"] == r["rows_past_gather"]  # a persistent kernel's tiles, the same words
        _right(r["persistent_right"])


@pytest.mark.world
def test_reduce_scatter_output_of_the_wrong_size_says_which_size():
    for r in _world():
        # Too few rows: the kernel would write past the reduce buffer (it used to corrupt memory).
        assert r["rs_small_output"] == {"type": "LaunchError", "str": (
            "'C' receives 8 rows per rank, but the kernel writes 32 rows = 16 per rank x 2; give 'C' 16 rows")}
        # The whole result as the output: the grid covers the kernel's rows, so the output is what is wrong.
        assert r["rs_full_output"] == {"type": "LaunchError", "str": (
            "'C' has 32 rows, but reduce_scatter gives each rank its rows of the result (rows / world) and the kernel "
            "writes 32 rows: give 'C' 16 rows (32 / 2 ranks); as passed, 'C' needs a grid that writes all 64 rows, and "
            "no program writes rows 32..47 (chunk 2)")}
        _right(r["rs_right"])


@pytest.mark.world
def test_template_ops_stay_callable_after_their_modules_are_imported():
    for r in _world():
        for key in ("template_first", "template_again", "template_after_import"):
            _right(r[key])
