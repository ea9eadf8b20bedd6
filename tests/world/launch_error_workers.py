"""Rank functions for tests/world/test_launch_errors.py (run by `syncopy.runtime.worlds.processes.spawn`).

Each launch that a user gets wrong is caught and reported as {"type", "str"}; each launch done right
afterwards reports how far its result is from the torch reference, so the tests also see that a
refused launch leaves the operator usable. Shapes are tiny: the Triton interpreter is slow.
"""
from __future__ import annotations

ROWS, COLS = 16, 16  # per-rank rows of A (ag_gemm), N and K of every product; one 16-row tile each way
META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)


def _outcome(launch) -> dict:
    try:
        err = launch()
    except Exception as exc:  # the tests assert on the type and the one line
        return {"type": type(exc).__name__, "str": str(exc)}
    return {"type": None, "err": err}


def run_launch_errors(rank: int, world: int) -> dict:
    """ag_gemm and gemm_rs launched wrongly, then rightly, on this rank; and the template ops."""
    import torch
    import torch.distributed as dist

    from syncopy import templates as T

    torch.manual_seed(rank)
    a, b = torch.randn(ROWS, COLS), torch.randn(COLS, COLS)
    out: dict = {}
    ag = T.get("ag_gemm")
    fused = ag.fused(timeout_s=20)

    def ag_launch(m: int, group=None):
        c = torch.empty(m, COLS)
        fused[(m // 16,)](a, b, c, m, COLS, COLS, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                          **META, GROUP_M=1, group=group)
        return (c - ag.module.reference(a, b, group)).abs().max().item()

    # A group without this rank (new_group is collective: every rank calls it).
    only_0 = dist.new_group([0])
    out["not_member"] = _outcome(lambda: ag_launch(ROWS, only_0))  # rank 0: a world of one
    out["template_not_member"] = _outcome(lambda: T.ag_gemm(a, b, group=only_0, **META, GROUP_M=1).shape[0])
    out["group_list"] = _outcome(lambda: ag_launch(ROWS * world, [0, 1]))
    # M beyond the gathered rows, then the right M on the same operator.
    out["rows_past_gather"] = _outcome(lambda: ag_launch(2 * ROWS * world))
    out["ag_right"] = _outcome(lambda: ag_launch(ROWS * world))

    # The same on a persistent kernel (its probe records tiles, not programs).
    pe = T.get("ag_gemm_persistent")
    fused_pe = pe.fused(timeout_s=20)

    def pe_launch(m: int):
        c = torch.empty(m, COLS)
        fused_pe[(2,)](a, b, c, m, COLS, COLS, **META, GROUP_M=1, NUM_SMS=2)
        return (c - ag.module.reference(a, b)).abs().max().item()

    out["persistent_rows_past_gather"] = _outcome(lambda: pe_launch(2 * ROWS * world))
    out["persistent_right"] = _outcome(lambda: pe_launch(ROWS * world))

    rs = T.get("gemm_rs")
    fused_rs = rs.fused(timeout_s=20)
    m = ROWS * world  # the result's rows; each rank keeps m / world

    def rs_launch(rows: int):
        x, y = torch.randn(m, COLS), torch.randn(COLS, COLS)
        c = torch.empty(rows, COLS)
        fused_rs[(m // 16, 1)](x, y, c, m, COLS, COLS, x.stride(0), x.stride(1), y.stride(0), y.stride(1), COLS, 1, **META)
        return (c - rs.module.reference(x, y)).abs().max().item()

    out["rs_small_output"] = _outcome(lambda: rs_launch(m // (2 * world)))
    out["rs_full_output"] = _outcome(lambda: rs_launch(m))
    out["rs_right"] = _outcome(lambda: rs_launch(m // world))

    # The template ops: callable again, and after their folder's modules were imported.
    def template():
        c = T.ag_gemm(a, b, **META, GROUP_M=1)
        return (c - ag.module.reference(a, b)).abs().max().item()

    out["template_first"] = _outcome(template)
    out["template_again"] = _outcome(template)
    import syncopy.templates.ag_gemm.kernel  # noqa: F401  (binds the folder's module on the package)

    out["template_after_import"] = _outcome(template)
    return out
