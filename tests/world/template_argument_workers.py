"""Rank functions for tests/world/test_template_arguments.py: the GEMM templates launched with
arguments a user gets wrong, each reported as {"type", "str"}, then launched right (a refused
launch leaves the template usable; the check adds nothing to a warm launch's result)."""
from __future__ import annotations


def _outcome(launch) -> dict:
    try:
        err = launch()
    except Exception as exc:  # the test asserts on the type and the one line
        return {"type": type(exc).__name__, "str": str(exc)}
    return {"type": None, "err": err}


def run_template_arguments(rank: int, world: int) -> dict:
    import torch

    from syncopy import templates as T

    def rs(a, b):
        return lambda: (T.gemm_rs(a, b) - T.get("gemm_rs").module.reference(a, b)).abs().max().item()

    def ar(a, b):
        return lambda: (T.gemm_ar(a, b) - T.get("gemm_ar").module.reference(a, b)).abs().max().item()

    torch.manual_seed(rank)
    a, b = torch.randn(32, 16), torch.randn(16, 16)
    return {
        "uneven rows": _outcome(rs(torch.randn(33, 16), b)),
        "inner sizes": _outcome(rs(a, torch.randn(12, 16))),
        "dtypes": _outcome(rs(a, b.half())),
        "not a matrix": _outcome(rs(a[None], b)),
        "rows differ between ranks": _outcome(rs(torch.randn(32 + 16 * rank, 16), b)),
        "columns differ between ranks": _outcome(rs(a, torch.randn(16, 16 + 16 * rank))),
        "gemm_ar rows differ between ranks": _outcome(ar(torch.randn(16 + 8 * rank, 16), b)),
        "ag_gemm inner sizes": _outcome(lambda: T.ag_gemm(a, torch.randn(8, 16))),
        "right": _outcome(rs(a, b)),
        "right again": _outcome(rs(a, b)),
        "gemm_ar right": _outcome(ar(a, b)),
    }
