"""Issue 31 item 6 on CPU worlds: loops over a sequence gathered along dim 1 (context parallelism,
tests/kernels/sequence_loops.py) wait per iteration instead of for every chunk before the loop.

- FA2's forward over [B, S, H, D] (`k_ptrs + start_n * stride_kn`, EVEN_N flipping between launches,
  ragged seqlen_k): before, 0 of its 8 tiles started before the last chunk landed; its loop keeps its
  written order (it re-assigns its variable).
- The guarded online softmax in FA2's pointer style runs its key loop in chunk-arrival order along
  dim 1 (first_row_along).
- Mamba's state-passing scan and the linear-attention recurrence (pointers stepped in the loop) keep
  their written order (they store every iteration) and still start before remote chunks land.
- The recurrence as flash-linear-attention writes it (`p_k += H * K`, constexprs only) waits for all its
  rows before its loop, said as a SyncopyFallbackWarning: its first tile starts once every chunk landed.

World 2 with the hold oracle (a remote chunk lands only once a tile polls it): the first tile of every
launch starts with only this rank's own chunks landed. World 3 on the default slow reordering link:
results, and every tile recorded its start. Three launches with new data each, poisoned buffers.
"""
from __future__ import annotations

import pytest

from tests.world import sequence_loop_workers as sw
from tests.world.harness import IN_ORDER, spawn

DECISIONS = {"fa2_bshd": "written", "guarded_attention_bshd": "arrival", "state_passing": "written",
             "linear_recurrence": "written", "linear_recurrence_constexpr_steps": "before"}
# Its pointers step by constexprs only (`p_k += H * K`): one wait before the loop for all its rows
# (SyncopyFallbackWarning), so its first tile starts once every chunk landed.
WAITS_FOR_ALL = {"linear_recurrence_constexpr_steps"}


def _check(results: list[dict], world: int, held: bool) -> None:
    total = world * sw.CHUNKS_PER_RANK
    for rank, r in enumerate(results):
        assert {name: got["decision"] for name, got in r.items()} == DECISIONS, (rank, r)
        for name, got in r.items():
            for launch, one in enumerate(got["launches"]):
                where = (rank, name, launch, one)
                assert one["error"] <= 1e-4, where
                assert one["total"] == total and len(one["starts"]) == sw.TILES[name], where
                assert all(arrived >= sw.CHUNKS_PER_RANK for arrived in one["starts"]), where
                if name in WAITS_FOR_ALL:
                    assert one["starts"][0] == total, where
                elif held:  # the first tile starts before any remote chunk lands: only this rank's own are there
                    assert one["starts"][0] == sw.CHUNKS_PER_RANK < total, where


@pytest.mark.world
def test_sequence_loops_along_dim_1_wait_per_iteration_under_the_hold_oracle():
    _check(spawn(sw.run_sequence_loops, 2, True, link=IN_ORDER, timeout_s=900), 2, held=True)


@pytest.mark.world
def test_sequence_loops_along_dim_1_are_right_on_three_ranks_over_a_slow_reordering_link():
    _check(spawn(sw.run_sequence_loops, 3, False, timeout_s=900), 3, held=False)
