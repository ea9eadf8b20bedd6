"""How the CPU-world tests start their ranks: syncopy's `spawn`, with a slow link made the default of
every rank process, so that a launch that names no link is tested the way users deploy.

The default link costs 4 to 8 ms per chunk (latency and jitter), starts each launch's sends on each
rank up to 10 ms late (ranks never launch together), and lets chunks land one at a time, a link
delay apart on the receiving rank's own clock (a rank that launches late still finds its chunks
arriving) and in random order, each kept out of the receive buffer until its flag rises: with `poison_receive=True` a tile
that reads rows it did not wait for reads NaN, whatever the runtime believes it waited for. A test
that needs an instant link says so: `spawn(..., link=INSTANT)`, one that checks chunks land in the
planned order `link=IN_ORDER`; an operator built with its own `link=` keeps it.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os

from syncopy.runtime.worlds import processes as _world
from syncopy.runtime.transport.link import Link

SLOW = Link(latency_s=0.004, jitter_s=0.004, start_s=0.01, reorder=True)
IN_ORDER = dataclasses.replace(SLOW, reorder=False)  # as slow, flags in the planned arrival order
INSTANT = Link()

# CPU ranks fork from one server process that imported these once (multiprocessing's forkserver)
# instead of starting a fresh interpreter that imports torch: a world of 3 started 3.5-4.5 s faster
# on two loaded cores. Not syncopy nor libcst: a rank imports them itself, as a spawned one does (its
# environment read at import, and tests/world/test_load.py's rank without libcst, stay as they were).
PRELOAD = ["torch", "torch.distributed", "triton", "triton.language"]
_ENVIRONMENT = dict(os.environ)  # at collection: the server starts with it, whichever test starts it


def spawn(fn, world: int, *args, link: Link = SLOW, checked: bool = True, **options) -> list:
    """`syncopy.runtime.worlds.processes.spawn(fn, world, *args, **options)` with `link` the default link of every
    rank; `checked` (the default): the ranks' operators run in checked mode (SYNCOPY_CHECKED=1,
    passes/read_check.py) unless they name `checked=` themselves, so a read of rows a tile did not
    wait for raises SyncopyReadError naming the kernel's line, whatever a test looks at. Under the
    interpreter the checks run on the host (device.CHECK_ON_HOST): about +8% of a world test's Python
    calls on the world-2 all-gather matrix. CPU ranks (interpret=True, the default) are forked from
    the preloaded server, each with the environment this process has now."""
    if options.get("interpret", True):
        options.setdefault("start_method", _forkserver())
    return _world.spawn(_on_link, world, fn, link, checked, dict(os.environ), *args, **options)


def _forkserver() -> str:
    """Start the forkserver (once) with PRELOAD imported and the environment of collection time."""
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    now = dict(os.environ)
    os.environ.clear()
    os.environ.update(_ENVIRONMENT)
    try:
        forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(now)
    return "forkserver"


def _on_link(rank: int, world: int, fn, link: Link, checked: bool, environment: dict, *args):
    from syncopy.runtime.transport import link as links

    # A forked rank has the server's environment: take the test process's, as a spawned rank would
    # (Triton's mode stays as syncopy.runtime.worlds.processes._entry set it for this world).
    interpret = os.environ.get("TRITON_INTERPRET")
    os.environ.clear()
    os.environ.update(environment)
    if interpret is not None:
        os.environ["TRITON_INTERPRET"] = interpret
    links.default = link
    if checked:
        os.environ["SYNCOPY_CHECKED"] = "1"
    return fn(rank, world, *args)
