"""Full-form plans of every pattern on a CPU world of 3: what `syncopy expand` writes for all_to_all,
reduce_scatter and all_reduce runs and gives the minimal form's result, and plans written by hand
(all_to_all with `into`, the natural direct reduce-scatter, a one-shot all-reduce) run right.
Numerics against the torch reference, two launches each, NaN-poisoned buffers, a slow link."""
from __future__ import annotations

import pytest

from tests.world import explicit_plan_workers, shared

WORLD = 3
SHAPES = {"a2a_gemm": (96, 32, 32), "gemm_rs": (96, 32, 24), "gemm_ar": (50, 32, 24)}  # gemm_ar: a short last part
CASES = [
    dict(template="a2a_gemm", expand="ring"),
    dict(template="a2a_gemm", plan="hand"),
    dict(template="gemm_rs", expand="ring"),
    dict(template="gemm_rs", expand="bidirectional_ring"),
    dict(template="gemm_rs", plan="hand"),
    dict(template="gemm_ar", expand="ring"),
    dict(template="gemm_ar", expand="local_first", chunks=1),
    dict(template="gemm_ar", plan="hand"),
]


shared.register(__name__, WORLD, {"full forms": (f"{explicit_plan_workers.__name__}:run_full_forms",  # tests/world/shared.py
                                                  ([{**c, "shape": SHAPES[c["template"]]} for c in CASES], 0.002))})


def _results() -> list:
    return shared.results(__name__, WORLD, "full forms")


def _name(case: dict) -> str:
    return f"{case['template']} " + (f"expand {case['expand']}" if "expand" in case else "hand-written plan")


@pytest.mark.world
def test_full_form_plans_of_every_pattern_match_torch():
    bad = [f"rank {rank}: {_name(r['case'])}: errors {r['errs']} > {r['tol']}"
           for rank, results in enumerate(_results()) for r in results if not all(e <= r["tol"] for e in r["errs"])]
    assert not bad, "\n".join(bad)


@pytest.mark.world
def test_expanded_plans_give_the_minimal_forms_result():
    for rank, results in enumerate(_results()):
        for r in results:
            if "expand" in r["case"]:
                assert r["apart"] <= 1e-5, f"rank {rank}: {_name(r['case'])}: {r['apart']} from the minimal form"
            if r["case"]["template"] != "a2a_gemm":
                assert r["algorithm"] == "explicit", f"rank {rank}: {_name(r['case'])} ran {r['algorithm']}"
