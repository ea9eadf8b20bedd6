"""nccl beside the process's other NCCL communicators (issue 28, defect 6), on the CPU.

DDP's or FSDP's all-reduces run on other communicators, and where the default group is bound to a
device rounds run on the user's own group: syncopy caps neither. So the fused kernel leaves free
what one of their kernels may take (NCCL_MAX_CTAS / NCCL_MAX_NCHANNELS, else NCCL's 64), the grid
check's refusal says so and how to give SMs back, the process is warned once that NCCL needs
NCCL_LAUNCH_ORDER_IMPLICIT=1 there (NCCL 2.26+), and a launch that times out beside one names it
as a possible cause. The other communicators are monkeypatched in (torch's table of groups holds
only gloo groups on CPU); the timeout runs on the CPU engine of test_nccl_deferred.
"""
from __future__ import annotations

import threading
import warnings

import pytest

from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.streams import occupancy
from syncopy.runtime.transport.backends import nccl
from tests.unit import test_nccl_deferred

H100 = 132


@pytest.fixture
def env(monkeypatch):
    for var in ("SYNCOPY_NCCL_SMS", "NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS", "NCCL_LAUNCH_ORDER_IMPLICIT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(nccl, "_told_beside", [], raising=False)
    return monkeypatch


def beside(monkeypatch, groups=("ddp",)):
    monkeypatch.setattr(occupancy, "other_nccl_communicators", lambda: list(groups))


@pytest.fixture
def nccl_rank0(monkeypatch):
    """test_nccl_deferred's rank 0 of 3 on CPU streams: (backend, context, what a failure aborted)."""
    yield from test_nccl_deferred.backend.__wrapped__(monkeypatch)


def test_alone_the_kernel_leaves_syncopys_own_share(env):
    beside(env, ())
    assert occupancy.reserved_sms("nccl") == occupancy.own_sms() == occupancy.DEFAULT_NCCL_SMS
    occupancy.check_grid(H100 - 8, H100, "nccl", True, "k")  # every SM but our communicator's


def test_beside_an_uncapped_communicator_the_kernel_leaves_what_one_of_its_kernels_may_take(env):
    beside(env)
    assert occupancy.reserved_sms("nccl") == occupancy.NCCL_MAX_CTAS_DEFAULT == 64
    assert occupancy.own_sms() == occupancy.DEFAULT_NCCL_SMS  # our own communicator stays capped to our share
    assert occupancy.programs_for(H100, "nccl") == H100 - 64
    with pytest.raises(LaunchError) as e:
        occupancy.check_grid(H100 - 8, H100, "nccl", True, "ag_gemm_persistent")
    msg = str(e.value)
    assert "\n" not in msg
    assert "64 SMs are kept for them: another NCCL communicator of this process" in msg, msg
    assert "NCCL_MAX_CTAS set lower caps it" in msg and "launch at most 68 programs" in msg, msg


def test_the_environment_caps_every_communicator_and_so_the_reservation(env):
    beside(env)
    env.setenv("NCCL_MAX_CTAS", "16")
    assert occupancy.reserved_sms("nccl") == 16 and occupancy.own_sms() == 16  # NCCL applies it over our config too
    env.delenv("NCCL_MAX_CTAS")
    env.setenv("NCCL_MAX_NCHANNELS", "4")
    env.setenv("SYNCOPY_NCCL_SMS", "12")
    assert occupancy.own_sms() == 12 and occupancy.reserved_sms("nccl") == 12  # the larger of the two
    occupancy.check_grid(H100 - 12, H100, "nccl", True, "k")


def test_other_communicators_are_torchs_nccl_groups_but_syncopys_own(monkeypatch):
    import types

    import torch.distributed as dist

    class Group:
        def __init__(self, backend):
            self.backend = backend

    ddp, gloo, mine = Group("nccl"), Group("gloo"), Group("nccl")
    world = types.SimpleNamespace(pg_map={gloo: None, ddp: None, mine: None}, default_pg=gloo)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist.distributed_c10d, "_world", world, raising=False)
    monkeypatch.setattr(dist, "get_backend", lambda pg: pg.backend)
    occupancy.mark_own(mine)
    assert occupancy.other_nccl_communicators() == [ddp]
    del world.pg_map[ddp]  # DDP's group destroyed: the table changed, asked again
    assert occupancy.other_nccl_communicators() == []


