"""Progress of long runs (soaks, benchmarks, planning sweeps): a bar on a terminal, nothing in pipes and CI.

    for case in progress.steps(cases, "model shapes"):
        ...

The bar goes to stderr, so a script's stdout (tables, JSON) stays clean; it is drawn only when stderr
is a terminal and $CI is unset, and only where rich is installed (a GPU image may lack it)."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator


def wanted(stream=None) -> bool:
    """Draw a bar here? A terminal, not CI."""
    stream = stream if stream is not None else sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("CI")


def steps(items: Iterable, description: str, total: int | None = None, on: bool | None = None) -> Iterator:
    """Yield `items` unchanged, advancing a transient progress bar after each."""
    on = wanted() if on is None else on
    if not on:
        yield from items
        return
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.update(task, advance=1)
