"""Plan: a schedule, lowered for one rank and one shard shape, to an instruction graph of transfers.

All-gather, rank r of W, C chunks per rank; chunk g = src*C + i holds rows
[src*S + floor(i*S/C), src*S + floor((i+1)*S/C)) of the gathered tensor along `dim`.

    ring (W=4, rank 1):   step 1      step 2      step 3
      receive from 0:     (0, 0..C)   (3, 0..C)   (2, 0..C)      relayed around the ring
      send to 2:          (1, 0..C)   (0, 0..C)   (3, 0..C)      a chunk leaves as soon as it landed

An explicit schedule (`order: explicit`, syncopy.schedule.explicit) lowers transfer by transfer:
each rank receives what is sent to it, in (step, list position) order, and sends what it sends in
that order, a relay after its chunk landed here and after the `after` transfers landed here.
With explicit slices (`units_per_rank` + `chunks`) the kernel's flags are per unit: chunk i covers
units [lo, hi) of its shard and its landing raises all of their flags. all_to_all lowers the same
way (its blocks come straight from their owners, validated), and explicit reduce plans become
`Step`s (see `_explicit_reduce`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from syncopy.errors import LaunchError
from syncopy.schedule import explicit
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
    # Explicit slices: chunk i of a shard is units slices[i] = [lo, hi) of units_per_rank equal
    # units. Empty: chunk i is unit i (units_per_rank == chunks_per_rank), the minimal form.
    slices: tuple[tuple[int, int], ...] = ()
    units_per_rank: int = 0
    # Uneven all_to_all (split sizes given at launch): rows this rank receives from each source
    # (block src of the receive buffer, in rank order) and sends to each peer (block d of its input).
    # Empty: equal blocks of rows_per_rank rows.
    recv_splits: tuple[int, ...] = ()
    send_splits: tuple[int, ...] = ()

    @property
    def flags_per_rank(self) -> int:
        """Signal flags (units) per source rank: what the kernel's chunk ranges count."""
        return self.units_per_rank or self.chunks_per_rank

    @property
    def widest_chunk(self) -> int:
        """The most flags one chunk raises: the width of the epoch words a flag copy reads from."""
        return max((hi - lo for lo, hi in self.slices), default=1)

    def flags(self, chunk: int) -> range:
        """Global flag ids of chunk `chunk` (one per unit it covers)."""
        src, i = divmod(chunk, self.chunks_per_rank)
        lo, hi = self.slices[i] if self.slices else (i, i + 1)
        base = src * self.flags_per_rank
        return range(base + lo, base + hi)

    def chunk_of_flag(self, flag: int) -> int:
        """The chunk whose landing raises flag `flag`."""
        if not self.slices:
            return flag
        src, unit = divmod(flag, self.flags_per_rank)
        return src * self.chunks_per_rank + next(i for i, (lo, hi) in enumerate(self.slices) if lo <= unit < hi)

    def position(self) -> dict[int, int]:
        """Arrival position of each flag (the kernel's unit of waiting): 0 for local chunks, k for the
        flags of the k-th remote chunk to land."""
        pos = {f: 0 for i in range(self.chunks_per_rank) for f in self.flags(self.rank * self.chunks_per_rank + i)}
        pos.update({f: k + 1 for k, g in enumerate(self.arrival) for f in self.flags(g)})
        return pos

    @property
    def uneven(self) -> bool:
        """Split sizes given at launch (all_to_all): blocks of their own sizes, chunks found by table."""
        return bool(self.recv_splits)

    @property
    def size(self) -> int:
        """Rows of the gathered (received) tensor along `dim`."""
        return sum(self.recv_splits) if self.uneven else self.world * self.rows_per_rank

    def starts(self) -> list[int]:
        """First row of every chunk in the receive buffer (uneven: the table device._chunk_of_row searches)."""
        return [self.bounds(g)[0] for g in range(self.world * self.chunks_per_rank)]

    def chunk_of_row(self, row: int) -> int:
        """The chunk holding received row `row` (uneven: the last chunk starting at or before it, so
        empty chunks, which start where the next one does, are never named)."""
        import bisect

        return max(bisect.bisect_right(self.starts(), row) - 1, 0)

    def empty(self, chunk: int) -> bool:
        """A chunk with no rows (uneven splits: a count of 0, or fewer rows than chunks): nothing moves,
        its flags rise at the launch's start."""
        lo, hi = self.bounds(chunk)
        return hi <= lo

    def send_bounds(self, chunk: int, peer: int) -> tuple[int, int]:
        """all_to_all: rows of this rank's input that its chunk `chunk` (rank*C + i) carries to `peer`."""
        i = chunk % self.chunks_per_rank
        if not self.uneven:
            lo, hi = self.bounds(chunk)
            shift = (peer - self.rank) * self.rows_per_rank
            return lo + shift, hi + shift
        at = sum(self.send_splits[:peer])
        lo, hi = chunk_bounds(self.send_splits[peer], self.chunks_per_rank)[i]
        return at + lo, at + hi

    def bounds(self, chunk: int) -> tuple[int, int]:
        """Rows of chunk `chunk` in the gathered tensor."""
        src, i = divmod(chunk, self.chunks_per_rank)
        if self.uneven:
            at = sum(self.recv_splits[:src])
            lo, hi = chunk_bounds(self.recv_splits[src], self.chunks_per_rank)[i]
            return at + lo, at + hi
        lo, hi = self.slices[i] if self.slices else (i, i + 1)
        units = chunk_bounds(self.rows_per_rank, self.flags_per_rank)
        return src * self.rows_per_rank + units[lo][0], src * self.rows_per_rank + units[hi - 1][1]

    def sends(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "send"]

    def recvs(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "recv"]


