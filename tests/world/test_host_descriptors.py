"""Issue 31 item 2 on CPU worlds: attention whose keys and values come in as tensor descriptors made on
the host (`triton.tools.tensor_descriptor.TensorDescriptor` over this rank's shards, the path Triton's
fused-attention tutorial takes on Hopper). The fused launch hands the kernel descriptors over the
gathered keys and values, and each tile waits only for the chunks up to its own last query row: read
directly from the parameters (in the kernel or in a helper handed them) or passed through the
tutorial's `_maybe_make_tensor_desc`. With every remote chunk held until a tile is seen waiting for it
(the hold oracle) tiles start before the last chunk lands. Three launches of new data, NaN-poisoned
receive buffers, worlds 2 (held) and 3 (a slow link), results against torch. The verifier runs them in
tests/world/test_verify_families.py."""
from __future__ import annotations

import pytest

from tests.world import helper_workers as aw
from tests.world import host_descriptor_workers as hw
from tests.world.harness import IN_ORDER, SLOW, spawn


def _tiles(world: int) -> int:
    return world * aw.ROWS // aw.BLOCK


def _correct(results: list[dict], world: int) -> None:
    for rank, r in enumerate(results):
        assert max(r["errors"]) <= 1e-4, (rank, r["errors"])
        assert r["warnings"] == [], (rank, r["warnings"])
        assert r["total"] == world * aw.CHUNKS
        assert all(len(starts) == _tiles(world) for starts in r["starts"]), r["starts"]


@pytest.mark.world
@pytest.mark.parametrize("name", list(hw.KERNELS))
def test_each_tile_starts_once_its_own_key_and_value_chunks_landed(name):
    results = spawn(hw.traced, 2, name, True, link=IN_ORDER, checked=False, timeout_s=600)
    _correct(results, 2)
    for rank, r in enumerate(results):
        for launch, starts in enumerate(r["starts"]):
            # Tile m reads key rows 0 .. 16 m + 15, chunks 0 .. m: held chunks land only once a tile
            # waits for them, so the first tile to start finds the last chunk still out.
            assert starts[0] < r["total"], (rank, launch, starts)
        if rank == 0:  # its first tiles need only its own chunks: they start before any remote one lands
            assert all(s[0] == aw.CHUNKS and s[1] == aw.CHUNKS for s in r["starts"]), r["starts"]


@pytest.mark.world
@pytest.mark.parametrize("name", list(hw.KERNELS))
def test_three_ranks_on_a_slow_link_match_torch(name):
    results = spawn(hw.traced, 3, name, False, link=SLOW, checked=name not in hw.HELPER_HANDED, timeout_s=600)
    _correct(results, 3)
