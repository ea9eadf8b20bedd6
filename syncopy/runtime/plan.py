"""Plan: a schedule, lowered for one rank and one shard shape, to an instruction graph of transfers.

All-gather, rank r of W, C chunks per rank; chunk g = src*C + i holds rows
[src*S + floor(i*S/C), src*S + floor((i+1)*S/C)) of the gathered tensor along `dim`.

    ring (W=4, rank 1):   step 1      step 2      step 3
      receive from 0:     (0, 0..C)   (3, 0..C)   (2, 0..C)      relayed around the ring
      send to 2:          (1, 0..C)   (0, 0..C)   (3, 0..C)      a chunk leaves as soon as it landed
"""
from __future__ import annotations

from dataclasses import dataclass, field

from syncopy.errors import LaunchError
from syncopy.schedule.chunks import chunk_bounds
from syncopy.schedule.model import Schedule


@dataclass(frozen=True)
class Node:
    """One instruction: move chunk `chunk` (global id) to or from group rank `peer`.

    `after` lists chunk ids that must have landed here first (a relay forwards what it received).
    """

    kind: str  # "send" | "recv"
    chunk: int
    peer: int
    after: tuple[int, ...] = ()


@dataclass
class RankPlan:
    rank: int
    world: int
    chunks_per_rank: int
    rows_per_rank: int
    arrival: list[int]  # remote chunk ids in the order they are expected to land
    nodes: list[Node] = field(default_factory=list)

    def position(self) -> dict[int, int]:
        """Arrival position of each chunk: 0 for local chunks, k for the k-th remote chunk to land."""
        pos = {self.rank * self.chunks_per_rank + i: 0 for i in range(self.chunks_per_rank)}
        pos.update({g: k + 1 for k, g in enumerate(self.arrival)})
        return pos

    def bounds(self, chunk: int) -> tuple[int, int]:
        """Rows of chunk `chunk` in the gathered tensor."""
        src, i = divmod(chunk, self.chunks_per_rank)
        lo, hi = chunk_bounds(self.rows_per_rank, self.chunks_per_rank)[i]
        return src * self.rows_per_rank + lo, src * self.rows_per_rank + hi

    def sends(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "send"]

    def recvs(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "recv"]


def _chunks_of(src: int, c: int) -> list[int]:
    return [src * c + i for i in range(c)]


def all_gather(schedule: Schedule, rank: int, world: int, rows_per_rank: int) -> RankPlan:
    """The transfers rank `rank` performs for an all-gather under `schedule` (auto already resolved)."""
    if schedule.planned:
        raise LaunchError("chunks_per_rank or order is auto; resolve it with syncopy.planner.auto before lowering "
                          "(syncopy.overlap does at the first launch)")
    c = schedule.chunks_per_rank
    if c > rows_per_rank:
        raise LaunchError(
            f"chunks_per_rank is {c} but each shard of '{schedule.tensor}' has only {rows_per_rank} rows along dim "
            f"{schedule.dim}; use chunks_per_rank <= {rows_per_rank}"
        )
    order = schedule.order
    if isinstance(order, list) and len(order) != world - 1:
        raise LaunchError(
            f"the explicit order {order} lists {len(order)} peer offsets but the world has {world} ranks; "
            f"list each of the offsets 1..{world - 1} once"
        )
    plan = RankPlan(rank, world, c, rows_per_rank, [])
    if world == 1:
        return plan
    if order == "ring":
        _ring(plan, direction=+1, distances=range(1, world))
    elif order == "bidirectional_ring":
        # Peers at distance 1..ceil((W-1)/2) arrive clockwise, the rest counter-clockwise.
        right = (world - 1 + 1) // 2
        cw, ccw = range(1, right + 1), range(1, world - right)
        _ring(plan, +1, cw)
        _ring(plan, -1, ccw)
        plan.arrival = [g for pair in _interleave(_sources(rank, world, +1, cw), _sources(rank, world, -1, ccw)) for g in _chunks_of(pair, c)]
    else:
        offsets = list(range(1, world)) if order == "local_first" else list(order)
        _direct(plan, offsets)
    return plan


def _sources(rank: int, world: int, direction: int, distances) -> list[int]:
    return [(rank - direction * d) % world for d in distances]


def _interleave(a: list[int], b: list[int]) -> list[int]:
    out = []
    for k in range(max(len(a), len(b))):
        out += a[k : k + 1] + b[k : k + 1]
    return out


def _ring(plan: RankPlan, direction: int, distances) -> None:
    """Relay in one direction: receive from rank-direction, forward to rank+direction."""
    r, w, c = plan.rank, plan.world, plan.chunks_per_rank
    distances = list(distances)
    if not distances:
        return  # nobody is reached in this direction (bidirectional ring of two ranks)
    prev, nxt = (r - direction) % w, (r + direction) % w
    for d in distances:
        src = (r - direction * d) % w
        for g in _chunks_of(src, c):
            plan.nodes.append(Node("recv", g, prev))
        plan.arrival += _chunks_of(src, c)
    # Send our own chunks, then forward each received chunk that still has hops to go.
    for g in _chunks_of(r, c):
        plan.nodes.append(Node("send", g, nxt))
    for d in distances[:-1]:
        src = (r - direction * d) % w
        for g in _chunks_of(src, c):
            plan.nodes.append(Node("send", g, nxt, after=(g,)))


def _direct(plan: RankPlan, offsets: list[int]) -> None:
    """Every rank sends its chunks straight to each peer; peers at offset d in the listed order."""
    r, w, c = plan.rank, plan.world, plan.chunks_per_rank
    for d in offsets:
        src = (r - d) % w
        for g in _chunks_of(src, c):
            plan.nodes.append(Node("recv", g, src))
        plan.arrival += _chunks_of(src, c)
    for d in offsets:
        for g in _chunks_of(r, c):
            plan.nodes.append(Node("send", g, (r + d) % w))


def tile_order(ranges: list[tuple[int, int]], position: dict[int, int]) -> list[int]:
    """Tiles sorted by the arrival position of the last chunk each needs (stable: ties keep grid order).

    `ranges[t]` is (first chunk, last chunk) of tile t; an empty range (last < first) needs nothing.
    """

    def key(t: int) -> int:
        lo, hi = ranges[t]
        return max((position.get(g, 0) for g in range(lo, hi + 1)), default=0)

    return sorted(range(len(ranges)), key=key)
