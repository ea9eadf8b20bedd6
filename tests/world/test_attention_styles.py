"""Issue 31 items 7 and 10 on CPU worlds: attention kernels as public repositories write them
(tests/kernels/attention_styles.py), fused with `tensor: [K, V]`, poisoned receive buffers, three
launches with new data each, checked against torch on the gathered K and V.

- FA2's forward with packed [S, H, D] K/V and a ragged seqlen_k (BLOCK_N 32 over 48 keys) used to be
  refused ("the grid reads rows up to 63 ... has 48 rows": the bound merged the dead arm of
  `if EVEN_N & EVEN_M`); EVEN_N flips between launches on the same tensors (BLOCK_N 16: even), and
  the third launch (causal) must not reuse the first's tile order.
- SGLang's split-KV decode over a page table waits per read under an `if`: every program now records
  its tile start (it recorded none: "0/0 tiles").

World 2 with the hold oracle (a remote chunk lands only once a tile polls it): each tile starts with
exactly the chunks it reads landed (FA2, rank 0: its own and those its keys reach), the first decode
tile with only this rank's own. World 3 on the default slow reordering link: results, and every tile
started with at least the chunks it reads.
"""
from __future__ import annotations

import math

import pytest

from tests.world import attention_styles_workers as aw
from tests.world.harness import IN_ORDER, spawn

CHUNKS_PER_RANK = 2


def _fa2_needs(world: int, tile: int, block_n: int, causal: bool) -> int:
    """Chunks FA2's query tile `tile` (grid (2, H), x fastest) reads from: its keys' rows rounded up to
    whole blocks, masked to the keys there are."""
    m = tile % 2
    keys = min((m + 1) * aw.BLOCK_M, aw.GATHERED) if causal else aw.GATHERED
    rows = min(math.ceil(keys / block_n) * block_n, aw.GATHERED)
    return math.ceil(rows / (aw.GATHERED // world // CHUNKS_PER_RANK))


def _check(results: list[dict], world: int, exact: bool) -> None:
    total = world * CHUNKS_PER_RANK
    for rank, r in enumerate(results):
        for launch, (got, (block_n, causal)) in enumerate(zip(r["fa2"], aw.FA2_LAUNCHES)):
            assert got["error"] <= 1e-4, (rank, launch, got)
            assert got["total"] == total and len(got["starts"]) == 2 * aw.H, (rank, launch, got)
            for tile, arrived in got["starts"]:
                # A tile waited for every chunk it reads (and this rank's own are there from the start).
                need = _fa2_needs(world, tile, block_n, causal)
                own = set(range(rank * CHUNKS_PER_RANK, (rank + 1) * CHUNKS_PER_RANK))
                at_least = len(set(range(need)) | own)
                assert arrived >= at_least, (rank, launch, tile, arrived, at_least)
                if exact and rank == 0:  # held: nothing else landed
                    assert arrived == at_least, (rank, launch, tile, arrived, at_least)
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
