"""Discrete-event simulation of one fused operator, executed three ways.

All ranks run the same program shifted by their rank, so one rank (rank 0) is simulated and the
others are read off by symmetry: the message rank 0 *receives* from its upstream peer completes
when the matching message rank 0 *sends* downstream does.

    sequential       comm  |==========|
                     GEMM              |launch|######## all SMs ########|

    stream_overlap   comm  |c1|c2|c3|c4|                 one GEMM per chunk, launched as each chunk
                     GEMM  |L|##|  |L|##|L|##|L|##|      lands (AsyncTP): a launch + an event per
                                                         chunk, and partial waves on small GEMMs

    fused            comm  |c1|c2|c3|c4|                 one kernel; each tile waits for the chunks
                     GEMM  |L|###########|#|#|#|         it reads, tiles run in chunk-arrival order;
                            fill          ^ tail          comm SMs (NCCL) are taken from the kernel

Consumers (all_gather, all_to_all) wait for chunks; producers (reduce_scatter, all_reduce) send a
chunk once the tiles that write it are done, so there the fill is the first chunk's compute and the
tail is the communication left after the last tile.

Orders mirror syncopy.runtime.state.plan: `ring` relays around the ring in one direction;
`bidirectional_ring` relays half the peers each way; `local_first` has every peer send straight to
each rank. On a `direct` topology all of a rank's traffic shares its one port; on a `ring`
topology the two neighbour links run in parallel and a message to a peer d hops away occupies a
link d times as long (it is carried hop by hop).
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from syncopy.planner.hardware import HardwareProfile
from syncopy.planner.model import ComputeCost, add_seconds, compute_cost
from syncopy.planner.workloads import Workload

ORDERS = ("ring", "bidirectional_ring", "local_first")


# --- communication: messages on shared resources ---------------------------------------------


@dataclass(frozen=True)
class Message:
    """One transfer (or, with resource None, a join point that occupies nothing)."""

    resource: str | None  # the port or link it occupies for `seconds`
    seconds: float
    ready: float = 0.0  # earliest start, from outside the message graph
    deps: tuple[int, ...] = ()  # messages that must have landed first
    delay: float = 0.0  # from the last dependency's landing to this message being ready


def deliver(messages: Sequence[Message]) -> list[float]:
    """Landing time of every message.

    List scheduling: each resource carries one message at a time; whenever it can start one, it
    takes the message that is ready earliest (ties: the one listed first), the way the runtime's
    executor runs every ready node at once.
    """
    n = len(messages)
    ready = [m.ready for m in messages]
    waiting = [len(set(m.deps)) for m in messages]
    dependents: list[list[int]] = [[] for _ in range(n)]
    for j, m in enumerate(messages):
        for d in set(m.deps):
            dependents[d].append(j)
    free: dict[str, float] = {}
    end = [0.0] * n
    heap = [(ready[j], j) for j in range(n) if not waiting[j]]
    heapq.heapify(heap)
    while heap:
        key, j = heapq.heappop(heap)
        m = messages[j]
        start = ready[j] if m.resource is None else max(free.get(m.resource, 0.0), ready[j])
        if start > key:  # the resource was taken since this entry was queued
            heapq.heappush(heap, (start, j))
            continue
        end[j] = start + m.seconds
        if m.resource is not None:
            free[m.resource] = end[j]
        for d in dependents[j]:
            ready[d] = max(ready[d], end[j] + messages[d].delay)
            waiting[d] -= 1
            if not waiting[d]:
                res = messages[d].resource
                heapq.heappush(heap, (ready[d] if res is None else max(free.get(res, 0.0), ready[d]), d))
    return end


@dataclass(frozen=True)
class _Net:
    """What message builders need: the world, chunk sizes, the link and its topology."""

    world: int
    chunks: int
    block_bytes: Callable[[int, int], float]  # bytes of chunk i of rank r's shard
    profile: HardwareProfile

    def message(self, direction: str, hops: int, nbytes: float, **kw) -> Message:
        if self.profile.network.topology == "direct":
            return Message("port", self.profile.link.seconds(nbytes), **kw)
        return Message(direction, hops * self.profile.link.seconds(nbytes), **kw)

    def add_s(self, nbytes: float) -> float:
        return add_seconds(self.profile, nbytes)


def _peers(world: int, order: str) -> list[tuple[int, int, str, int]]:
    """(distance, source rank, direction, hops) of every peer of rank 0, in arrival order.

    Clockwise data comes from rank -d, counter-clockwise from rank +d.
    """
    if order == "ring":
        return [(d, -d % world, "cw", d) for d in range(1, world)]
    if order == "bidirectional_ring":
        right = world // 2  # ceil((world - 1) / 2) peers clockwise, the rest counter-clockwise
        cw = [(d, -d % world, "cw", d) for d in range(1, right + 1)]
        ccw = [(d, d % world, "ccw", d) for d in range(1, world - right)]
        return [p for k in range(len(cw)) for p in (cw[k], *ccw[k : k + 1])]
    if order == "local_first":
        # Straight from each peer; on a ring topology it travels the shorter way round.
        return [(d, -d % world, *(("cw", d) if d <= world - d else ("ccw", world - d))) for d in range(1, world)]
    raise ValueError(f"unknown order '{order}'; use one of {', '.join(ORDERS)}")


def _gather(
    net: _Net, order: str, relay: bool, msgs: list[Message], first_hop: Callable[[int, int], dict]
) -> dict[tuple[int, int], int]:
    """Messages that bring every peer's chunks to rank 0; returns {(source rank, chunk): message}.

    With `relay`, ring orders forward each chunk one hop at a time (the chunk from distance d
    leaves the neighbour once it landed there, which by symmetry is when the chunk from distance
    d-1 lands here). Without it every chunk comes straight from its source.
    """
    relayed = relay and order != "local_first"
    signal = net.profile.overheads.signal_s
    index: dict[tuple[int, int], int] = {}
    prev: dict[tuple[str, int], int] = {}
    for d, src, direction, hops in _peers(net.world, order):
        for i in range(net.chunks):
            nbytes = net.block_bytes(src, i)
            if relayed and d > 1:
                kw = {"deps": (prev[direction, i],), "delay": signal}
                msgs.append(net.message(direction, 1, nbytes, **kw))
            else:
                msgs.append(net.message(direction, 1 if relayed else hops, nbytes, **first_hop(src, i)))
            index[src, i] = prev[direction, i] = len(msgs) - 1
    return index


def _reduce_scatter(net: _Net, order: str, msgs: list[Message], ready: Callable[[int, int], float]) -> list[int]:
    """Messages that reduce rank 0's shard; returns, per chunk of it, a join that lands when it is reduced.

    `ready(shard, i)` is when rank 0's own partial of chunk i of `shard` may leave.
    """
    w, c = net.world, net.chunks
    finals = []
    if order == "local_first":
        sends = [(d, "cw", d) if d <= w - d else (d, "ccw", w - d) for d in range(1, w)]
        for i in range(c):
            mine = []
            for d, direction, hops in sends:
                dst = d % w
                msgs.append(net.message(direction, hops, net.block_bytes(dst, i), ready=ready(dst, i)))
                mine.append(len(msgs) - 1)
            adds = (w - 1) * net.add_s(net.block_bytes(0, i))
            msgs.append(Message(None, 0.0, ready=ready(0, i) + adds, deps=tuple(mine), delay=adds))
            finals.append(len(msgs) - 1)
        return finals
    rings = [("cw", 1.0)] if order == "ring" else [("cw", 0.5), ("ccw", 0.5)]
    if order not in ("ring", "bidirectional_ring"):
        raise ValueError(f"unknown order '{order}'; use one of {', '.join(ORDERS)}")
    last: dict[tuple[str, int], int] = {}
    for s in range(w - 1):
        # At step s the clockwise ring carries the partial sum of shard -1-s through rank 0: it set
        # out from rank -s, rank 0 adds its own partial and forwards it; the other ring mirrors it.
        for direction, share in rings:
            shard = (-1 - s) % w if direction == "cw" else (1 + s) % w
            for i in range(c):
                nbytes = share * net.block_bytes(shard, i)
                kw = {"ready": ready(shard, i)}
                if s:
                    kw.update(deps=(last[direction, i],), delay=net.add_s(nbytes))
                msgs.append(net.message(direction, 1, nbytes, **kw))
                last[direction, i] = len(msgs) - 1
    for i in range(c):
        add = net.add_s(net.block_bytes(0, i))
        deps = tuple(last[direction, i] for direction, _ in rings) if w > 1 else ()
        msgs.append(Message(None, 0.0, ready=ready(0, i) + add, deps=deps, delay=add))
        finals.append(len(msgs) - 1)
    return finals


def _producer_comm(net: _Net, pattern: str, order: str, ready: Callable[[int, int], float]) -> tuple[float, float, int]:
    """(first send start, when the collective is complete, messages) for a producer pattern."""
    if net.world == 1:
        return 0.0, max(ready(0, i) for i in range(net.chunks)), 0
    msgs: list[Message] = []
    finals = _reduce_scatter(net, order, msgs, ready)
    first = min(m.ready for m in msgs if m.resource is not None)
    if pattern == "all_reduce":
        _gather(net, order, True, msgs, lambda src, i: {"deps": (finals[i],)})
    end = deliver(msgs)
    return first, max(end), sum(m.resource is not None for m in msgs)


def _consumer_comm(net: _Net, pattern: str, order: str) -> tuple[dict[tuple[int, int], float], int]:
    """({(source rank, chunk): landing time}, messages) for a consumer pattern; local chunks land at 0."""
    arrival = {(0, i): 0.0 for i in range(net.chunks)}
    if net.world == 1:
        return arrival, 0
    msgs: list[Message] = []
    # An all-gather can relay (every rank keeps what it forwards); all-to-all blocks go straight.
    index = _gather(net, order, pattern == "all_gather", msgs, lambda src, i: {})
    end = deliver(msgs)
    arrival.update({key: end[j] for key, j in index.items()})
    return arrival, len(msgs)


# --- computation: tiles on SMs ----------------------------------------------------------------


class SmPool:
    """The SMs of one kernel, as buckets of [free time, SM count] sorted by time.

    Tiles are dealt to the SM that frees first. With equal tiles, no two SMs are ever more than one
    tile apart, so dealing n tiles is: every SM takes n // s, and the first n % s take one more and
    move to the back. Buckets keep that O(distinct times) instead of O(SMs).
    """

    def __init__(self, sms: int, start: float = 0.0):
        self.sms = sms
        self._buckets = [[start, sms]]

    def run(self, n_tiles: int, tile_s: float, ready: float = 0.0) -> float:
        """Run `n_tiles` tiles that may not start before `ready`; returns when the last one ends."""
        if n_tiles <= 0:
            return ready
        buckets, idle = [], 0
        for time, count in self._buckets:
            if time <= ready:
                idle += count  # SMs waiting for this data all start when it is there
            else:
                buckets.append([time, count])
        if idle:
            buckets.insert(0, [ready, idle])
        rounds, extra = divmod(n_tiles, self.sms)
        if rounds:
            for bucket in buckets:
                bucket[0] += rounds * tile_s
        moved = []
        while extra:
            take = min(extra, buckets[0][1])
            moved.append([buckets[0][0] + tile_s, take])
            buckets[0][1] -= take
            extra -= take
            if not buckets[0][1]:
                buckets.pop(0)
        self._buckets = sorted(buckets + moved)
        finish = max(t for t, _ in moved) if moved else -1.0
        return max(finish, self._buckets[-1][0]) if rounds else finish

    @property
    def done(self) -> float:
        """When every SM is free."""
        return self._buckets[-1][0]


@dataclass(frozen=True)
class _Block:
    """A contiguous run of the kernel's rows that moves as one chunk: chunk `index` of `rank`'s shard."""

    rank: int
    index: int
    start: int
    stop: int


def _layout(rows: int, world: int, chunks: int) -> list[_Block]:
    """Blocks in row order; the same floor(i*S/C) boundaries as syncopy.schedule.chunks."""
    blocks = []
    for r in range(world):
        lo, hi = r * rows // world, (r + 1) * rows // world
        if hi - lo < chunks:
            raise ValueError(
                f"chunks_per_rank is {chunks} but a rank's shard has only {hi - lo} rows; use chunks_per_rank <= {hi - lo}"
            )
        size = hi - lo
        blocks += [_Block(r, i, lo + i * size // chunks, lo + (i + 1) * size // chunks) for i in range(chunks)]
    return blocks


def _row_tiles(blocks: list[_Block], rows: int, tile_m: int) -> list[tuple[list[_Block], int]]:
    """The row tiles as runs of consecutive tiles that read or write the same blocks: (those
    blocks, how many tiles). Tiles between two block boundaries all touch the same blocks, so there
    are O(blocks) runs whatever the number of rows: the planner's cost does not grow with M."""
    starts = [b.start for b in blocks]
    n_tiles = -(-rows // tile_m)
    runs = []
    t = 0
    while t < n_tiles:
        first = bisect_right(starts, t * tile_m) - 1
        last = bisect_right(starts, min((t + 1) * tile_m, rows) - 1) - 1
        # The span changes once a tile starts in the next block, or ends in the block after `last`.
        end = n_tiles
        if first + 1 < len(starts):
            end = min(end, -(-starts[first + 1] // tile_m))
        if last + 1 < len(starts):
            end = min(end, starts[last + 1] // tile_m)
        runs.append((blocks[first : last + 1], end - t))
        t = end
    return runs


def _group(readies: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """(ready time, tiles) runs sorted by ready time (the fused kernel's tile order), runs of equal
    times merged."""
    groups: list[list] = []
    for r, n in sorted(readies, key=lambda run: run[0]):
        if groups and groups[-1][0] == r:
            groups[-1][1] += n
        else:
            groups.append([r, n])
    return [(r, n) for r, n in groups]


# --- the three executions -----------------------------------------------------------------------


@dataclass(frozen=True)
class Execution:
    """Predicted timeline of one execution; all times in seconds from the operator's start."""

    total_s: float
    comm_end_s: float  # the last chunk landed (consumer) / the collective completed (producer)
    compute_end_s: float  # the last tile finished
    fill_s: float  # consumer: the first remote chunk usable; producer: the first chunk ready to send
    messages: int  # transfers issued


@dataclass(frozen=True)
class Prediction:
    """The three executions of one operator at one chunk count and order."""

    workload: Workload
    world: int
    chunks_per_rank: int
    order: str
    backend: str
    comm_s: float  # the collective alone
    compute_s: float  # the kernel alone on every SM, launch included
    sequential: Execution
    stream_overlap: Execution
    fused: Execution


class Simulator:
    """Simulates one workload on one profile and world; reuse it across chunk counts and orders."""

    def __init__(self, workload: Workload, profile: HardwareProfile, world: int, backend: str | None = None):
        if world < 1:
            raise ValueError(f"world is {world}; give --world 1 or more")
        limit = profile.network.max_world
        if limit and world > limit:
            raise ValueError(
                f"hardware '{profile.name}' describes at most {limit} ranks but world is {world}; use --world <= {limit} "
                "or a profile whose network spans more ranks"
            )
        if workload.m < world:
            raise ValueError(f"M is {workload.m}, fewer rows than the {world} ranks; use M >= world")
        self.workload, self.profile, self.world = workload, profile, world
        self.backend = backend or profile.default_backend
        self.comm_sms = profile.backend(self.backend).comm_sms
        # The fused and stream kernels share the device with communication SMs; sequential has it all.
        self.sms = profile.compute.sm_count - self.comm_sms
        self.cost: ComputeCost = compute_cost(workload, profile, world, self.sms)
        alone = compute_cost(workload, profile, world, profile.compute.sm_count)
        self.compute_s = profile.overheads.launch_s + alone.kernel_s(workload.m)
        self.comm_s, self._collective_messages = self._collective()

    # Helpers shared by the executions.
    def _net(self, chunks: int) -> _Net:
        blocks = {(b.rank, b.index): b.stop - b.start for b in _layout(self.workload.m, self.world, chunks)}
        row_bytes = self.workload.comm_row_bytes
        return _Net(self.world, chunks, lambda r, i: blocks[r, i] * row_bytes, self.profile)

    def _collective(self) -> tuple[float, int]:
        """The collective on its own, one message per peer, in its best order."""
        net = self._net(1)
        options = []
        for order in ORDERS:
            if self.workload.consumer:
                arrival, n = _consumer_comm(net, self.workload.pattern, order)
                options.append((max(arrival.values()), n))
            else:
                _, end, n = _producer_comm(net, self.workload.pattern, order, lambda shard, i: 0.0)
                options.append((end, n))
        return min(options)

    def sequential(self) -> Execution:
        """The collective, then the kernel on every SM (or the kernel, then the collective)."""
        comm, compute, n = self.comm_s, self.compute_s, self._collective_messages
        if self.workload.consumer:
            return Execution(comm + compute, comm, comm + compute, comm, n)
        return Execution(compute + comm, compute + comm, compute, compute, n)

    def stream_overlap(self, chunks: int, order: str) -> Execution:
        """One kernel per chunk on a compute stream, handed each chunk by an event (AsyncTP style)."""
        o = self.profile.overheads
        blocks = _layout(self.workload.m, self.world, chunks)
        local_rows = sum(b.stop - b.start for b in blocks if b.rank == 0)
        net = self._net(chunks)
        if self.workload.consumer:
            arrival, n = _consumer_comm(net, self.workload.pattern, order)
            # The local shard is ready at once: one kernel over all of it, then one per chunk as it lands.
            t = o.launch_s + self.cost.kernel_s(local_rows)
            remote = sorted((arrival[b.rank, b.index], k, b) for k, b in enumerate(blocks) if b.rank != 0)
            for landed, _, b in remote:
                t = max(t, landed + o.stream_sync_s) + o.launch_s + self.cost.kernel_s(b.stop - b.start)
            last = max(arrival.values())
            fill = min((a for a, _, _ in remote), default=0.0) + o.stream_sync_s
            return Execution(t, last, t, fill, n)
        # Producer: kernels back to back in send order, each chunk handed to comm when its kernel ends.
        done: dict[tuple[int, int], float] = {}
        t = 0.0
        for shard in self._send_order(order):
            shard_blocks = [b for b in blocks if b.rank == shard]
            if shard == 0:  # the own shard is only reduced here: one kernel for all of it, last
                t += o.launch_s + self.cost.kernel_s(local_rows)
                done.update({(0, b.index): t + o.stream_sync_s for b in shard_blocks})
                continue
            for b in shard_blocks:
                t += o.launch_s + self.cost.kernel_s(b.stop - b.start)
                done[shard, b.index] = t + o.stream_sync_s
        first, end, n = _producer_comm(net, self.workload.pattern, order, lambda shard, i: done[shard, i])
        return Execution(max(t, end), end, t, first, n)

    def fused(self, chunks: int, order: str) -> Execution:
        """One kernel whose tiles wait for (or announce) their chunks, in chunk-arrival order."""
        o = self.profile.overheads
        blocks = _layout(self.workload.m, self.world, chunks)
        spans = _row_tiles(blocks, self.workload.m, self.cost.tile_m)
        m, cols, sync = self.workload.m, self.cost.col_tiles, self.cost.sync_s
        pool = SmPool(self.sms, start=o.launch_s)
        net = self._net(chunks)
        if self.workload.consumer:
            arrival, n = _consumer_comm(net, self.workload.pattern, order)
            # A remote chunk is usable once its flag is seen; local rows are there from the start.
            usable = {key: (t + o.signal_s if key[0] else 0.0) for key, t in arrival.items()}
            readies = [(max(usable[b.rank, b.index] for b in span), count) for span, count in spans]
            for ready, row_tiles in _group(readies):
                pool.run(row_tiles * cols, self.cost.tile_s(m, row_tiles * cols) + sync, ready)
            remote = [a for (r, _), a in arrival.items() if r != 0]
            fill = min(remote, default=0.0) + (o.signal_s if remote else 0.0)
            return Execution(pool.done, max(arrival.values()), pool.done, fill, n)
        # Producer: tiles in the order their chunks leave; a chunk leaves when its last tile is done.
        # A run's tiles go to the SMs together: with equal tiles that is dealing them one by one, and
        # the run's last end is its chunks' finish (dealt tiles end no earlier than those before).
        rank_of = {shard: k for k, shard in enumerate(self._send_order(order))}
        priority = [min(rank_of[b.rank] * chunks + b.index for b in span) for span, _ in spans]
        finish: dict[tuple[int, int], float] = {}
        tile_s = self.cost.tile_s(m, sum(count for _, count in spans) * cols) + sync  # every tile may start at once
        for t in sorted(range(len(spans)), key=priority.__getitem__):
            span, count = spans[t]
            end = pool.run(count * cols, tile_s)
            for b in span:
                finish[b.rank, b.index] = max(finish.get((b.rank, b.index), 0.0), end)
        first, end, n = _producer_comm(net, self.workload.pattern, order, lambda shard, i: finish[shard, i] + o.signal_s)
        return Execution(max(pool.done, end), end, pool.done, first, n)

    def _send_order(self, order: str) -> list[int]:
        """Shards in the order a producer computes them: the ones that leave first, its own last."""
        w = self.world
        if order == "ring":
            shards = [(-1 - s) % w for s in range(w - 1)]
        elif order == "bidirectional_ring":
            cw = [(-1 - s) % w for s in range(w - 1)]
            ccw = [(1 + s) % w for s in range(w - 1)]
            shards = list(dict.fromkeys(x for pair in zip(cw, ccw) for x in pair))
        elif order == "local_first":
            shards = list(range(1, w))
        else:
            raise ValueError(f"unknown order '{order}'; use one of {', '.join(ORDERS)}")
        return shards + [0]

    def predict(self, chunks: int, order: str) -> Prediction:
        """All three executions at `chunks` per rank in `order`."""
        return Prediction(
            self.workload, self.world, chunks, order, self.backend, self.comm_s, self.compute_s,
            self.sequential(), self.stream_overlap(chunks, order), self.fused(chunks, order),
        )


def simulate(
    workload: Workload, profile: HardwareProfile, world: int, chunks_per_rank: int, order: str = "ring", backend: str | None = None
) -> Prediction:
    """Predict sequential, stream-level and fused times of `workload` at one chunk count and order."""
    return Simulator(workload, profile, world, backend).predict(chunks_per_rank, order)
