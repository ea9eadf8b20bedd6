"""Autotuned and heuristic kernels fused on CPU worlds (issue 13, item 1): Triton's tutorial matmul
with its @triton.autotune configs, and a split-K GEMM with the decorator stacked above
@triton.autotune (a config pre_hook) above @triton.heuristics; slow link, poisoned receive buffers,
two launches with new data each, against torch. Under the interpreter the config is the one
$SYNCOPY_AUTOTUNE_CONFIG names (default: the first), the same on every rank."""
from __future__ import annotations

import pytest

from tests.world import autotune_workers as aw
from tests.world.harness import spawn

TOL = {"fp16": 1e-2, "fp32": 1e-4}


def _check(results: list[dict], tol: float) -> None:
    for rank, r in enumerate(results):
        assert "failure" not in r, f"rank {rank}:\n{r['failure']}"
        assert len(r["errors"]) == aw.LAUNCHES and max(r["errors"]) <= tol, (rank, r["errors"])


@pytest.mark.world
@pytest.mark.parametrize("world, rows, config", [(2, 20, None), (3, 11, "1")], ids=["world2-first-config", "world3-config1"])
def test_tutorial_matmul_fuses_with_its_autotune_configs(world, rows, config):
    results = spawn(aw.run_tutorial_matmul, world, rows, config, timeout_s=300)
    _check(results, TOL["fp16"])
    block_m = 16 if config is None else 32  # tests/kernels/autotuned.py's configs 0 and 1
    assert all(r["config"]["BLOCK_SIZE_M"] == block_m for r in results), results


@pytest.fixture(scope="module")
def world3_split_k_and_softmax():
    return spawn(aw.run_split_k_and_softmax, 3, 6, timeout_s=300)


@pytest.mark.world
def test_overlap_stacked_above_autotune_and_heuristics(world3_split_k_and_softmax):
    _check([r["split_k"] for r in world3_split_k_and_softmax], TOL["fp32"])


@pytest.mark.world
def test_parameter_named_like_a_launch_option_is_the_parameter(world3_split_k_and_softmax):
    # The softmax tutorial's `num_stages: tl.constexpr`, passed as num_stages=2: as under plain Triton.
    _check([r["softmax"] for r in world3_split_k_and_softmax], TOL["fp32"])