def _chunks_of(src: int, c: int) -> list[int]:
    return [src * c + i for i in range(c)]


def _check_lowerable(schedule: Schedule, world: int, rows_per_rank: int, part: str) -> None:
    """What every lowering needs of a schedule at launch: auto resolved, the world it was written
    for, no more chunks than rows (`part` names what is cut), an explicit order for this world."""
    if schedule.planned:
        raise LaunchError("chunks_per_rank or order is auto; resolve it with syncopy.planner.auto before lowering "
                          "(syncopy.overlap does at the first launch)")
    if schedule.world is not None and schedule.world != world:
        written = "its transfers are written" if schedule.transfers is not None else "it is written"
        raise LaunchError(
            f"the schedule says `world: {schedule.world}` ({written} for {schedule.world} ranks) but the group has {world} "
            f"ranks; launch on {schedule.world} ranks or write the schedule for {world} (`syncopy expand` writes a named order for any world)"
        )
    c = schedule.chunks_per_rank
    if schedule.chunks is None and rows_per_rank == 0:
        # Not "use chunks_per_rank <= 0" (no schedule has fewer than one chunk): an empty shard has
        # nothing to move or compute. Raised after the ranks' shapes were checked equal: every rank's.
        raise LaunchError(
            f"{part} of {schedule.named} has 0 rows along dim {schedule.dim}: there is nothing to send or compute; "
            "skip the launch where the tensor is empty (its result is empty too)"
        )
    if schedule.chunks is None and c > rows_per_rank:
        raise LaunchError(
            f"chunks_per_rank is {c} but {part} of {schedule.named} has only {rows_per_rank} rows along dim "
            f"{schedule.dim}; use chunks_per_rank <= {rows_per_rank}"
        )
    order = schedule.order
    if isinstance(order, list) and len(order) != world - 1:
        raise LaunchError(
            f"the explicit order {order} lists {len(order)} peer offsets but the world has {world} ranks; "
            f"list each of the offsets 1..{world - 1} once"
        )


def all_gather(schedule: Schedule, rank: int, world: int, rows_per_rank: int) -> RankPlan:
    """The transfers rank `rank` performs for an all-gather under `schedule` (auto already resolved)."""
    _check_lowerable(schedule, world, rows_per_rank, "each shard")
    c = schedule.chunks_per_rank
    order = schedule.order
    plan = RankPlan(rank, world, c, rows_per_rank, [])
    if schedule.chunks is not None:
        plan.slices = tuple((lo, hi) for lo, hi in schedule.chunks)
        plan.units_per_rank = schedule.units_per_rank
        for i in range(c):
            lo, hi = plan.bounds(i)
            if lo == hi:
                raise LaunchError(
                    f"chunks[{i}] (units [{plan.slices[i][0]}, {plan.slices[i][1]}) of {plan.units_per_rank}) holds no rows when a "
                    f"shard of {schedule.named} has {rows_per_rank} rows along dim {schedule.dim}; use at most {rows_per_rank} "
                    "units_per_rank or wider slices"
                )
    if world == 1:
        return plan
    if order == "explicit":
        _explicit(plan, schedule)
    elif order == "ring":
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


