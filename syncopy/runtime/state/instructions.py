r"""The instruction graph of one rank (after Celerity): what a launch of an operator or a pipeline does
there, as nodes (alloc, copy, send, recv, reduce, signal, launch, free) with their dependencies.

It is written from the plans the backends lower (runtime/state/plan.py: a RankPlan per all-gather
operator, a ReducePlan per reduce operator) and from a pipeline's links. Each transfer node (send,
recv, reduce) carries the plan instruction it stands for (`step`), and the gloo backend (CPU ranks)
runs its transfers from the graph: each context's own (`operator`, built once per plan:
Context.instructions), or, from a pipeline plan's first launch on, the pipeline's graph of every
operator (Pipeline.graph). So on CPU ranks what `syncopy explain` prints is the order chunks move in;
the allocations, copies and the kernel launch are the launch sequence's (runtime/launch/sequence.py), in
the order the graph shows. The GPU backends (p2p, nccl) walk the same plans themselves.

Two kinds of edge: `after` (the node starts once those nodes are done: host or stream order) and
`waits` (device-side: the kernel's tiles spin on that signal, each for the chunks it touches, so the
launch does not wait for it as a whole). Allocations happen at the first launch of a shape and
are reused by every later launch; the matching frees happen when the context is released.

    syncopy explain tp_mlp --world 2            # rank 0's graph, as text (syncopy/explain.py)
    syncopy explain tp_mlp --world 2 --dot      # DOT (dot -Tpng)
"""
from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("alloc", "copy", "send", "recv", "reduce", "signal", "launch", "free")


@dataclass(frozen=True)
class Node:
    id: int
    kind: str
    what: str
    op: str  # the operator (kernel name) or link it belongs to
    after: tuple[int, ...] = ()
    waits: tuple[int, ...] = ()  # device-side: the kernel's tiles wait on these signals
    step: object = field(default=None, compare=False, repr=False)  # send / recv / reduce: the plan's Node or Step it runs


