"""A schedule with a named order written out in the full form: `expand` (the transfers the runtime's
named orders run, for a given world) and `to_yaml` (the full form as a user would write it)."""
from __future__ import annotations

import json
import re

from syncopy.errors import ScheduleError, ScheduleLocation
from syncopy.schedule.model import Schedule, Transfer
from syncopy.schedule.patterns import PRODUCER_PATTERNS


def expand(s: "Schedule", world: int) -> "Schedule":
    """`s` with its named order written out as explicit transfers for `world` ranks.

        ring, W=3, one chunk:     step 1: 0->1 (0,0)  1->2 (1,0)  2->0 (2,0)
                                  step 2: 0->1 (2,0)  1->2 (0,0)  2->0 (1,0)   relays

    The runtime lowers the result to the same per-rank plans as the named order. all_to_all sends
    every block straight to its receiver (its ring orders run as local_first, nothing is relayed).
    reduce_scatter and all_reduce write `reduce: sum` transfers of partial sums (an all_reduce
    then copies each sum on): the reduce-scatter + all-gather algorithm its named order runs above
    `one_shot_max_bytes` (below, the named order sends every partial everywhere at once; the sums
    are the same).
    """
    if world < 1:
        raise ScheduleError(f"a world has at least one rank, got {world}; pass --world N with N >= 1")
    if s.transfers is not None:
        if s.world != world:
            raise ScheduleError(f"the transfers are written for {s.world} ranks, not {world}; expand a named order instead",
                                ScheduleLocation(None, "world"))
        return s
    for key in ("chunks_per_rank", "order"):
        if getattr(s, key) == "auto":
            raise ScheduleError("auto is resolved at launch by the planner, so there is nothing fixed to expand; "
                                f"give a fixed {key}", ScheduleLocation(None, key))
    if isinstance(s.order, list) and len(s.order) != world - 1:
        raise ScheduleError(f"the explicit order {s.order} lists {len(s.order)} peer offsets but the world has {world} ranks; "
                            f"list each of the offsets 1..{world - 1} once", ScheduleLocation(None, "order"))
    data = s.model_dump(by_alias=True, exclude_none=True)
    c = s.chunks_per_rank
    if s.pattern in PRODUCER_PATTERNS:
        transfers = _named_reduce_transfers(s.order, world, c, gather=s.pattern == "all_reduce")
    elif s.pattern == "all_to_all" and s.order in ("ring", "bidirectional_ring"):
        transfers = _named_transfers("local_first", world, c)  # as syncopy.runtime.state.plan.all_to_all runs them
    else:
        transfers = _named_transfers(s.order, world, c)
    data.update(order="explicit", world=world, transfers=transfers)
    return Schedule.model_validate(data)


def _named_reduce_transfers(order, world: int, c: int, gather: bool) -> list[dict]:
    """The named reduce orders of syncopy.runtime.state.plan.reduce (ring, direct), written out.

        ring, W=3: step 1: 0->1 (2, i)  1->2 (0, i)  2->0 (1, i)      partials
                   step 2: 0->1 (1, i)  1->2 (2, i)  2->0 (0, i)      partial sums: rank b has (b, i)
        gather:    step 3: 0->1 (0, i)  1->2 (1, i)  2->0 (2, i)      the sums go round once more
                   step 4: 0->1 (2, i)  1->2 (0, i)  2->0 (1, i)
    """
    out: list[dict] = []

    def move(step, block, indices, src, dst, add=True):
        for i in indices:
            out.append({"chunk": [block, i], "from": src, "to": dst, "step": step, **({"reduce": "sum"} if add else {})})

    if world == 1:
        return out
    if order == "ring" or order == "bidirectional_ring":
        # Chunk (b, i) starts on the rank after b against the direction and collects a partial at
        # every hop; a bidirectional ring sends even indices clockwise, odd ones counter-clockwise.
        ways = [(+1, range(c))] if order == "ring" else [(+1, range(0, c, 2)), (-1, range(1, c, 2))]
        for hop in range(world - 1):
            for way, indices in ways:
                for r in range(world):
                    move(hop + 1, (r - way * (hop + 1)) % world, indices, r, (r + way) % world)
        if gather:
            for hop in range(world - 1):
                for r in range(world):
                    move(world + hop, (r - hop) % world, range(c), r, (r + 1) % world, add=False)
        return out
    offsets = list(range(1, world)) if order == "local_first" else list(order)
    for d in offsets:
        for r in range(world):
            move(1, (r + d) % world, range(c), r, (r + d) % world)
    if gather:
        for d in offsets:
            for r in range(world):
                move(2, r, range(c), r, (r + d) % world, add=False)
    return out