def all_to_all(schedule: Schedule, rank: int, world: int, rows_per_rank: int,
               splits: tuple[tuple[int, ...], tuple[int, ...]] | None = None) -> RankPlan:
    """all_to_all with equal splits: every rank sends block d of its input straight to rank d, and
    receives block `rank` of every peer's input into block `src` of its receive buffer. The layout
    of the receive buffer is all_gather's (chunk src*C + i), so waits and tile order are the same;
    only direct sends make sense (nothing to relay): ring orders arrivals as local_first does.

    `splits` = (send, recv) split sizes per rank (all_to_all_single's input_split_sizes and
    output_split_sizes): block src of the receive buffer then holds recv[src] rows, cut into C chunks
    with the same floor(i*S/C) bounds (some empty when S < C), and chunk i of this rank's block d
    (send[d] rows) lands as the peer's chunk rank*C + i. Empty chunks move nothing."""
    order = schedule.order
    if order in ("ring", "bidirectional_ring"):
        order = "local_first"
    schedule = schedule.model_copy(update={"order": order})
    if splits is None:
        return all_gather(schedule, rank, world, rows_per_rank)
    return _uneven(schedule, rank, world, *splits)


def _uneven(schedule: Schedule, rank: int, world: int, send: tuple[int, ...], recv: tuple[int, ...]) -> RankPlan:
    """all_to_all with split sizes given at launch: the direct plan, less the transfers of empty chunks."""
    if schedule.chunks is not None or schedule.order == "explicit":
        key = "chunks" if schedule.chunks is not None else "transfers"
        raise LaunchError(f"uneven all_to_all splits (input_split_sizes) take chunks_per_rank and a named order, not an explicit "
                          f"`{key}:`; drop units_per_rank, chunks and transfers from the schedule, or launch with equal splits")
    _check_lowerable(schedule, world, schedule.chunks_per_rank, "each block")  # any count: small blocks get empty chunks
    c = schedule.chunks_per_rank
    plan = RankPlan(rank, world, c, 0, [], recv_splits=tuple(recv), send_splits=tuple(send))
    if world > 1:
        _direct(plan, list(range(1, world)) if schedule.order == "local_first" else list(schedule.order))
    plan.nodes = [n for n in plan.nodes if not (plan.empty(n.chunk) if n.kind == "recv" else _empty_send(plan, n))]
    plan.arrival = [g for g in plan.arrival if not plan.empty(g)]
    return plan


def _empty_send(plan: RankPlan, node: Node) -> bool:
    lo, hi = plan.send_bounds(node.chunk, node.peer)
    return hi <= lo


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


def _explicit(plan: RankPlan, schedule: Schedule) -> None:
    """This rank's part of an explicit transfer list (already validated against itself and the world)."""
    r, c = plan.rank, plan.chunks_per_rank
    transfers = schedule.transfers
    ordered = explicit.ordered(schedule)

    def gid(i: int) -> int:
        block, index = explicit.landing(transfers[i])  # all_to_all: `chunk` may name the sender's block
        return block * c + index

    for i, _, _ in ordered:
        if transfers[i].dst == r:
            plan.nodes.append(Node("recv", gid(i), transfers[i].src))
            plan.arrival.append(gid(i))
    for i, _, waits in ordered:
        if transfers[i].src == r:
            # Every wait is a landing on this rank (validated), named by the chunk it lands.
            after = tuple(dict.fromkeys(gid(j) for j in waits))
            plan.nodes.append(Node("send", gid(i), transfers[i].dst, after))


