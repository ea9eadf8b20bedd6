"""Fused operators inside real jobs, on CPU worlds: sub-groups of the world (tensor-parallel groups
in both layouts at once, then the whole world; a group's first launch while the other ranks run
their own collectives; templates on sub-groups), threads, inference mode and no_grad, gradients.
The shared world of 4 (tests/world/shared.py) and one of 2 serve every test here (subgroup_workers.py)."""
from __future__ import annotations

import pytest

from tests.world.harness import spawn
from tests.world import shared
from tests.world import subgroup_workers as workers
from tests.world.workers import once

TOL = 1e-4
GRAD = ("launch of 'ag_gemm_kernel': argument '{}' requires grad, but fused operators are not differentiable yet (its "
        "gradient would be lost); pass {}.detach(), or launch under torch.no_grad() or torch.inference_mode()")


shared.register(__name__, 4, {"subgroups": (f"{workers.__name__}:run_subgroups", ())})  # tests/world/shared.py


def _world4() -> list[dict]:
    return shared.results(__name__, 4, "subgroups")


@once
def _world2() -> list[dict]:
    return spawn(workers.run_real_scripts, 2, timeout_s=400)


def _right(outcomes) -> None:
    for o in outcomes if isinstance(outcomes, list) else [outcomes]:
        assert o["type"] is None, o
        assert o["err"] <= TOL, o


@pytest.mark.world
@pytest.mark.parametrize("case", ["contiguous", "strided", "world", "strided_again"])
def test_groups_of_one_world_launch_one_operator_at_once(case):
    """Two TP groups launch the same operator with the same shapes on their own data ({0,1},{2,3}
    and {0,2},{1,3}), then the whole world, then a group again: every rank gets its group's result."""
    for r in _world4():
        _right(r[case])


@pytest.mark.world
@pytest.mark.parametrize("case", ["contiguous", "strided", "world", "strided_again", "while_others_reduce"])
def test_every_chunk_of_a_group_launch_lands_while_a_tile_waits_for_it(case):
    """The premise of the group launches' results (issue 26): the peers' chunks land late, after the
    tiles that read them started, so the numbers test the waits. Asserted from the holding link's
    records (subgroup_workers.HOLD), not a link's latency: on every launch every chunk of the
    group's other ranks was released once a program polled its flag (down), none at the bound."""
    ranks = _world4()
    for rank, r in enumerate(ranks[:2] if case == "while_others_reduce" else ranks):
        for launch, o in enumerate(r[case], start=1):
            where = f"rank {rank} {case} launch {launch}"
            assert o["remote"] and o["waited"] == o["remote"], (where, o)
            assert o["unwaited"] == [], (where, o)


@pytest.mark.world
def test_a_group_launches_first_while_the_others_all_reduce():
    ranks = _world4()
    for r in ranks[:2]:
        _right(r["while_others_reduce"])
    for r in ranks[2:]:
        assert r["their_all_reduce"] == 2.0**20


@pytest.mark.world
def test_templates_on_a_sub_group():
    for r in _world4():
        _right(r["template_op"])
        _right(r["gemm_rs"])
        assert set(r["every_template"]) == {"ag_gemm_persistent", "ag_rmsnorm", "a2a_gemm", "gemm_ar"}
        for name, outcome in r["every_template"].items():
            assert outcome["type"] is None and outcome["err"] <= TOL, (name, outcome)


@pytest.mark.world
@pytest.mark.parametrize("backend", ["p2p", "nccl"])
def test_gpu_backends_protocols_on_sub_groups(backend):
    """p2p's handshakes and nccl's rounds (their CPU variants, as in test_host_backends.py) per group."""
    for r in _world4():
        _right(r[backend])


@pytest.mark.world
def test_two_threads_launching_one_operator_take_turns():
    for r in _world2():
        _right(r["threads"])
        _right(r["after_threads"])


@pytest.mark.world
@pytest.mark.parametrize("backend", ["gloo", "p2p", "nccl"])
def test_inference_mode_and_no_grad_with_new_shapes(backend):
    for r in _world2():
        _right(r["modes"][backend])


@pytest.mark.world
def test_inputs_that_require_grad_are_refused_in_one_line():
    for r in _world2():
        g = r["grad"]
        assert g["a"] == {"type": "LaunchError", "str": GRAD.format("A", "A")}
        assert g["b"] == {"type": "LaunchError", "str": GRAD.format("B", "B")}
        assert g["reference"] == g["a"]
        assert g["template_op"] == g["a"]
        _right(g["detached"])
        _right(r["no_grad_requires_grad"])


@pytest.mark.world
def test_a_group_made_after_one_was_destroyed_gets_a_new_cache_key():
    for r in _world2():
        assert r["token_differs"] is True
