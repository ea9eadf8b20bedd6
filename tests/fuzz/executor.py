"""A symbolic executor of lowered plans (syncopy/runtime/state/plan.py): runs every rank's plan of one
launch on paper, with the waits the gloo backend has (runtime/transport/backends/gloo.py), and says what is
wrong: a chunk that does not land exactly once where it is needed, a sum that misses or repeats a
partial, a message nobody sends or nobody receives, a wait that depends on itself.

The waits modelled (the strictest the runtime has: chunks landing in the planned order, as with
`Link(reorder=False)`; the shuffled link only relaxes the landing order):

    consumer (all_gather, all_to_all)         producer (reduce_scatter, all_reduce)
    send k to peer p   after send k-1 to p    send k to p   after send k-1 to p, and its value:
                       and its `after` landed               partial (the kernel's, always ready),
    land g             after the message of g               sum (every partial sum of g came),
                       and the chunk landing                final (the chunk's sum is here)
                       before it in `arrival`   receive k   after receive k-1 and its message
                                                sum of g    after the last partial sum of g came

Every event is a node; a dependency on a node that does not exist is a wait on a signal nobody
produces, a cycle is a deadlock. `check(plans)` returns the problems as sentences ([] when fine)
and the number of events it ran.
"""
from __future__ import annotations

from collections import Counter


def check(plans: list) -> tuple[list[str], int]:
    """Problems of one launch whose rank r runs `plans[r]` (all RankPlan or all ReducePlan)."""
    if hasattr(plans[0], "steps"):
        graph, problems = _reduce_graph(plans)
    else:
        graph, problems = _consumer_graph(plans)
    problems += _missing(graph) + _cycle(graph)
    return problems, len(graph)


# --------------------------------------------------------------------------------------------------
# all_gather, all_to_all: RankPlan nodes
# --------------------------------------------------------------------------------------------------
def _consumer_graph(plans: list) -> tuple[dict, list[str]]:
    world, c = len(plans), plans[0].chunks_per_rank
    graph: dict[tuple, list[tuple]] = {}
    message: dict[tuple, tuple] = {}  # (src, dst, chunk) -> the send event carrying it
    problems = _matched([(r, n.peer, n.chunk) for r, p in enumerate(plans) for n in p.sends()],
                        [(n.peer, r, n.chunk) for r, p in enumerate(plans) for n in p.recvs()])
    for r, plan in enumerate(plans):
        problems += _flags_partitioned(plan, world)
        mine = set(range(r * c, (r + 1) * c))
        got = Counter(n.chunk for n in plan.recvs())
        for g in range(world * c):
            want = 0 if g in mine else 1
            if got[g] != want:
                problems.append(f"rank {r} receives chunk {g} {got[g]} times, needs it {want} times")
        last: dict[int, tuple] = {}  # one send thread per peer: its sends go in plan order
        for k, n in enumerate(plan.sends()):
            event = ("send", r, k)
            graph[event] = [("land", r, d) for d in n.after] + ([last[n.peer]] if n.peer in last else [])
            last[n.peer] = message[(r, n.peer, n.chunk)] = event
            if n.chunk not in mine and n.chunk not in n.after:
                problems.append(f"rank {r} relays chunk {n.chunk} to rank {n.peer} without waiting for it to land")
    for r, plan in enumerate(plans):  # after every send is known
        order = {g: k for k, g in enumerate(plan.arrival)}
        before = None
        for n in sorted(plan.recvs(), key=lambda n: order.get(n.chunk, 0)):
            deps = [message.get((n.peer, r, n.chunk), ("nobody sends", n.peer, r, n.chunk))] + ([before] if before else [])
            graph[("land", r, n.chunk)] = deps
            before = ("land", r, n.chunk)
    return graph, problems


def _flags_partitioned(plan, world: int) -> list[str]:
    """Each flag the kernel waits on belongs to exactly one chunk and has an arrival position."""
    flags = [f for g in range(world * plan.chunks_per_rank) for f in plan.flags(g)]
    every = list(range(world * plan.flags_per_rank))
    out = []
    if sorted(flags) != every:
        out.append(f"rank {plan.rank}: the chunks' flags {sorted(flags)} are not the flags 0..{len(every) - 1} once each")
    if sorted(plan.position()) != every:
        out.append(f"rank {plan.rank}: arrival positions cover flags {sorted(plan.position())}, not 0..{len(every) - 1}")
    return out


