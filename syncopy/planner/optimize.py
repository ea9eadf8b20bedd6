"""Choose a chunk count and order by simulating every candidate (the "optimize" step of POAS).

    plan = choose("all_gather", 8192, 3584, 8192, world=8, hardware="h100-nvlink")
    plan.chunks_per_rank, plan.order, plan.fused_s, plan.reason

`chunks_per_rank: auto` in a schedule resolves through `choose`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from syncopy.planner.hardware import HardwareProfile, load_profile
from syncopy.planner.simulate import ORDERS, Prediction, Simulator
from syncopy.planner.workloads import Workload, make_workload

#: Chunk counts per rank the optimizer tries (powers of two and the steps between them).
CHUNK_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)

# Candidates within this fraction of the best are a tie, settled by fewer chunks, then ORDERS'
# order: fewer chunks mean fewer signals and messages to go wrong for a gain the model cannot see.
TIE = 0.005


@dataclass(frozen=True)
class Candidate:
    """One simulated (chunk count, order)."""

    chunks_per_rank: int
    order: str
    fused_s: float
    stream_overlap_s: float


@dataclass(frozen=True)
class Plan:
    """The optimizer's choice for one operator, with the predictions behind it (seconds)."""

    template: str
    pattern: str
    world: int
    shape: tuple[int, int, int]
    dtype: str
    hardware: str
    backend: str
    chunks_per_rank: int
    order: str
    sequential_s: float
    stream_overlap_s: float  # the best stream-level decomposition, at its own chunk count
    stream_chunks_per_rank: int
    fused_s: float
    comm_s: float  # the collective alone
    compute_s: float  # the kernel alone on every SM
    bound: str  # compute-bound | comm-bound | latency-bound | balanced | no communication
    reason: str
    candidates: tuple[Candidate, ...]

    @property
    def speedup(self) -> float:
        """Sequential time over fused time."""
        return self.sequential_s / self.fused_s

    @property
    def speedup_vs_stream(self) -> float:
        """Stream-level time over fused time."""
        return self.stream_overlap_s / self.fused_s

    def to_json(self) -> dict:
        """The plan as `syncopy plan --json` prints it (times in milliseconds)."""
        return {
            "template": self.template,
            "pattern": self.pattern,
            "world": self.world,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "hardware": self.hardware,
            "backend": self.backend,
            "sequential_ms": self.sequential_s * 1e3,
            "stream_overlap_ms": self.stream_overlap_s * 1e3,
            "fused_ms": self.fused_s * 1e3,
            "comm_ms": self.comm_s * 1e3,
            "compute_ms": self.compute_s * 1e3,
            "chunks_per_rank": self.chunks_per_rank,
            "order": self.order,
            "stream_chunks_per_rank": self.stream_chunks_per_rank,
            "speedup": self.speedup,
            "speedup_vs_stream": self.speedup_vs_stream,
            "bound": self.bound,
            "reason": self.reason,
            "candidates": [
                {"chunks_per_rank": c.chunks_per_rank, "order": c.order, "fused_ms": c.fused_s * 1e3,
                 "stream_overlap_ms": c.stream_overlap_s * 1e3}
                for c in self.candidates
            ],
        }


def choose(
    pattern: str,
    m: int,
    n: int,
    k: int,
    *,
    world: int,
    dtype: str = "bf16",
    hardware: str | HardwareProfile = "h100-nvlink",
    backend: str | None = None,
) -> Plan:
    """The best `chunks_per_rank` and `order` for one operator, and the predicted times.

    pattern: a schedule pattern (all_gather, reduce_scatter, all_reduce, all_to_all), read as its
        GEMM template, or a template name (ag_gemm, gemm_rs, gemm_ar, a2a_gemm, ag_rmsnorm).
    m, n, k: the template's shape (see syncopy.planner.workloads: M is the rows one rank computes).
    world: ranks; dtype: fp16 | bf16 | fp32; hardware: a profile name, a YAML path, or a profile;
    backend: one of the profile's backends (default: its default_backend).

    Raises ValueError, saying what to change, on an unknown name or an impossible shape.
    """
    workload = make_workload(pattern, m, n, k, dtype)
    return choose_for(workload, load_profile(hardware), world, backend=backend)


def choose_for(
    workload: Workload,
    profile: HardwareProfile,
    world: int,
    *,
    backend: str | None = None,
    chunk_choices: Sequence[int] = CHUNK_CHOICES,
    orders: Sequence[str] = ORDERS,
) -> Plan:
    """`choose` for a built workload and profile, over the given chunk counts and orders."""
    sim = Simulator(workload, profile, world, backend)
    rows_per_rank = workload.m // world
    choices = [c for c in chunk_choices if c <= rows_per_rank] or [1]
    if world == 1:
        choices, orders = [1], [orders[0]]
    predictions = [sim.predict(c, order) for c in choices for order in orders]
    best = _pick(predictions, lambda p: p.fused.total_s, orders)
    stream = _pick(predictions, lambda p: p.stream_overlap.total_s, orders)
    bound = _bound(best, profile)
    return Plan(
        template=workload.template,
        pattern=workload.pattern,
        world=world,
        shape=(workload.m, workload.n, workload.k),
        dtype=workload.dtype,
        hardware=profile.name,
        backend=sim.backend,
        chunks_per_rank=best.chunks_per_rank,
        order=best.order,
        sequential_s=best.sequential.total_s,
        stream_overlap_s=stream.stream_overlap.total_s,
        stream_chunks_per_rank=stream.chunks_per_rank,
        fused_s=best.fused.total_s,
        comm_s=best.comm_s,
        compute_s=best.compute_s,
        bound=bound,
        reason=_reason(best, bound, predictions, profile, sim.comm_sms),
        candidates=tuple(
            Candidate(p.chunks_per_rank, p.order, p.fused.total_s, p.stream_overlap.total_s) for p in predictions
        ),
    )


