"""Epochs past 2^31: the device's int32 epoch words and flags wrap, waits compare them cyclically,
producer counters and targets wrap alike; nothing is reset and no launch is wrong (a plain `<`
comparison would let every wait after the wrap pass at once: silently wrong results)."""
from __future__ import annotations

import pytest

from tests.world import epoch_workers as workers
from tests.world import shared
from tests.oracles import worst

shared.register(__name__, 2, {"across the wrap": (f"{workers.__name__}:run_across_the_wrap", ())})  # tests/world/shared.py


@pytest.mark.world
def test_consumer_and_producer_launches_cross_the_int32_wrap():
    for rank, r in enumerate(shared.results(__name__, 2, "across the wrap")):
        for name in ("ag_gemm", "gemm_rs", "gemm_ar"):
            got = r[name]
            assert worst(got["errs"]) < 1e-3, (rank, name, got)
            assert got["epoch"] == workers.NEAR + 4 == 2**31 + 1, got
            assert got["word"] == -(2**31) + 1, got  # what the kernels read: the wrapped word
            if name != "ag_gemm":
                # The tile counters crossed the int32 limit too (4 launches of >= 1 tile per chunk).
                assert all(c < 0 for c in got["counters"]), (rank, name, got)
