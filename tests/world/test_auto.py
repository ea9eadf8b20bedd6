"""`chunks_per_rank: auto` on a CPU world: the planner's choice is what runs, on every rank (rank
0's, even where another rank's environment names another profile), per shard shape, and the result
still equals all_gather_into_tensor + matmul."""
from __future__ import annotations

import pytest

from tests.world.harness import spawn
from tests.world import workers

WORLD = 2
# An emulated link that makes the gather about as long as the GEMM of the 24-row shards, so that
# the planner splits them (cpu-gloo picks 3 chunks); 2-row shards cap it at 2 chunks.
BANDWIDTH_BPS = 4.0e5
ROWS = [24, 2]


def _expected(rows: int):
    """The planner's own answer, asked directly (not through syncopy.planner.auto)."""
    from syncopy.planner import choose_for, load_profile, make_workload

    m = WORLD * rows
    profile = load_profile("cpu-gloo").with_emulated_link(bandwidth_Bps=BANDWIDTH_BPS)
    # The grouped GEMM's A shard is rows x GEMM_K; its output is M x GEMM_N.
    work = make_workload("ag_gemm", m, workers.GEMM_N, workers.GEMM_K, "fp32")
    return choose_for(work, profile, WORLD, chunk_choices=[c for c in (1, 2, 3, 4, 6, 8, 12, 16) if c <= rows])


@pytest.mark.world
def test_auto_runs_the_planners_choice_and_matches_the_reference():
    results = spawn(workers.run_auto, WORLD, ROWS, BANDWIDTH_BPS, timeout_s=180)
    big = _expected(24)
    assert big.chunks_per_rank == 3, "the setting no longer makes the planner split; retune BANDWIDTH_BPS"
    for rows in ROWS:
        plan = _expected(rows)
        for rank, per_rows in enumerate(results):
            r = per_rows[rows]
            bad = [f"{label}: error {err:.3g} > {tol:g}" for label, err, tol in r["errors"] if not err <= tol]
            assert not bad, f"rank {rank}: " + "; ".join(bad)
            # The schedule said chunks_per_rank: 1; the overlap() argument asked for auto.
            assert (r["chunks"], r["plan_chunks"], r["order"]) == (plan.chunks_per_rank, plan.chunks_per_rank, plan.order), rank
            assert r["chunks"] <= rows
            res = r["resolution"]
            assert (res.chunks_per_rank, res.order, res.shape, res.hardware) == (
                plan.chunks_per_rank, plan.order, (WORLD * rows, workers.GEMM_N, workers.GEMM_K), "cpu-gloo + emulated link")
            assert res.reason == plan.reason
            assert r["planned"] == res.describe() and res.describe() in r["summary"]
            assert f"chunks_per_rank {plan.chunks_per_rank}, order {plan.order}" in r["planned"]