# --------------------------------------------------------------------------------------------------
# reduce_scatter, all_reduce: ReducePlan steps
# --------------------------------------------------------------------------------------------------
def _reduce_graph(plans: list) -> tuple[dict, list[str]]:
    world = len(plans)
    graph: dict[tuple, list[tuple]] = {}

    def tag(step) -> tuple:
        return (step.chunk, step.value == "final")

    sends = [(r, s.peer, tag(s)) for r, p in enumerate(plans) for s in p.steps if s.kind == "send"]
    recvs = [(s.peer, r, (s.chunk, s.kind == "recv")) for r, p in enumerate(plans) for s in p.steps if s.kind in ("reduce", "recv")]
    problems = _matched(sends, recvs)
    message: dict[tuple, tuple] = {}  # (src, dst, tag) -> the send event carrying it
    for r, plan in enumerate(plans):
        fifo: dict[int, tuple] = {}
        for k, s in enumerate(plan.steps):
            if s.kind != "send":
                continue
            event = ("send", r, k)
            deps = [fifo[s.peer]] if s.peer in fifo else []
            if s.value != "partial":
                deps.append(("sum" if s.value == "sum" else "final", r, s.chunk))
            graph[event] = deps
            fifo[s.peer] = message[(r, s.peer, tag(s))] = event
    for r, plan in enumerate(plans):
        before = None
        came: dict[int, list[tuple]] = {}
        for k, s in enumerate(plan.steps):
            if s.kind == "send":
                continue
            event = ("recv", r, k)
            graph[event] = [message.get((s.peer, r, (s.chunk, s.kind == "recv")), ("nobody sends", s.peer, r, s.chunk))]
            graph[event] += [before] if before else []
            before = event
            if s.kind == "recv":
                graph[("final", r, s.chunk)] = [event]
            else:
                came.setdefault(s.chunk, []).append(event)
        for g, events in came.items():
            graph[("sum", r, g)] = [events[-1]]  # the receive thread adds the chunk up at its last partial
            if g in plan.reduced_here:
                graph[("final", r, g)] = [("sum", r, g)]
        for g in plan.reduced_here:
            if g not in came and world > 1:
                problems.append(f"rank {r} is to hold the sum of chunk {g} but adds no partial sum of it")
    problems += _reduce_values(plans, graph)
    return graph, problems


def _reduce_values(plans: list, graph: dict) -> list[str]:
    """Follow the partials: what each sum and each final value holds, in dependency order; every rank
    must end each chunk it owns with every rank's partial exactly once."""
    world = len(plans)
    everyone = Counter(range(world))
    value: dict[tuple, Counter] = {}  # ("sum" | "final", rank, chunk) -> the partials it holds
    problems: list[str] = []

    def held(kind: str, r: int, g: int) -> Counter:
        key = (kind, r, g)
        if key in value:
            return value[key]
        value[key] = Counter()  # guards a cycle; _cycle reports it
        if kind == "sum":
            total = Counter({r: 1})
            for k, s in enumerate(plans[r].steps):
                if s.kind == "reduce" and s.chunk == g:
                    total += carried(s.peer, r, (g, False))
            value[key] = total
        elif ("final", r, g) in graph and graph[("final", r, g)][0][0] == "sum":
            value[key] = held("sum", r, g)
        else:
            src = next((s.peer for s in plans[r].steps if s.kind == "recv" and s.chunk == g), None)
            value[key] = carried(src, r, (g, True)) if src is not None else Counter({r: 1}) if world == 1 else Counter()
        return value[key]

    def carried(src: int, dst: int, tag: tuple) -> Counter:
        g, final = tag
        for s in plans[src].steps:
            if s.kind == "send" and s.peer == dst and (s.chunk, s.value == "final") == tag:
                return held("final", src, g) if final else held("sum", src, g) if s.value == "sum" else Counter({src: 1})
        return Counter()

    for r, plan in enumerate(plans):
        for g in plan.owned:
            got = held("final", r, g)
            if got != everyone:
                problems.append(f"rank {r} ends chunk {g} with the partials {dict(sorted(got.items()))}, not every rank's once")
    return problems


# --------------------------------------------------------------------------------------------------
# Shared checks
# --------------------------------------------------------------------------------------------------
def _matched(sends: list, recvs: list) -> list[str]:
    """Every message (src, dst, tag) is sent once and received once."""
    out = []
    s, r = Counter(sends), Counter(recvs)
    for key in sorted(set(s) | set(r), key=repr):
        if s[key] != 1 or r[key] != 1:
            src, dst, tag = key
            out.append(f"message {tag} from rank {src} to rank {dst} is sent {s[key]} times and received {r[key]} times")
    return out


def _missing(graph: dict) -> list[str]:
    return [f"{_name(e)} waits for {_name(d)}, which never happens" for e, deps in graph.items() for d in deps if d not in graph]


def _cycle(graph: dict) -> list[str]:
    """The first cycle of waits (a deadlock), named event by event; [] when there is none."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    for root in graph:
        if color[root] != white:
            continue
        stack, path = [(root, iter(graph[root]))], [root]
        color[root] = grey
        while stack:
            node, deps = stack[-1]
            nxt = next(deps, None)
            if nxt is None:
                color[node] = black
                stack.pop()
                path.pop()
            elif color.get(nxt) == grey:
                loop = path[path.index(nxt):] + [nxt]
                return ["a wait depends on itself: " + " waits for ".join(_name(e) for e in loop)]
            elif color.get(nxt) == white:
                color[nxt] = grey
                stack.append((nxt, iter(graph[nxt])))
                path.append(nxt)
    return []


def _name(event: tuple) -> str:
    kind, *rest = event
    return f"{kind}{tuple(rest)}"
