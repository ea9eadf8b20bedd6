"""Issue 31, items 1, 3 and 9 on CPU worlds: kernels written in the styles of public repositories,
whose helpers syncopy follows wherever they are defined.

Causal attention over gathered keys and values in the Triton tutorial's styles (descriptors made by
its `_maybe_make_tensor_desc` helper, in this file or imported, or made in the kernel; the key/value
loop in a helper handed the descriptors): each tile waits only for the chunks up to its own last
query row. With every remote chunk held until a tile is seen waiting for it (the hold oracle), tiles
start before the last chunk lands; the tutorial's own stage branches inside the helper are not
evaluated, so that kernel waits for every chunk, and its operator says so. Three launches of new data,
NaN-poisoned receive buffers, a slow link, worlds 2 and 3, results against torch. Then every kernel of
tests/kernels/attention_descriptors.py and tests/kernels/helper_modules.py (program ids from FlagGems'
`tle.program_id`, reads and stores through helpers of another module) through the verifier's
conditions in a world of 2 (attention: reordered and held; checked mode refuses a helper handed two
listed tensors)."""
from __future__ import annotations

import importlib

import pytest

from tests.world import helper_workers as hw
from tests.world.harness import IN_ORDER, spawn
from tests.world.test_verify import _check

OVERLAPPING = ["attn_desc_by_helper", "attn_desc_in_kernel", "attn_desc_imported"]


def _tiles(world: int) -> int:
    return world * hw.ROWS // hw.BLOCK


@pytest.mark.world
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("name", OVERLAPPING)
def test_each_tile_starts_once_its_own_key_and_value_chunks_landed(name, world):
    results = spawn(hw.traced_attention, world, name, True, link=IN_ORDER, checked=False, timeout_s=600)
    for rank, r in enumerate(results):
        assert max(r["errors"]) <= 1e-4, (rank, r["errors"])
        assert r["warnings"] == [], (rank, r["warnings"])
        assert r["total"] == world * hw.CHUNKS
        for launch, starts in enumerate(r["starts"]):
            assert len(starts) == _tiles(world), starts
            # Tile m reads key rows 0 .. 16 m + 15, chunks 0 .. m: held chunks land only once a tile
            # waits for them, so the first tile to start finds the last chunk still out.
            assert starts[0] < r["total"], (rank, launch, starts)
        if rank == 0:  # its first tiles need only its own chunks: they start before any remote one lands
            assert all(s[0] == hw.CHUNKS for s in r["starts"]), r["starts"]


@pytest.mark.world
def test_the_tutorials_stage_branches_wait_for_every_chunk_and_say_so():
    results = spawn(hw.traced_attention, 2, "attn_stage_branches", False, link=IN_ORDER, checked=False, timeout_s=600)
    path = importlib.import_module("tests.kernels.attention_descriptors").__file__
    line = open(path).read().splitlines().index("    if STAGE & 1:") + 1  # the first stage call's statement
    why = ("syncopy cannot bound the rows a helper called here reads (_attend_stage reads rows computed from lo, which it "
           "assigns in an if or a loop)")
    for rank, r in enumerate(results):
        assert max(r["errors"]) <= 1e-4, (rank, r["errors"])
        assert all(s == [r["total"]] * _tiles(2) for s in r["starts"]), r["starts"]
        assert r["warnings"] == [
            f"{path}:{line}: 'attn_stage_branches': wait for every chunk of desc_k: {why} (pass strict=True to refuse this)",
            f"{path}:{line}: 'attn_stage_branches': wait for every chunk of desc_v: {why} (pass strict=True to refuse this)",
        ], r["warnings"]


@pytest.mark.world
def test_every_kernel_of_the_helper_styles_agrees_under_every_condition():
    results = spawn(hw.run_verifier, 2, checked=False, timeout_s=900)
    helper_names = [f"{n} {p}" for n, ps in hw.HELPER_KERNELS.items() for p in ps]
    _check([{n: r[n] for n in helper_names} for r in results], helper_names,
           lambda name: name.endswith(("reduce_scatter", "all_reduce")))
    for rank, r in enumerate(results):
        for name in hw.ATTENTION:
            assert list(r[name]) == list(hw.ATTENTION_CONDITIONS), (rank, name, list(r[name]))
            for cond, s in r[name].items():
                assert s["differences"] == [] and s["launches"] == 2, (rank, name, cond, s)
            assert r[name]["held"]["waited"] > 0, (rank, name)


def test_every_kernel_of_the_two_families_is_verified():
    for module, listed in (("attention_descriptors", hw.ATTENTION), ("helper_modules", hw.HELPER_KERNELS)):
        mod = importlib.import_module(f"tests.kernels.{module}")
        assert sorted(listed) == sorted(n for n, v in vars(mod).items() if not n.startswith("_") and hasattr(v, "fn")
                                        and v.fn.__module__ == mod.__name__)