def tile_order(ranges: list[tuple[int, int]], position: dict[int, int], producer: bool = False) -> list[int]:
    """Tiles sorted by the arrival position of the last chunk each needs (stable: ties keep grid order).

    `ranges[t]` is (first chunk, last chunk) of tile t; an empty range (last < first) needs nothing.
    With `producer`, `position` is the send order and a tile goes by the earliest chunk it writes:
    that chunk cannot leave before the tile is done.
    """

    def key(t: int) -> int:
        lo, hi = ranges[t]
        if producer:
            return min((position.get(g, 0) for g in range(lo, hi + 1)), default=len(position))
        return max((position.get(g, 0) for g in range(lo, hi + 1)), default=0)

    return sorted(range(len(ranges)), key=key)


# --------------------------------------------------------------------------------------------------
# Producer patterns: reduce_scatter and all_reduce
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One instruction of a reduce plan on one rank, on chunk `chunk` (global id dst*C + i: rows of
    rank dst's output shard), exchanged with group rank `peer`.

    - ``send``: send `value` -- ``partial`` (this rank's own kernel output, once its flag is up),
      ``sum`` (this rank's partial plus what it received for the chunk) or ``final`` (the reduced
      chunk, once it is in the output);
    - ``reduce``: receive a partial sum of the chunk and add it to this rank's partial;
    - ``recv``: receive the reduced chunk straight into the output (all_reduce's gather half).
    """

    kind: str
    chunk: int
    peer: int
    value: str = "partial"


@dataclass
class ReducePlan:
    """What one rank does for a reduce_scatter / all_reduce launch.

    `finish` lists chunk ids in the order the kernel should complete them (the first one sent goes
    first); `owned` are the chunks whose reduced value ends in this rank's output.
    """

    rank: int
    world: int
    chunks_per_rank: int
    rows_per_rank: int
    pattern: str
    algorithm: str  # ring | direct | one_shot | explicit
    size: int = 0  # rows of the full output (all_reduce: may be less than world * rows_per_rank)
    finish: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    summed: tuple[int, ...] = ()  # explicit: the chunks this rank adds every partial of

    def position(self) -> dict[int, int]:
        return {g: k for k, g in enumerate(self.finish)}

    @property
    def flags_per_rank(self) -> int:
        return self.chunks_per_rank  # producer chunks are never split into units

    @property
    def uneven(self) -> bool:
        return False  # split sizes at launch are all_to_all's (RankPlan.uneven)

    def flags(self, chunk: int) -> range:
        return range(chunk, chunk + 1)

    def bounds(self, chunk: int) -> tuple[int, int]:
        """Rows of chunk `chunk` in the full (unreduced) output."""
        dst, i = divmod(chunk, self.chunks_per_rank)
        lo, hi = chunk_bounds(self.rows_per_rank, self.chunks_per_rank)[i]
        size = self.size or self.world * self.rows_per_rank
        return min(dst * self.rows_per_rank + lo, size), min(dst * self.rows_per_rank + hi, size)

    def part(self, rank: int) -> tuple[int, int]:
        """Rows [lo, hi) of rank `rank`'s part of the full output (all_reduce: the last part may be
        short, even empty)."""
        c = self.chunks_per_rank
        return self.bounds(rank * c)[0], self.bounds(rank * c + c - 1)[1]

    def empty(self, chunk: int) -> bool:
        """A chunk past the end of a short last part: no rows, nothing to compute or move."""
        lo, hi = self.bounds(chunk)
        return hi <= lo

    @property
    def reduced_here(self) -> list[int]:
        """Chunks whose complete sum is formed on this rank (a ring only passes partial sums on)."""
        if self.algorithm == "explicit":
            mine = self.summed
        elif self.algorithm == "one_shot":
            mine = range(self.world * self.chunks_per_rank)
        else:
            mine = _chunks_of(self.rank, self.chunks_per_rank)
        return [g for g in mine if not self.empty(g)]

    @property
    def owned(self) -> list[int]:
        """Chunks whose reduced value ends in this rank's output."""
        mine = range(self.world * self.chunks_per_rank) if self.pattern == "all_reduce" else _chunks_of(self.rank, self.chunks_per_rank)
        return [g for g in mine if not self.empty(g)]

    def contributions(self, chunk: int) -> int:
        """Partial sums this rank receives and adds for `chunk`."""
        return sum(1 for s in self.steps if s.kind == "reduce" and s.chunk == chunk)


#: all_reduce of at most this many bytes goes one-shot (every rank reduces everything itself): one
#: exchange instead of a reduce-scatter and an all-gather, at W-1 times the bytes.
ONE_SHOT_MAX_BYTES = 256 * 1024


def reduce(schedule: Schedule, rank: int, world: int, rows_per_rank: int, nbytes: int = 0,
           one_shot_max_bytes: int = ONE_SHOT_MAX_BYTES, size: int = 0) -> ReducePlan:
    """The steps rank `rank` performs for a reduce_scatter or all_reduce under `schedule`.

    reduce_scatter, ring (W=4, rank 1; chunk d = rows of rank d's shard):
        step 0: send partial(0)             -> 2        chunk 0 travels 1 -> 2 -> 3 -> 0
        step 1: reduce(3) from 0, send sum  -> 2
        step 2: reduce(2) from 0, send sum  -> 2
        step 3: reduce(1) from 0            = rank 1's reduced shard
    reduce_scatter, direct (local_first, or an explicit list of peer offsets): send partial(r+d) to
    r+d for each offset d, receive and add W-1 partials of the own chunk.
    all_reduce: one_shot when the tensor has at most `one_shot_max_bytes`, else the reduce-scatter
    above followed by an all-gather of the reduced chunks (ring or direct, like the schedule).
    bidirectional_ring: even chunk indices go clockwise, odd ones counter-clockwise.
    An explicit schedule (`transfers:`) runs as written, whatever the size (see `_explicit_reduce`).
    """
    if schedule.chunks is not None:  # refused when the schedule validates; kept for unvalidated copies
        raise LaunchError(f"explicit slices (`chunks:`) are lowered for all_gather and all_to_all only, not {schedule.pattern}; "
                          "drop `units_per_rank` and `chunks` and give chunks_per_rank")
    _check_lowerable(schedule, world, rows_per_rank, "each rank's part")
    c = schedule.chunks_per_rank
    order = schedule.order
    if order == "explicit":
        algorithm = "explicit"
    elif schedule.pattern == "all_reduce" and world > 1 and nbytes <= one_shot_max_bytes:
        algorithm = "one_shot"
    else:
        algorithm = "ring" if order in ("ring", "bidirectional_ring") else "direct"
    plan = ReducePlan(rank, world, c, rows_per_rank, schedule.pattern, algorithm, size)
    if world == 1:
        plan.finish = _chunks_of(rank, c)
        plan.summed = tuple(plan.finish)
        return plan
    _fill(plan, schedule, order, algorithm)
    # Chunks past the end of a short last part move nothing (every rank drops the same ones).
    plan.steps = [s for s in plan.steps if not plan.empty(s.chunk)]
    plan.finish = [g for g in plan.finish if not plan.empty(g)]
    return plan


def _fill(plan: ReducePlan, schedule: Schedule, order, algorithm: str) -> None:
    world, c = plan.world, plan.chunks_per_rank
    if algorithm == "explicit":
        _explicit_reduce(plan, schedule)
        return
    if algorithm == "one_shot":
        _one_shot(plan)
    elif algorithm == "ring":
        if order == "bidirectional_ring":
            _ring_reduce(plan, +1, range(0, c, 2))
            _ring_reduce(plan, -1, range(1, c, 2))
            plan.finish = _interleave(*[[g for g in plan.finish if g % c % 2 == k] for k in (0, 1)])
        else:
            _ring_reduce(plan, +1, range(c))
    else:
        _direct_reduce(plan, list(range(1, world)) if order == "local_first" else list(order))
    if schedule.pattern == "all_reduce" and algorithm != "one_shot":
        if algorithm == "ring":
            _ring_gather(plan)
        else:
            _direct_gather(plan, list(range(1, world)) if order == "local_first" else list(order))


def _explicit_reduce(plan: ReducePlan, schedule: Schedule) -> None:
    """This rank's part of an explicit reduce plan (validated: every partial is added once where
    it must be). Sends and receives go in (step, list position) order; a send carries this rank's
    partial, or its partial sum once every partial sum of the chunk reached it (`reduce: sum`, see
    syncopy.schedule.explicit), or the chunk's sum (a copy, all_reduce). The kernel finishes
    chunks in the order they first leave."""
    r, c = plan.rank, plan.chunks_per_rank
    transfers = schedule.transfers

    def gid(t) -> int:
        return t.chunk[0] * c + t.chunk[1]

    leaving: dict[int, None] = {}
    for i, _, waits in explicit.ordered(schedule):
        t = transfers[i]
        if t.src == r:
            value = "final" if t.reduce is None else "sum" if waits else "partial"
            plan.steps.append(Step("send", gid(t), t.dst, value))
            leaving.setdefault(gid(t))
        if t.dst == r:
            plan.steps.append(Step("reduce", gid(t), t.src) if t.reduce is not None else Step("recv", gid(t), t.src, "final"))
    plan.finish = list(leaving) + [g for g in range(plan.world * c) if g not in leaving]
    # Chunks whose every partial is added here and whose sum this rank keeps (reduce_scatter: its own).
    everyone = frozenset(range(plan.world))
    plan.summed = tuple(block * c + index for (rank, (block, index)), have in explicit.partials(schedule).items()
                        if rank == r and have == everyone and (plan.pattern == "all_reduce" or block == r))


def _ring_reduce(plan: ReducePlan, direction: int, indices) -> None:
    """Each chunk index in `indices` travels the ring against `direction`-ordered destinations:
    rank r starts the chunk of rank r - direction, adds to what it receives, and holds its own last."""
    r, w, c = plan.rank, plan.world, plan.chunks_per_rank
    prev, nxt = (r - direction) % w, (r + direction) % w
    indices = list(indices)
    for k in range(w):
        dst = (r - direction * (k + 1)) % w
        for i in indices:
            g = dst * c + i
            if k > 0:
                plan.steps.append(Step("reduce", g, prev))
            if k < w - 1:
                plan.steps.append(Step("send", g, nxt, "partial" if k == 0 else "sum"))
            plan.finish.append(g)


def _direct_reduce(plan: ReducePlan, offsets: list[int]) -> None:
    r, w, c = plan.rank, plan.world, plan.chunks_per_rank
    for d in offsets:
        for g in _chunks_of((r + d) % w, c):
            plan.steps.append(Step("send", g, (r + d) % w))
            plan.finish.append(g)
    # Partials of our chunks come from each peer in the order those peers send them to us.
    for d in offsets:
        for g in _chunks_of(r, c):
            plan.steps.append(Step("reduce", g, (r - d) % w))
    plan.finish += _chunks_of(r, c)


def _one_shot(plan: ReducePlan) -> None:
    r, w, c = plan.rank, plan.world, plan.chunks_per_rank
    order = [(r + d) % w for d in range(1, w)] + [r]
    plan.finish = [g for dst in order for g in _chunks_of(dst, c)]
    for g in plan.finish:
        for d in range(1, w):
            plan.steps.append(Step("send", g, (r + d) % w))
    for g in plan.finish:
        for d in range(1, w):
            plan.steps.append(Step("reduce", g, (r - d) % w))


def _ring_gather(plan: ReducePlan) -> None:
    """all_reduce's second half: the reduced chunks go around the ring once more."""
    r, w, c = plan.rank, plan.world, plan.chunks_per_rank
    nxt, prev = (r + 1) % w, (r - 1) % w
    for g in _chunks_of(r, c):
        plan.steps.append(Step("send", g, nxt, "final"))
    for k in range(1, w):
        src = (r - k) % w
        for g in _chunks_of(src, c):
            plan.steps.append(Step("recv", g, prev, "final"))
            if k < w - 1:
                plan.steps.append(Step("send", g, nxt, "final"))


def _direct_gather(plan: ReducePlan, offsets: list[int]) -> None:
    r, w, c = plan.rank, plan.world, plan.chunks_per_rank
    for d in offsets:
        for g in _chunks_of(r, c):
            plan.steps.append(Step("send", g, (r + d) % w, "final"))
    for d in offsets:
        for g in _chunks_of((r - d) % w, c):
            plan.steps.append(Step("recv", g, (r - d) % w, "final"))
