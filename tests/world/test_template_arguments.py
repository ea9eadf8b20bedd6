"""A template's launch names its own arguments (issue 27, item 7): gemm_rs refused a mismatch by
naming 'C', the output it allocates, and read past b where a's columns and b's rows differed. Each
mistake is one LaunchError line, the same on every rank, and the template still launches right
afterwards (one job of the shared world of two: every refusal comes before anything moves)."""
from __future__ import annotations

import pytest

from tests.world import shared
from tests.world import template_argument_workers as workers

WORLD = 2
shared.register(__name__, WORLD, {"template arguments": (f"{workers.__name__}:run_template_arguments", ())})
SUMS = "give every rank's a the same rows and its b the same columns, in one dtype"


def _world() -> list[dict]:
    return shared.results(__name__, WORLD, "template arguments")


def _refused(case: str, rank: int) -> str:
    outcome = _world()[rank][case]
    assert outcome["type"] == "LaunchError", outcome
    return outcome["str"]


LOCAL = {
    "uneven rows": "syncopy.templates.gemm_rs: a has 33 rows, which 2 ranks cannot share evenly (rank r keeps rows "
                   "r*M/2..(r+1)*M/2 of the sum); give a a multiple of 2 rows",
    "inner sizes": "syncopy.templates.gemm_rs: a has 16 columns but b has 12 rows; a @ b needs them equal: give b 16 rows "
                   "or a 12 columns",
    "dtypes": "syncopy.templates.gemm_rs: a is float32 but b is float16; cast both to one dtype",
    "not a matrix": "syncopy.templates.gemm_rs: a has 3 dimensions [1, 32, 16]; pass a matrix (2 dimensions)",
    "ag_gemm inner sizes": "syncopy.templates.ag_gemm: a has 16 columns but b has 8 rows; a @ b needs them equal: give b "
                           "16 rows or a 8 columns",
}


@pytest.mark.world
@pytest.mark.parametrize("case", LOCAL)
def test_a_mistake_of_one_rank_names_the_templates_argument(case):
    assert [_refused(case, r) for r in range(WORLD)] == [LOCAL[case]] * WORLD


@pytest.mark.world
def test_arguments_that_differ_between_ranks_are_named_as_the_template_takes_them():
    assert [_refused("rows differ between ranks", r) for r in range(WORLD)] == [
        "syncopy.templates.gemm_rs: rank 1 passed a with 48 rows but rank 0 passed a with 32 rows; reduce_scatter sums "
        f"every rank's a @ b: {SUMS}",
        "syncopy.templates.gemm_rs: rank 0 passed a with 32 rows but rank 1 passed a with 48 rows; reduce_scatter sums "
        f"every rank's a @ b: {SUMS}"]
    assert _refused("columns differ between ranks", 0) == (
        "syncopy.templates.gemm_rs: rank 1 passed b with 32 columns but rank 0 passed b with 16 columns; reduce_scatter "
        f"sums every rank's a @ b: {SUMS}")
    assert _refused("gemm_ar rows differ between ranks", 1) == (
        "syncopy.templates.gemm_ar: rank 0 passed a with 16 rows but rank 1 passed a with 24 rows; all_reduce sums every "
        f"rank's a @ b: {SUMS}")
    assert all("'C'" not in _refused(case, r) for case in ("rows differ between ranks", "columns differ between ranks")
               for r in range(WORLD))


@pytest.mark.world
@pytest.mark.parametrize("case", ["right", "right again", "gemm_ar right"])
def test_the_template_launches_right_after_its_refusals(case):
    for rank in range(WORLD):
        outcome = _world()[rank][case]
        assert outcome["type"] is None, outcome
        assert outcome["err"] <= 1e-4, outcome  # fp32 sums of 16 to 24 products, in another order than torch's
