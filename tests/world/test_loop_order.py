"""Issue 30, part A, on CPU worlds of 2 and 3: loops over the gathered rows whose order matters
(tests/kernels/loops.py, one kernel per numbered case and its variants) keep their written order and
equal torch on every launch; the loops proven to run in any order (the controls) run in arrival
order and equal torch too. Three launches with new data each, on the shared world's slow
reordering link with NaN-poisoned receive buffers (worlds 2 and 3), and again on an instant link
without poisoning (world 2: it repeats the slow link's code path, world 3 adds only ranks to it).
Before, every kernel but two of these ran in arrival order: wrong numbers, or NaN (case 4).
"""
from __future__ import annotations

import pytest

from tests.world import loop_order_workers as lw
from tests.world import shared

TOL = 1e-4
WRITTEN = {
    1: ["decayed_sum_with_max", "decayed_sum_two_step_max", "rescaled_plain_sum"],
    2: ["sum_of_running_max", "count_new_records", "sum_until_max_passes", "max_of_running_sum", "sum_above_running_min"],
    3: ["max_history_helper", "max_history_nested_helper", "max_history_store", "sum_and_atomic_helper"],
    4: ["padded_attention", "padded_attention_exp2", "padded_attention_half_guard", "padded_attention_mask_tensor"],
}
ARRIVAL = ["guarded_padded_attention", "sum_max_count"]
NAMES = [n for case in WRITTEN.values() for n in case] + ARRIVAL

#: (world, link) pairs: the slow link on worlds 2 and 3, the instant link on world 2 only.
RUNS = [(2, "slow"), (2, "instant"), (3, "slow")]
for _size, _link in RUNS:  # jobs of the shared worlds (tests/world/shared.py: checked mode, the slow reordering link)
    shared.register(__name__, _size, {_link: (f"{lw.__name__}:run_cases", (NAMES, _link == "instant"))})


@pytest.mark.world
@pytest.mark.parametrize("world, link", RUNS, ids=[f"world{w}-{link}" for w, link in RUNS])
def test_loops_keep_their_order_unless_proven_and_equal_torch(world, link):
    results = shared.results(__name__, world, link)
    problems = [p for r in results for p in r["problems"]]
    assert not problems, "\n".join(problems)
    bad = [f"rank {rank}: {label}: {err:.3g}" for rank, r in enumerate(results) for label, err in r["errors"] if not err <= TOL]
    assert not bad, "\n".join(bad)
    assert len(results[0]["errors"]) == lw.LAUNCHES * len(NAMES)
    want = {**{n: "written" for case in WRITTEN.values() for n in case}, **{n: "arrival" for n in ARRIVAL}}
    assert all(r["decisions"] == want for r in results)