def test_beside_another_communicator_the_process_is_told_once_to_order_them(env):
    beside(env)
    env.setattr(nccl, "nccl_version", lambda: (2, 27, 3))
    with pytest.warns(UserWarning, match=r"set NCCL_LAUNCH_ORDER_IMPLICIT=1 before starting the job") as w:
        nccl.warn_beside("pg")
        nccl.warn_beside("pg")
    assert len([x for x in w if "NCCL_LAUNCH_ORDER_IMPLICIT" in str(x.message)]) == 1
    assert "ends as a SyncopyTimeout" in str(w[0].message)


def test_an_old_nccl_is_told_to_upgrade_or_order_the_work_itself(env):
    beside(env)
    env.setattr(nccl, "nccl_version", lambda: (2, 21, 5))
    env.setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1")  # has no effect before 2.26
    with pytest.warns(UserWarning, match=r"this NCCL \(2\.21\.5\) predates NCCL_LAUNCH_ORDER_IMPLICIT \(2\.26\): upgrade NCCL"):
        nccl.warn_beside("pg")


def test_nothing_is_said_where_nccl_orders_the_communicators_or_none_runs_beside(env):
    env.setattr(nccl, "nccl_version", lambda: (2, 27, 3))
    env.setenv("NCCL_MAX_CTAS", "8")  # every communicator capped to syncopy's own share: no SM is kept for another
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        beside(env, ())
        nccl.warn_beside("pg")  # alone
        beside(env)
        env.setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1")
        nccl.warn_beside("pg")  # ordered by NCCL
    assert nccl.beside_text() is None


def test_the_sms_kept_for_another_communicator_are_said_once_even_where_nccl_orders_them(env):
    # A persistent kernel's grid shrinks by them (occupancy.programs) without any refusal: said once.
    env.setattr(nccl, "nccl_version", lambda: (2, 27, 3))
    env.setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1")
    beside(env)
    with pytest.warns(UserWarning) as w:
        nccl.warn_beside("pg")
        nccl.warn_beside("pg")
    said = [str(x.message) for x in w]
    assert said == ["the fused kernel leaves 64 SMs free for the other communicator's kernels (one may take 64 CTAs); "
                    "NCCL_MAX_CTAS set lower caps them and gives the SMs back"], said


def _second_round_never_completes(be, ctx):
    """Launch 1, whose first round completes and whose second one's receive never does: check(wait=True)'s SyncopyTimeout."""
    release = threading.Event()
    done = []

    def body(ops):
        if done:
            release.wait(10)
        done.append(ops)

    test_nccl_deferred._launch(be, ctx, 1, body)
    try:
        with pytest.raises(SyncopyTimeout) as e:
            be.check(wait=True)
    finally:
        release.set()
    return e


def test_a_timeout_beside_another_communicator_names_it_as_a_possible_cause(env, nccl_rank0):
    be, ctx, _ = nccl_rank0
    beside(env)
    env.setattr(nccl, "nccl_version", lambda: (2, 27, 3))
    e = _second_round_never_completes(be, ctx)
    msg = str(e.value)
    assert msg.startswith("rank 0 waited") and "\n" not in msg, msg
    assert "a possible cause: syncopy's NCCL rounds run beside another NCCL communicator" in msg, msg
    assert "set NCCL_LAUNCH_ORDER_IMPLICIT=1" in msg, msg
    recv = next(g for kind, g, _ in be.rounds[1] if kind == "recv")
    assert e.value.chunk == divmod(recv, 2) and e.value.epoch == 1  # what it names is unchanged


def test_a_timeout_alone_says_nothing_of_other_communicators(env, nccl_rank0):
    be, ctx, _ = nccl_rank0
    beside(env, ())
    e = _second_round_never_completes(be, ctx)
    assert "another NCCL communicator" not in str(e.value)
