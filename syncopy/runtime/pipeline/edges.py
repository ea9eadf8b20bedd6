"""What a pipeline records and infers: each launch (operator, grid, arguments) and the edges between
them, a tensor one launch stores into and a later one reads."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from syncopy.errors import LaunchError


@dataclass
class Launch:
    """One recorded launch: the operator, its grid and arguments (bound to the kernel's names)."""

    op: object  # FusedKernel
    grid: object
    args: tuple
    kwargs: dict
    group: object
    bound: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.op.local.fn.__name__

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.bound.items() if isinstance(v, torch.Tensor)}


@dataclass(frozen=True)
class Edge:
    """Launch `src` stores into its argument `src_arg`, which launch `dst` reads as `dst_arg`."""

    src: int
    src_arg: str
    dst: int
    dst_arg: str



def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same tensor (not merely overlapping storage): what a link may stand for."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            and a.device == b.device)


def infer_edges(launches: list[Launch]) -> list[Edge]:
    """The tensors the launches share, each as an edge from its latest earlier user to its reader.

    Every pair of launches that pass the same tensor is an edge, except where that tensor is the
    communicated one of either operator (its rows come and go with chunks of their own: refused, see
    `_check_edge`). Whether the first kernel stores into it and the second loads it is the link
    pass's to find (it names what is missing)."""
    edges = []
    for j, later in enumerate(launches):
        for dst_arg, t in later.tensors().items():
            for i in range(j - 1, -1, -1):
                src_arg = next((n for n, u in launches[i].tensors().items() if _same(u, t)), None)
                if src_arg is not None:
                    edges.append(Edge(i, src_arg, j, dst_arg))
                    break
    for e in edges:
        _check_edge(launches, e)
    _check_roles(launches, edges)
    return edges


def _check_edge(launches: list[Launch], e: Edge) -> None:
    for index, arg in ((e.src, e.src_arg), (e.dst, e.dst_arg)):
        op = launches[index].op
        if arg in op.schedule.tensors:
            raise LaunchError(f"launch {index + 1} of the pipeline ({launches[index].name}) communicates '{arg}', which launch "
                              f"{e.src + 1 if index == e.dst else e.dst + 1} also takes; a pipeline links tensors that stay "
                              "on their rank: pass a separate tensor to one of them, or launch them outside the pipeline")


def _check_roles(launches: list[Launch], edges: list[Edge]) -> None:
    """One link in and one link out per operator so far: each is one context and signal pad in the kernel."""
    for index, launch in enumerate(launches):
        for role, mine in (("reads", [e for e in edges if e.dst == index]), ("writes", [e for e in edges if e.src == index])):
            args = sorted({e.dst_arg if role == "reads" else e.src_arg for e in mine})
            if len(args) > 1:
                raise LaunchError(f"launch {index + 1} of the pipeline ({launch.name}) {role} {len(args)} tensors that other "
                                  f"launches share ({', '.join(args)}); a pipeline links one tensor in and one out per "
                                  "operator so far: split the launches into two pipelines")
    for e in edges:
        consumers = {x.dst for x in edges if (x.src, x.src_arg) == (e.src, e.src_arg)}
        if len(consumers) > 1:
            raise LaunchError(f"'{e.src_arg}' of launch {e.src + 1} ({launches[e.src].name}) feeds {len(consumers)} later launches; "
                              "a pipeline links a tensor to one reader so far: give each reader its own copy, or split the pipeline")



def writer_chunks(writer: Launch, world: int) -> int:
    """A link's chunks by default: its writer's, world x chunks_per_rank (1 a rank where the planner picks)."""
    s = writer.op.schedule
    return (s.chunks_per_rank if isinstance(s.chunks_per_rank, int) else 1) * world


def structure(launches: list[Launch]) -> tuple:
    """The launches' operators, every tensor argument's shape, strides, dtype and device, and which
    arguments are the same tensor (not which tensors: a plan serves new data of the same layout)."""
    seen: dict[tuple, int] = {}
    parts = []
    for x in launches:
        for name, t in sorted(x.tensors().items()):
            ident = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))
            parts.append((id(x.op), name, ident[1:], seen.setdefault(ident, len(seen))))
    return tuple(parts)
