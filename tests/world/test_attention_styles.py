"""Issue 31 items 7 and 10 on CPU worlds: attention kernels as public repositories write them
(tests/kernels/attention_styles.py), fused with `tensor: [K, V]`, poisoned receive buffers, three
launches with new data each, checked against torch on the gathered K and V.

- FA2's forward with packed [S, H, D] K/V and a ragged seqlen_k (BLOCK_N 32 over 48 keys) used to be
  refused ("the grid reads rows up to 63 ... has 48 rows": the bound merged the dead arm of
  `if EVEN_N & EVEN_M`); EVEN_N flips between launches on the same tensors (BLOCK_N 16: even), and
  the third launch (causal) must not reuse the first's tile order.
- SGLang's split-KV decode over a page table waits per read under an `if`: every program now records
  its tile start (it recorded none: "0/0 tiles").

FA2's key loop (`k_ptrs + start_n * stride_kn`) waits per iteration (issue 31 item 6): its tiles start
before the loop, not after every chunk their keys reach has landed.

World 2 with the hold oracle (a remote chunk lands only once a tile polls it): the first FA2 tile and
the first decode tile start with only this rank's own chunks landed. World 3 on the default slow
reordering link: results, and every tile recorded its start.
"""
from __future__ import annotations

import pytest

from tests.world import attention_styles_workers as aw
from tests.world.harness import IN_ORDER, spawn

CHUNKS_PER_RANK = 2


def _check(results: list[dict], world: int, exact: bool) -> None:
    total = world * CHUNKS_PER_RANK
    for rank, r in enumerate(results):
        for launch, (got, (block_n, causal)) in enumerate(zip(r["fa2"], aw.FA2_LAUNCHES)):
            assert got["error"] <= 1e-4, (rank, launch, got)
            assert got["total"] == total and len(got["starts"]) == 2 * aw.H, (rank, launch, got)
            # This rank's own chunks are there from the start; a tile starts before its key loop waits.
            assert all(arrived >= CHUNKS_PER_RANK for _, arrived in got["starts"]), (rank, launch, got)
            if exact:  # held: the first tile starts before any remote chunk lands
                assert got["starts"][0][1] == CHUNKS_PER_RANK < total, (rank, launch, block_n, causal, got)
        for launch, got in enumerate(r["decode"]):
            assert got["error"] <= 1e-4, (rank, launch, got)
            # Every program (requests x heads x most splits) recorded its start.
            assert len(got["starts"]) == len(aw.SEQ_LENS) * aw.H * max(aw.SPLITS), (rank, launch, got)
            if exact:  # the first tile starts before it waits: only this rank's own chunks have landed
                assert got["starts"][0][1] == CHUNKS_PER_RANK < total, (rank, launch, got)


@pytest.mark.world
def test_fa2_and_split_kv_decode_are_right_and_show_their_overlap_under_the_hold_oracle():
    _check(spawn(aw.run_styles, 2, True, link=IN_ORDER, timeout_s=600), 2, exact=True)


@pytest.mark.world
def test_fa2_and_split_kv_decode_are_right_on_three_ranks_over_a_slow_reordering_link():
    _check(spawn(aw.run_styles, 3, False, timeout_s=600), 3, exact=False)
