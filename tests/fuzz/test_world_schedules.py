"""Fuzzer (b): random valid all_gather schedules (named orders, peer-offset lists, named orders
written out, random explicit relay plans with `after` waits and pulls, explicit slices; 1 to 3
chunks, ragged shards) on two kernels (a 2-D GEMM and a row RMS norm) give what torch gives, on CPU
worlds of 1 to 4 ranks, two launches each with new data, NaN-poisoned receive buffers and the slow
reordering link of tests/world/harness.py.

A world spawn costs seconds, so one world of 4 ranks runs every case (tests/fuzz/world.py): a case
for w ranks runs on the group of ranks 0..w-1. The cases are drawn in this process by derandomized
hypothesis runs; a failure names the case with its schedule (pin it in world.PINNED to keep it).
Budget: see tests/fuzz/profiles.py (`SYNCOPY_FUZZ=long`: more cases per world).
"""
from __future__ import annotations

import pytest

from tests.fuzz import world as shared


@pytest.mark.world
@pytest.mark.parametrize("world", shared.WORLDS, ids=[f"world{w}" for w in shared.WORLDS])
def test_random_schedules_match_torch(world):
    count, bad = shared.failures(lambda c: "text" not in c and c["world"] == world)
    assert count >= 1
    assert not bad, f"{len(bad)} failing of {count} cases:\n" + "\n".join(bad)


def test_the_drawn_schedules_cover_the_space():
    """The derandomized draw reaches explicit plans, slices and more than one chunk on some world."""
    cases = [c for c in shared.all_cases() if "text" not in c]
    orders = {str(c["schedule"]["order"]) for c in cases}
    assert "explicit" in orders and any(o.startswith("[") for o in orders) and len(orders) >= 3, orders
    assert any("chunks" in c["schedule"] for c in cases)