def _named_transfers(order, world: int, c: int) -> list[dict]:
    out: list[dict] = []

    def move(step, block, src, dst):
        out.extend({"chunk": [block, i], "from": src, "to": dst, "step": step} for i in range(c))

    if world == 1:
        return out
    if order == "ring" or order == "bidirectional_ring":
        # Clockwise peers at distance 1..ceil((W-1)/2) (all of them for a plain ring), the rest
        # counter-clockwise; in step d each rank forwards the block it got in step d-1 (its own in step 1).
        cw = world - 1 if order == "ring" else world // 2
        ccw = world - 1 - cw
        for d in range(1, cw + 1):
            for r in range(world):
                move(d, (r - d + 1) % world, r, (r + 1) % world)
            if d <= ccw:
                for r in range(world):
                    move(d, (r + d - 1) % world, r, (r - 1) % world)
    else:
        offsets = list(range(1, world)) if order == "local_first" else list(order)
        for step, d in enumerate(offsets, start=1):
            for r in range(world):
                move(step, r, r, (r + d) % world)
    return out


# --------------------------------------------------------------------------------------------------
# Writing the form back as YAML
# --------------------------------------------------------------------------------------------------
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"}


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if _PLAIN.match(v) and v.lower() not in _YAML_WORDS else json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return str(v)


def _transfer_line(t: "Transfer") -> str:
    parts = ([f"id: {_scalar(t.id)}"] if t.id is not None else []) + [
        f"chunk: {_scalar(t.chunk)}", f"from: {t.src}", f"to: {t.dst}"]
    if t.step is not None:
        parts.append(f"step: {t.step}")
    if t.after:
        parts.append(f"after: {_scalar(t.after)}")
    if t.mode != "push":
        parts.append(f"mode: {t.mode}")
    if t.into is not None:
        parts.append(f"into: {_scalar(t.into)}")
    if t.reduce is not None:
        parts.append(f"reduce: {t.reduce}")
    if not t.signal:
        parts.append("signal: false")
    return "  - {" + ", ".join(parts) + "}"


def to_yaml(s: "Schedule") -> str:
    """The schedule as YAML that loads back to an equal `Schedule`, one transfer per line."""
    lines = [f"version: {s.version}", f"pattern: {s.pattern}"]
    if s.kernel is not None:
        lines.append(f"kernel: {_scalar(s.kernel)}")
    lines += [f"tensor: {_scalar(s.tensor)}", f"dim: {s.dim}", f"chunks_per_rank: {s.chunks_per_rank}"]
    if s.chunks is not None:
        lines += [f"units_per_rank: {s.units_per_rank}", f"chunks: {_scalar(s.chunks)}"]
    lines.append(f"order: {_scalar(s.order)}")
    if s.loop_order is not None:
        lines.append(f"loop_order: {s.loop_order}")
    if s.binding is not None:
        lines += ["binding:", f"  rows: {json.dumps(s.binding.rows)}"]
        if s.binding.before_line is not None:
            lines.append(f"  before_line: {s.binding.before_line}")
    if s.world is not None:
        lines.append(f"world: {s.world}")
    if s.transfers is not None:
        lines.append("transfers:" if s.transfers else "transfers: []")
        lines += [_transfer_line(t) for t in s.transfers]
    return "\n".join(lines) + "\n"
