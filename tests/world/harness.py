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

from syncopy.runtime import world as _world
from syncopy.runtime.link import Link

SLOW = Link(latency_s=0.004, jitter_s=0.004, start_s=0.01, reorder=True)
IN_ORDER = dataclasses.replace(SLOW, reorder=False)  # as slow, flags in the planned arrival order
INSTANT = Link()


def spawn(fn, world: int, *args, link: Link = SLOW, checked: bool = True, **options) -> list:
    """`syncopy.runtime.world.spawn(fn, world, *args, **options)` with `link` the default link of every
    rank; `checked` (the default): the ranks' operators run in checked mode (SYNCOPY_CHECKED=1,
    passes/read_check.py) unless they name `checked=` themselves, so a read of rows a tile did not
    wait for raises SyncopyReadError naming the kernel's line, whatever a test looks at. Under the
    interpreter the checks run on the host (device.CHECK_ON_HOST): about +8% of a world test's Python
    calls on the world-2 all-gather matrix."""
    return _world.spawn(_on_link, world, fn, link, checked, *args, **options)


def _on_link(rank: int, world: int, fn, link: Link, checked: bool, *args):
    import os

    from syncopy.runtime import link as links

    links.default = link
    if checked:
        os.environ["SYNCOPY_CHECKED"] = "1"
    return fn(rank, world, *args)