@dataclass
class Graph:
    """One rank's instructions for one launch shape, in an order that respects every edge."""

    rank: int
    world: int
    nodes: list[Node] = field(default_factory=list)

    def add(self, kind: str, what: str, op: str, after=(), waits=(), step=None) -> int:
        assert kind in KINDS, kind
        node = Node(len(self.nodes), kind, what, op, tuple(sorted(set(after))), tuple(sorted(set(waits))), step)
        self.nodes.append(node)
        return node.id

    def count(self, kind: str) -> int:
        return sum(1 for n in self.nodes if n.kind == kind)

    def transfers(self, op: str, *kinds: str) -> list:
        """The plan instructions of operator `op`'s transfer nodes of `kinds`, in graph order: what a
        backend that runs from the graph executes (gloo: sends per peer in this order, receives posted
        and awaited in this order)."""
        return [n.step for n in self.nodes if n.op == op and n.kind in kinds and n.step is not None]

    def text(self) -> str:
        lines = [f"rank {self.rank} of {self.world}: {len(self.nodes)} instructions "
                 f"({', '.join(f'{self.count(k)} {k}' for k in KINDS if self.count(k))})"]
        for n in self.nodes:
            deps = "".join([f"  after {','.join(map(str, n.after))}" if n.after else "",
                            f"  waits {','.join(map(str, n.waits))} (device)" if n.waits else ""])
            lines.append(f"  {n.id:3d} {n.kind:6s} [{n.op}] {n.what}{deps}")
        return "\n".join(lines)

    def dot(self) -> str:
        lines = [f'digraph "rank {self.rank}" {{', "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
        shapes = {"launch": "box3d", "signal": "diamond", "alloc": "folder", "free": "folder"}
        for n in self.nodes:
            label = f"{n.kind}\\n{n.what}".replace('"', "'")
            lines.append(f'  n{n.id} [label="{label}", shape={shapes.get(n.kind, "box")}];')
        for n in self.nodes:
            lines += [f"  n{a} -> n{n.id};" for a in n.after]
            lines += [f'  n{w} -> n{n.id} [style=dashed, label="tiles wait"];' for w in n.waits]
        lines.append("}")
        return "\n".join(lines)


def _alloc(g: Graph, op: str, what: list[str]) -> list[int]:
    return [g.add("alloc", f"{w} (first launch of the shape; reused)", op) for w in what]


def _free(g: Graph, op: str, allocs: list[int]) -> None:
    for a in allocs:
        g.add("free", f"{g.nodes[a].what.split(' (')[0]} (at release() or eviction)", op, after=[a])


def all_gather(g: Graph, op: str, plan, tensor: str, waits_on: dict[int, int] | None = None,
               announces: tuple[str, int] | None = None) -> dict[int, int]:
    """An all-gather operator's instructions on `g` from its RankPlan; `waits_on`: link chunk -> the
    signal node its tiles also wait on; `announces`: (tensor, chunks) its tiles raise for the next
    operator. Returns the link signal nodes it raises (chunk -> node)."""
    r, c = plan.rank, plan.chunks_per_rank
    allocs = _alloc(g, op, [f"gathered '{tensor}' ({plan.world * plan.rows_per_rank} rows)", f"signal pad ({plan.world * c} flags)"])
    own = g.add("copy", f"own shard -> rows {r * plan.rows_per_rank}..{(r + 1) * plan.rows_per_rank - 1}", op, after=allocs)
    landed = {}
    for i in range(c):
        landed[r * c + i] = g.add("signal", f"chunk {r * c + i} (own) flag = epoch", op, after=[own])
    for n in plan.nodes:
        if n.kind == "recv":
            lo, hi = plan.bounds(n.chunk)
            recv = g.add("recv", f"chunk {n.chunk} (rows {lo}..{hi - 1}) from rank {n.peer}", op, after=allocs[:1], step=n)
            landed[n.chunk] = g.add("signal", f"chunk {n.chunk} flag = epoch", op, after=[recv])
    for n in plan.nodes:
        if n.kind == "send":
            g.add("send", f"chunk {n.chunk} to rank {n.peer}" + (" (relay)" if n.chunk // c != r else ""), op,
                  after=[landed[n.chunk], *(landed[a] for a in n.after if a in landed)], step=n)
    launch = g.add("launch", f"{op} (tiles in arrival order)", op, after=[*allocs, own],
                   waits=[*landed.values(), *(waits_on or {}).values()])
    raised = _announce(g, op, launch, announces)
    _free(g, op, allocs)
    return raised


def reduce(g: Graph, op: str, plan, tensor: str, waits_on: dict[int, int] | None = None,
           announces: tuple[str, int] | None = None) -> dict[int, int]:
    """A reduce_scatter / all_reduce operator's instructions on `g` from its ReducePlan."""
    n_chunks = plan.world * plan.chunks_per_rank
    allocs = _alloc(g, op, [f"partial '{tensor}' ({plan.size or plan.world * plan.rows_per_rank} rows)",
                            f"signal pad ({n_chunks} flags, counters, targets)"])
    init = g.add("copy", "partial = 0" if plan.pattern == "reduce_scatter" else f"partial = this rank's '{tensor}'", op, after=allocs)
    launch = g.add("launch", f"{op} (tiles in send order)", op, after=[init], waits=list((waits_on or {}).values()))
    ready = {c: g.add("signal", f"chunk {c} flag = epoch (its last tile)", op, after=[launch]) for c in plan.finish}
    done: dict[int, int] = dict(ready)  # chunk -> the node after which this rank's value of it is complete
    for s in plan.steps:
        if s.kind == "reduce":
            done[s.chunk] = g.add("reduce", f"chunk {s.chunk} += partial from rank {s.peer}", op, after=[done[s.chunk]], step=s)
        elif s.kind == "recv":
            done[s.chunk] = g.add("recv", f"reduced chunk {s.chunk} from rank {s.peer} -> output", op, after=allocs[:1], step=s)
        else:
            g.add("send", f"chunk {s.chunk} ({s.value}) to rank {s.peer}", op, after=[done[s.chunk]], step=s)
    for c in plan.owned:
        if c in done and c in plan.reduced_here:
            g.add("copy", f"reduced chunk {c} -> output", op, after=[done[c]])
    raised = _announce(g, op, launch, announces)
    _free(g, op, allocs)
    return raised


def _announce(g: Graph, op: str, launch: int, announces: tuple[str, int] | None) -> dict[int, int]:
    if announces is None:
        return {}
    tensor, chunks = announces
    return {k: g.add("signal", f"'{tensor}' chunk {k} flag = epoch (its last tile; for the next operator)", op, after=[launch])
            for k in range(chunks)}


def link(g: Graph, tensor: str, chunks: int) -> list[int]:
    """A pipeline link's own allocation: its context and signal pad (freed with `_free` at the end)."""
    return _alloc(g, f"link {tensor}", [f"link context and signal pad ({chunks} flags, counters, targets)"])


def _lowering(plan):
    """The function that writes an operator's nodes from its plan: `reduce` for a ReducePlan, else `all_gather`."""
    return reduce if hasattr(plan, "steps") else all_gather


def operator(plan, op: str, tensor: str) -> Graph:
    """One operator's graph on its rank, from its plan (a RankPlan or a ReducePlan)."""
    g = Graph(plan.rank, plan.world)
    _lowering(plan)(g, op, plan, tensor)
    return g


@dataclass(frozen=True)
class Stage:
    """One operator of a pipeline as the graph needs it: its kernel's name, its lowered plan (a
    RankPlan or a ReducePlan) and its communicated tensor."""

    op: str
    plan: object
    tensor: str


def pipeline(g: Graph, stages: list[Stage], links: list[tuple[int, int, str, int]]) -> Graph:
    """The operators in launch order, linked: (writer index, reader index, label, chunks) per link."""
    pads = {label: link(g, label, chunks) for _, _, label, chunks in links}
    raised: dict[int, dict[int, int]] = {}
    for i, st in enumerate(stages):
        waits_on = next((raised[src] for src, dst, _, _ in links if dst == i), None)
        announces = next(((label, chunks) for src, _, label, chunks in links if src == i), None)
        raised[i] = _lowering(st.plan)(g, st.op, st.plan, st.tensor, waits_on=waits_on, announces=announces)
    for label, pad in pads.items():
        _free(g, f"link {label}", pad)
    return g
