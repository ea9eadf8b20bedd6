"""A destroyed process group's contexts are not freed under their launches (issue 28, defect 8).

A GPU launch returns before its kernel and transfers ran: its pinned error ring still receives a
copy, its peers' mappings still take pushes. Letting go of a destroyed group's context therefore
reads its launches first, within a bound; one still running past it is parked (kept, not freed)
and freed at a later drop once done; a failed launch is a warning naming the operator, never an
error raised into destroy_process_group's caller. A stub backend records what was called, in order.
"""
from __future__ import annotations

import time
import types
import warnings

import pytest
import torch

from syncopy.errors import SyncopyTimeout
from syncopy.runtime.launch import contexts
from syncopy.runtime.transport.backends import control
from tests.unit import test_nccl_deferred

BOUND_S = 0.3
DEAD, ALIVE = 7, 1  # group tokens: the destroyed group's, one still alive


@pytest.fixture
def nccl_rank0(monkeypatch):
    """test_nccl_deferred's rank 0 of 3 on CPU streams: (backend, context, what a failure aborted)."""
    yield from test_nccl_deferred.backend.__wrapped__(monkeypatch)


class Backend:
    """Records check / settled / close; its launches finish once `polls_left` settled() calls said no."""

    asynchronous = True  # launches return before their kernel ran (where.deferred)

    def __init__(self, polls_left: int | None = 0, fails: BaseException | None = None):
        self.polls_left, self.fails, self.calls = polls_left, fails, []

    def check(self, wait=False):
        self.calls.append("check" if not wait else "check(wait)")
        if self.fails is not None:
            exc, self.fails = self.fails, None
            raise exc

    def settled(self) -> bool:
        done = self.polls_left is not None and self.polls_left <= 0
        if self.polls_left:
            self.polls_left -= 1
        self.calls.append("settled" if done else "running")
        return done

    def close(self):
        self.calls.append("close")


def my_kernel():
    pass


@pytest.fixture
def table(monkeypatch):
    """An operator's contexts holding one context of the group about to be found destroyed."""
    monkeypatch.setattr(control, "wait_bound", lambda timeout_s: BOUND_S)
    op = types.SimpleNamespace(timeout_s=0.1, local=types.SimpleNamespace(fn=my_kernel))
    ops = contexts.Contexts(op)

    def holding(backend):
        ctx = types.SimpleNamespace()
        ops.table[(DEAD, (4, 2), torch.float32, torch.device("cpu"), ())] = (ctx, backend)
        return ctx

    yield ops, holding
    getattr(contexts, "_parked", []).clear()


def test_a_destroyed_groups_context_is_closed_only_once_its_launches_are_done(table):
    ops, holding = table
    backend = Backend(polls_left=3)
    holding(backend)
    ops._drop({ALIVE})
    assert backend.calls[-1] == "close" and backend.calls.count("close") == 1, backend.calls
    assert backend.calls[-2] == "settled", backend.calls  # closed only after the launches were seen done
    assert backend.calls.count("running") == 3, backend.calls  # it waited for them, reading them meanwhile
    assert not ops.table and not contexts._parked


def test_a_launch_that_never_finishes_leaves_its_context_parked_not_freed(table):
    ops, holding = table
    backend = Backend(polls_left=None)  # its launches never finish
    holding(backend)
    start = time.monotonic()
    with pytest.warns(UserWarning, match=r"operator my_kernel: launches on a process group destroyed since were still running"):
        ops._drop({ALIVE})
    assert time.monotonic() - start < BOUND_S + 2  # bounded: no hang
    assert "close" not in backend.calls, backend.calls  # kept, not freed under the launch
    assert [b for _, b, _ in contexts._parked] == [backend] and not ops.table
    contexts._drop_destroyed({ALIVE})  # a later drop: still running, still parked (and no wait)
    assert "close" not in backend.calls and len(contexts._parked) == 1
    backend.polls_left = 0  # the launch ends (its waits are bounded)
    contexts._drop_destroyed({ALIVE})
    assert backend.calls[-2:] == ["settled", "close"] and not contexts._parked


def test_a_failed_launch_of_a_destroyed_group_is_a_warning_naming_the_operator_not_an_error(table):
    ops, holding = table
    backend = Backend(polls_left=1, fails=SyncopyTimeout(0, (1, 0), 3, 0.1))
    holding(backend)
    with pytest.warns(UserWarning, match=r"operator my_kernel: a launch on a process group destroyed since failed "
                                         r"\(SyncopyTimeout: rank 0 waited"):
        ops._drop({ALIVE})  # raises nothing
    assert backend.calls[-1] == "close", backend.calls


def test_contexts_of_live_groups_are_left_alone(table):
    ops, holding = table
    backend = Backend()
    holding(backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ops._drop({DEAD, ALIVE})
    assert backend.calls == [] and len(ops.table) == 1


def test_nccl_is_settled_only_once_its_rounds_ran_and_its_kernels_words_were_read(nccl_rank0):
    # What _let_go asks nccl: a launch whose round is still running on the syncopy stream is not settled.
    import threading

    be, ctx, _ = nccl_rank0
    release = threading.Event()
    test_nccl_deferred._launch(be, ctx, 1, lambda ops: release.wait(10))
    be.check()
    assert not be.settled()
    release.set()
    be.check(wait=True)
    assert be.settled()
