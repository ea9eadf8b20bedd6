"""`syncopy explain NAME --world W`: the instruction graph (syncopy/runtime/state/instructions.py) one rank
runs for a launch of a template, lowered from the template's schedules without launching anything.
`syncopy explain KERNEL.py --schedule S.yaml`: what the passes decided for a user's kernel, each
`# syncopy:` comment of the transformed source at the line of the user's file it stands before (a
rewrite kept as written says why there: docs/how-it-works.md, "Proven or as written")."""
from __future__ import annotations

from functools import lru_cache

from syncopy.passes.notes import kernel_notes  # noqa: F401 (syncopy explain KERNEL.py lists them)
from syncopy.runtime.state.instructions import Graph, Stage, all_gather, pipeline, reduce


@lru_cache(maxsize=64)
def for_template(name: str, world: int, rank: int = 0, shape: tuple[int, int, int] | None = None,
                 chunks: int | None = None, order=None) -> Graph:
    """Rank `rank`'s graph for one launch of template `name` on `world` ranks at `shape` (the
    template's default shape if None); built once per arguments and cached."""
    from syncopy import templates
    from syncopy.runtime.state import plan as planning

    t = templates.get(name)
    shape = tuple(shape) if shape is not None else t.module.DEFAULT_SHAPE
    g = Graph(rank, world)
    if t.pipeline:
        _tp_mlp(g, t, shape, chunks, order, world, rank)
        return g
    s = t.schedule(chunks_per_rank=chunks, order=order)
    if s.planned:
        from syncopy.errors import SyncopyError

        raise SyncopyError(f"{name}'s schedule leaves chunks_per_rank or order to the planner (auto); pass --chunks N and --order")
    rows = shape[0] if s.pattern in ("all_gather", "all_to_all") else shape[0] // world
    op = s.kernel or name
    if s.pattern in ("all_gather", "all_to_all"):
        lower = planning.all_gather if s.pattern == "all_gather" else planning.all_to_all
        all_gather(g, op, lower(s, rank, world, rows if s.pattern == "all_gather" else rows // world), s.tensor)
    else:
        size = shape[0] if s.pattern == "all_reduce" else 0
        per = -(-shape[0] // world) if s.pattern == "all_reduce" else rows
        nbytes = shape[0] * shape[1] * 4  # fp32: what decides one-shot all_reduce
        reduce(g, op, planning.reduce(s, rank, world, per, nbytes, size=size), s.tensor)
    return g


def _tp_mlp(g: Graph, t, shape, chunks, order, world: int, rank: int) -> None:
    """The up projection (all-gather) announcing H's chunks, the down projection (reduce-scatter)
    waiting on them: the pipeline's link between them (its chunks as Pipeline._chunks counts them)."""
    from syncopy.runtime.state import plan as planning

    rows = shape[0]
    up = t.schedule(chunks_per_rank=chunks, order=order)
    down = t.module._down_schedule(chunks, order)
    k = min(up.chunks_per_rank * world, rows * world)
    stages = [Stage(up.kernel, planning.all_gather(up, rank, world, rows), up.tensor),
              Stage(down.kernel, planning.reduce(down, rank, world, rows), down.tensor)]
    pipeline(g, stages, [(0, 1, f"{up.kernel}.C", k)])
