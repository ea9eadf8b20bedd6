"""The NaN-aware error oracle every test compares with (tests/oracles.py) sees what max() drops."""
import math

import pytest

from tests.oracles import worst


def test_max_drops_a_nan_that_worst_sees():
    nan = float("nan")
    assert max([0.0, nan]) == 0.0  # the blindness this guards against
    assert worst([0.0, nan]) == math.inf and worst([nan, 0.0]) == math.inf
    assert not worst([1e-6, nan]) < 1e-4


def test_worst_is_the_largest_error_and_refuses_an_empty_list():
    assert worst([1e-6, 3e-6, 2e-6]) == 3e-6
    assert worst(x for x in (0.5, 0.25)) == 0.5
    with pytest.raises(ValueError, match="nothing was checked"):
        worst([])
