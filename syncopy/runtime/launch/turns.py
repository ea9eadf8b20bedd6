"""Whose turn it is to launch on a group: launches on one group take turns on a rank (a launch reuses
its context's buffers and steps its epoch); a pipeline's reader on its side thread launches in the
turn its writer's thread holds for both."""
from __future__ import annotations

import contextlib
import threading

_held = threading.local()


def turn_held() -> bool:
    """Is this thread a pipeline's side thread, launching in the group turn its writer's thread holds?"""
    return getattr(_held, "turn", False)


@contextlib.contextmanager
def held_turn():
    """Launches of this thread run in the group turn another thread holds (a pipeline's reader)."""
    _held.turn = True
    try:
        yield
    finally:
        _held.turn = False