def _pick(predictions: list[Prediction], time, orders: Sequence[str]) -> Prediction:
    fastest = min(time(p) for p in predictions)
    ties = [p for p in predictions if time(p) <= fastest * (1 + TIE)]
    return min(ties, key=lambda p: (p.chunks_per_rank, list(orders).index(p.order)))


# --- why: which resource bounds the operator --------------------------------------------------


def _latency_bound(p: Prediction, profile: HardwareProfile) -> bool:
    # The fixed cost of the collective's messages outweighs the time its bytes take.
    return p.sequential.messages * profile.link.alpha_s >= 0.5 * p.comm_s


def _compute_bound(p: Prediction) -> bool:
    return p.comm_s < 0.8 * p.compute_s


def _comm_bound(p: Prediction) -> bool:
    return p.comm_s > 1.25 * p.compute_s


def _bound(p: Prediction, profile: HardwareProfile) -> str:
    if p.world == 1:
        return "no communication"
    if _compute_bound(p):
        return "compute-bound"
    if _latency_bound(p, profile):
        return "latency-bound"
    if _comm_bound(p):
        return "comm-bound"
    return "balanced"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _reason(best: Prediction, bound: str, predictions: list[Prediction], profile: HardwareProfile, comm_sms: int) -> str:
    w = best.workload
    if bound == "no communication":
        return "no communication: world is 1, so the fused kernel is the local kernel plus its wait checks"
    what = "RMSNorm" if w.kind == "rmsnorm" else "kernel"
    parts = [
        f"{bound}: the {what} takes {_ms(best.compute_s)} and the {w.pattern} {_ms(best.comm_s)} "
        f"({_plural(best.sequential.messages, 'message')} over {profile.network.link}, {profile.link.alpha_s * 1e6:.3g} us each fixed)"
    ]
    exposed = max(0.0, best.fused.total_s - best.compute_s)
    hidden = 1.0 - min(1.0, exposed / best.comm_s) if best.comm_s else 1.0
    f = best.fused
    if w.consumer:
        past = _ms(max(0.0, f.total_s - f.comm_end_s))
        edges = f"the first remote chunk is usable at {_ms(f.fill_s)}, compute runs {past} past the last chunk"
    else:
        past = _ms(max(0.0, f.total_s - f.compute_end_s))
        edges = f"the first chunk can leave at {_ms(f.fill_s)}, communication runs {past} past the last tile"
    parts.append(f"fused hides {hidden:.0%} of the communication ({edges})")
    if comm_sms:
        parts.append(f"the {best.backend} backend takes {comm_sms} of {profile.compute.sm_count} SMs from the kernel")
    parts.append(_chunk_reason(best, predictions))
    parts.append(_order_reason(best, predictions))
    if best.fused.total_s >= best.sequential.total_s:
        parts.append("overlap does not pay at this size: run it sequentially")
    return "; ".join(p for p in parts if p)  # command.format_plan puts each part on its own line


def _chunk_reason(best: Prediction, predictions: list[Prediction]) -> str:
    same = {p.chunks_per_rank: p.fused.total_s for p in predictions if p.order == best.order}
    counts = sorted(same)
    at = counts.index(best.chunks_per_rank)
    neighbours = [c for c in counts[max(0, at - 1) : at + 2] if c != best.chunks_per_rank]
    chosen = f"{_plural(best.chunks_per_rank, 'chunk')} per rank"
    if not neighbours:
        return chosen
    notes = ", ".join(f"{c}: {_delta(same[c], best.fused.total_s)}" for c in neighbours)
    if any(same[c] < best.fused.total_s - 1e-12 for c in neighbours):
        notes += f", within {TIE:.1%} so fewer chunks win"
    return f"{chosen} ({notes})"


def _order_reason(best: Prediction, predictions: list[Prediction]) -> str:
    same = {p.order: p.fused.total_s for p in predictions if p.chunks_per_rank == best.chunks_per_rank}
    others = {o: t for o, t in same.items() if o != best.order}
    if not others:
        return ""
    tied = [o for o, t in others.items() if t <= best.fused.total_s * (1 + TIE)]
    if tied:
        return f"order {best.order} (ties with {', '.join(tied)})"
    runner = min(others, key=others.get)
    return f"order {best.order} beats {runner} ({_delta(others[runner], best.fused.total_s)})"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _delta(other: float, chosen: float) -> str:
    diff = (other - chosen) * 1e3
    return "same time" if abs(diff) < 1e-9 else f"{diff:+.3g} ms"
