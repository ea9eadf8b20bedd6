"""Strategies for valid schedules: every pattern, named orders, peer-offset lists, named orders
written out (`expand`), random explicit plans (all_gather relay trees with `after` waits and pulls,
all_to_all direct sends in any order, reduce plans sent straight to the owner or one-shot) and
explicit slices. Shared by the plan executor fuzzer (c) and the world fuzzer (b)."""
from __future__ import annotations

from hypothesis import strategies as st

from syncopy.schedule import Schedule, expand

PATTERNS = ["all_gather", "all_to_all", "reduce_scatter", "all_reduce"]
NAMED = ["ring", "local_first", "bidirectional_ring"]


@st.composite
def slices(draw, max_units: int = 6) -> tuple[int, list[list[int]]]:
    """(units_per_rank, chunks): a cut of [0, U) into slices, listed in any order."""
    units = draw(st.integers(1, max_units))
    cuts = sorted(draw(st.sets(st.integers(1, units - 1), max_size=units - 1))) if units > 1 else []
    bounds = [0, *cuts, units]
    return units, draw(st.permutations([[lo, hi] for lo, hi in zip(bounds, bounds[1:])]))


@st.composite
def gather_trees(draw, world: int, c: int) -> list[dict]:
    """A random explicit all_gather plan: each chunk spreads from its home rank along a random tree
    (a rank forwards only what reached it), some sends also wait (`after`) for other chunks that
    landed on their rank before, some are pulls; listed in a random order, steps left to default."""
    made: list[dict] = []
    lands: dict[tuple, str] = {}  # (rank, chunk) -> id of the transfer landing it there
    chunks = [(b, i) for b in range(world) for i in range(c)]
    for b, i in draw(st.permutations(chunks)):
        reached = [b]
        for dst in draw(st.permutations([r for r in range(world) if r != b])):
            src = draw(st.sampled_from(reached))
            t = {"id": f"t{len(made)}", "chunk": [b, i], "from": src, "to": dst}
            earlier = [tid for (rank, _), tid in lands.items() if rank == src]
            if earlier and draw(st.integers(0, 3)) == 0:
                t["after"] = draw(st.lists(st.sampled_from(earlier), min_size=1, max_size=2, unique=True))
            if draw(st.integers(0, 3)) == 0:
                t["mode"] = "pull"
            made.append(t)
            lands[(dst, (b, i))] = t["id"]
            reached.append(dst)
    return draw(st.permutations(made))


@st.composite
def direct_blocks(draw, world: int, c: int) -> list[dict]:
    """A random explicit all_to_all plan: every block straight from its owner, in any order and steps,
    half of them in the plan-descriptor form (`chunk` the sender's block for the receiver, `into`)."""
    made = []
    for b in range(world):
        for d in range(world):
            for i in range(c):
                if b == d:
                    continue
                t = {"chunk": [b, i], "from": b, "to": d, "step": draw(st.integers(1, 3))}
                if draw(st.booleans()):
                    t.update(chunk=[d, i], into=[b, i])
                made.append(t)
    return draw(st.permutations(made))


@st.composite
def direct_reduce(draw, world: int, c: int, gather: bool) -> list[dict]:
    """A random explicit reduce plan: every partial straight to the chunk's owner (`reduce: sum`), then
    for all_reduce either the owner copies the sum to every rank, or every rank sends its partial
    everywhere (one-shot). Steps random but after what they wait for."""
    one_shot = gather and draw(st.booleans())
    made = []
    for b in range(world):
        for i in range(c):
            owners = range(world) if one_shot else [b]
            for d in owners:
                for r in range(world):
                    if r != d:
                        # One-shot: every partial leaves alone, so no step may come after another adding there.
                        step = 1 if one_shot else draw(st.integers(1, 2))
                        made.append({"chunk": [b, i], "from": r, "to": d, "reduce": "sum", "step": step})
            if gather and not one_shot:
                for d in range(world):
                    if d != b:
                        made.append({"chunk": [b, i], "from": b, "to": d, "step": draw(st.integers(3, 4))})
    return draw(st.permutations(made))


@st.composite
def schedules(draw, patterns=PATTERNS, max_world: int = 4, max_chunks: int = 3, tensor: str = "A",
              world: int | None = None) -> tuple[Schedule, int]:
    """(a valid schedule, the world it is for; `world` if given): a named order, a list of peer offsets,
    a named order written out, or a random explicit plan; all_gather and all_to_all sometimes with
    explicit slices."""
    pattern = draw(st.sampled_from(patterns))
    world = world or draw(st.integers(1, max_world))
    c = draw(st.integers(1, max_chunks))
    data: dict = {"pattern": pattern, "tensor": tensor, "chunks_per_rank": c}
    if pattern in ("all_gather", "all_to_all") and draw(st.integers(0, 2)) == 0:
        data["units_per_rank"], data["chunks"] = draw(slices())
        data["chunks_per_rank"] = c = len(data["chunks"])
    kind = draw(st.sampled_from(["named", "offsets", "expanded", "random"]))
    if kind in ("named", "expanded"):
        data["order"] = draw(st.sampled_from(NAMED))
    elif kind == "offsets":
        data["order"] = draw(st.permutations(range(1, world)))
    if kind == "random" and world > 1:
        if pattern == "all_gather":
            moves = draw(gather_trees(world, c))
        elif pattern == "all_to_all":
            moves = draw(direct_blocks(world, c))
        else:
            moves = draw(direct_reduce(world, c, gather=pattern == "all_reduce"))
        data.update(order="explicit", world=world, transfers=moves)
    s = Schedule.model_validate(data)
    if kind == "expanded" or (kind == "random" and world == 1):
        s = expand(s, world)
    return s, world
