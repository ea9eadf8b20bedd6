"""Autotuned and heuristic kernels fused on CPU worlds (issue 13, item 1): Triton's tutorial matmul
with its @triton.autotune configs, and a split-K GEMM with the decorator stacked above
@triton.autotune (a config pre_hook) above @triton.heuristics; slow link, poisoned receive buffers,
two launches with new data each, against torch. Under the interpreter the config is the one
$SYNCOPY_AUTOTUNE_CONFIG names (default: the first), the same on every rank."""
from __future__ import annotations

import pytest

from tests.world import autotune_workers as aw
from tests.world import shared
from tests.world.harness import spawn
from tests.oracles import worst

TOL = {"fp16": 1e-2, "fp32": 1e-4}
# The default config's run sets nothing process-wide: a job of the shared world of 2 (tests/world/shared.py,
# a spawn of its own cost seconds); the world-3 cases below set the config and an import hook, so they spawn.
shared.register(__name__, 2, {"tutorial matmul": (f"{aw.__name__}:run_tutorial_matmul", (20, None)),
                              "pruned row sums": (f"{aw.__name__}:run_pruned_row_sums", (10,)),
                              "pruned row sums, instant": (f"{aw.__name__}:run_pruned_row_sums", (10, True))})


def _check(results: list[dict], tol: float) -> None:
    for rank, r in enumerate(results):
        assert "failure" not in r, f"rank {rank}:\n{r['failure']}"
        assert len(r["errors"]) == aw.LAUNCHES and worst(r["errors"]) <= tol, (rank, r["errors"])


@pytest.mark.world
def test_tutorial_matmul_fuses_with_its_first_autotune_config_by_default():
    results = shared.results(__name__, 2, "tutorial matmul")
    _check(results, TOL["fp16"])
    assert all(r["config"]["BLOCK_SIZE_M"] == 16 for r in results), results  # tests/kernels/autotuned.py's config 0


@pytest.fixture(scope="module")
def world3_split_k_and_softmax():
    # One world of 3 for the split-K, softmax and config-1 cases (each spawn costs ~20 s on CI).
    return spawn(aw.run_split_k_and_softmax, 3, 6, timeout_s=300)


@pytest.mark.world
def test_tutorial_matmul_takes_the_config_syncopy_autotune_config_names(world3_split_k_and_softmax):
    results = [r["tutorial_config1"] for r in world3_split_k_and_softmax]
    _check(results, TOL["fp16"])
    assert all(r["config"]["BLOCK_SIZE_M"] == 32 for r in results), results  # config 1


@pytest.mark.world
def test_overlap_stacked_above_autotune_and_heuristics(world3_split_k_and_softmax):
    _check([r["split_k"] for r in world3_split_k_and_softmax], TOL["fp32"])


@pytest.mark.world
def test_parameter_named_like_a_launch_option_is_the_parameter(world3_split_k_and_softmax):
    # The softmax tutorial's `num_stages: tl.constexpr`, passed as num_stages=2: as under plain Triton.
    _check([r["softmax"] for r in world3_split_k_and_softmax], TOL["fp32"])


def _check_pruned(results: list[dict]) -> None:
    # NaN-aware: `not e <= tol` holds for NaN, and every launch of both the fused kernel and its reference is listed.
    for rank, r in enumerate(results):
        assert "failure" not in r, f"rank {rank}:\n{r['failure']}"
        assert len(r["errors"]) == len(r["reference"]) == 3, r
        assert not [e for e in r["errors"] + r["reference"] if not e <= TOL["fp32"]], (rank, r)
        assert r["config"] == {"BLOCK_K": 8}, r  # config 0 (BLOCK_K 32) does not divide K = 24: pruned, as Triton prunes it


@pytest.mark.world
def test_the_interpreter_runs_a_config_pruning_leaves_world2():
    _check_pruned(shared.results(__name__, 2, "pruned row sums"))
    _check_pruned(shared.results(__name__, 2, "pruned row sums, instant"))


@pytest.mark.world
def test_the_interpreter_runs_a_config_pruning_leaves_world3(world3_split_k_and_softmax):
    _check_pruned([r["pruned"] for r in world3_split_k_and_softmax])
