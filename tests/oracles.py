"""Oracles that cannot be blind to NaN: Python's `max()` drops a NaN that is not its first argument
(`max([0.0, nan])` is 0.0), so an error list compared with `max(...) < tol` passes a launch that
produced NaN. Every test compares errors through `worst`."""
from __future__ import annotations

import math


def worst(errors) -> float:
    """The largest of `errors` (an iterable of numbers), or inf if any is NaN. An empty list is an
    error of the test (a launch that was never checked), not a pass."""
    values = [float(e) for e in errors]
    if not values:
        raise ValueError("no errors to compare: nothing was checked")
    return math.inf if any(math.isnan(v) for v in values) else max(values)
