"""`chunks_per_rank: auto` and `order: auto`: the planner's choice for one launch.

The fused operator calls `resolve` once per (group, shard shape, dtype), at its first launch, and
lowers the schedule with the answer. Pure Python like the rest of the planner: the caller passes
shapes, dtype names and the device's name, never tensors.

The problem the planner is asked about (a generic kernel does not say what it computes):

    rows  M = world * shard.shape[dim]             the gathered tensor's size along `dim`
    width K = shard.numel() // shard.shape[dim]    elements of one communicated row
    N       = numel / M of the first other tensor argument whose size along `dim` is M (the
              output, C: M x N), else numel / K of the first with a dimension of size K (the
              weight, B: K x N or N x K), else K

and it is planned as the pattern's GEMM template (all_gather: ag_gemm, gathered A (M x K) @ B
(K x N)). That is right for the GEMMs syncopy exists for and a reasonable stand-in elsewhere (a
row-wise kernel over M x K is planned as an M x K x K GEMM: more compute per byte than it has,
which favours fewer chunks). `workload=` overrides it: a template name (`"ag_rmsnorm"`: the same
M and K, with the template's cost shape), an explicit `(M, N, K)` for the pattern's template, or
a `Workload`.

The hardware profile: `hardware=` (a name or a YAML path), else $SYNCOPY_HARDWARE, else
`cpu-gloo` for CPU tensors and, on a GPU, the profile named after the device (`profile_for_gpu`).
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from syncopy.planner.hardware import HardwareProfile, load_profile, profile_names
from syncopy.planner.optimize import CHUNK_CHOICES, Plan, choose_for
from syncopy.planner.simulate import ORDERS
from syncopy.planner.workloads import PATTERN_TEMPLATE, TEMPLATES, Workload, make_workload

AUTO = "auto"
#: The environment variable naming the hardware profile when `hardware=` is not given.
HARDWARE_ENV = "SYNCOPY_HARDWARE"

# GPU name fragments (torch.cuda.get_device_name) and the shipped profile for each, most specific first.
_GPU_PROFILES = (
    ("H200", "h200-nvlink"),
    ("H100 PCIe", "h100-pcie"),
    ("H100", "h100-nvlink"),
    ("A100", "a100-nvlink"),
)

# torch dtype names (str(torch.float16) without "torch.") -> the planner's dtypes. Everything else
# is planned as fp32: 4-byte elements and the fp32 rate, the closest the profiles describe.
_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class Resolution:
    """What the planner chose for one launch shape, and why."""

    chunks_per_rank: int
    order: str | list[int]
    hardware: str  # the profile's name (a link emulation is noted in `reason`)
    template: str
    shape: tuple[int, int, int]  # (M, N, K) as planned
    dtype: str
    world: int
    fused_s: float  # predicted times, seconds
    sequential_s: float
    reason: str

    def describe(self) -> str:
        """One line for traces and logs."""
        m, n, k = self.shape
        return (f"planner ({self.hardware}, {self.template} M,N,K={m},{n},{k} {self.dtype}, world {self.world}): "
                f"chunks_per_rank {self.chunks_per_rank}, order {self.order}; predicted fused "
                f"{self.fused_s * 1e3:.3g} ms vs sequential {self.sequential_s * 1e3:.3g} ms")


def profile_for_gpu(device_name: str) -> str:
    """The shipped profile for a GPU named `device_name` (as torch.cuda.get_device_name gives it)."""
    for fragment, profile in _GPU_PROFILES:
        if fragment.lower() in device_name.lower():
            return profile
    raise ValueError(
        f"no hardware profile matches GPU '{device_name}'; pass hardware= to syncopy.overlap or set "
        f"{HARDWARE_ENV} to a profile name ({', '.join(profile_names())}) or a YAML file"
    )


def hardware_name(explicit: str | None, device_type: str, device_name: str | None = None,
                   env: Mapping[str, str] | None = None) -> str:
    """The profile to plan with: `explicit`, else $SYNCOPY_HARDWARE, else one for the device."""
    env = os.environ if env is None else env
    if explicit:
        return explicit
    if env.get(HARDWARE_ENV):
        return env[HARDWARE_ENV]
    if device_type == "cpu":
        return "cpu-gloo"
    if device_type == "cuda" and device_name:
        return profile_for_gpu(device_name)
    raise ValueError(f"no hardware profile for device type '{device_type}'; pass hardware= or set {HARDWARE_ENV}")


def planner_dtype(torch_dtype: str) -> str:
    """The planner's dtype for a torch dtype name ('torch.float16' or 'float16')."""
    return _DTYPES.get(str(torch_dtype).removeprefix("torch."), "fp32")


def problem_shape(shard_shape: Sequence[int], dim: int, world: int, others: Sequence[Sequence[int]]) -> tuple[int, int, int]:
    """(M, N, K) of the GEMM the planner stands a launch in for (the module docstring's rule).

    `others`: the shapes of the launch's other tensor arguments, in signature order.
    """
    rows = int(shard_shape[dim])
    m = world * rows
    k = max(1, math.prod(int(s) for i, s in enumerate(shard_shape) if i != dim))
    shapes = [tuple(int(s) for s in shape) for shape in others if math.prod(shape) > 0]
    # The output first, and only by the dimension the rows run along: any dimension of the weight
    # may equal M by coincidence (a square B, N == M).
    for shape in shapes:
        if len(shape) > dim and shape[dim] == m:
            return m, max(1, math.prod(shape) // m), k
    for shape in shapes:
        if k in shape:
            return m, max(1, math.prod(shape) // k), k
    return m, k, k


def _workload(pattern: str, workload, shape: tuple[int, int, int], dtype: str) -> Workload:
    if isinstance(workload, Workload):
        return workload
    if workload is None:
        return make_workload(pattern, *shape, dtype=dtype)
    if isinstance(workload, str):
        name = PATTERN_TEMPLATE.get(workload, workload)
        if name in TEMPLATES and TEMPLATES[name].pattern != pattern:
            raise ValueError(f"workload '{workload}' is a {TEMPLATES[name].pattern} template but the schedule's pattern is "
                             f"{pattern}; name a template for {pattern}")
        m, n, k = shape
        if name in TEMPLATES and TEMPLATES[name].comm_width == "N":  # the communicated row is N wide (RMSNorm)
            return make_workload(name, m, k, 1, dtype=dtype)
        return make_workload(name, m, n, k, dtype=dtype)
    if isinstance(workload, Sequence) and len(workload) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in workload):
        return make_workload(pattern, *workload, dtype=dtype)
    raise ValueError(f"workload={workload!r} is not a template name, an (M, N, K) tuple or a Workload; give one of those")


def resolve(
    pattern: str,
    chunks_per_rank: int | str,
    order: str | list[int],
    *,
    world: int,
    shard_shape: Sequence[int],
    dim: int,
    dtype: str,
    others: Sequence[Sequence[int]] = (),
    hardware: str | HardwareProfile = "cpu-gloo",
    workload=None,
    link=None,
) -> Resolution:
    """The chunk count and order for one launch: the planner's choice wherever the schedule says auto.

    A concrete `chunks_per_rank` or `order` is kept and only the other one is chosen. Chunk counts
    never exceed the shard's rows along `dim`. An explicit list order is simulated as
    `local_first` (direct sends from every peer, which is what an explicit order is, in another
    peer order) and kept as given. `link`: the CPU backend's emulated link (anything with
    latency_s, bandwidth_Bps, jitter_s), seen by the planner on top of the profile's own link.
    Deterministic: the same arguments give the same answer on every rank.

    Raises ValueError, saying what to change, when the launch cannot be planned.
    """
    rows = int(shard_shape[dim])
    shape = problem_shape(shard_shape, dim, world, others)
    work = _workload(pattern, workload, shape, planner_dtype(dtype))
    profile = load_profile(hardware)
    if link is not None:
        profile = profile.with_emulated_link(link.latency_s, link.bandwidth_Bps, link.jitter_s)
    chunk_choices = [c for c in CHUNK_CHOICES if c <= rows] if chunks_per_rank == AUTO else [int(chunks_per_rank)]
    if order == AUTO:
        orders = ORDERS
    elif isinstance(order, str):
        orders = (order,)
    else:
        orders = ("local_first",)
    plan: Plan = choose_for(work, profile, world, chunk_choices=chunk_choices or [1], orders=orders)
    # What the schedule fixed stays fixed, whatever the planner made of it.
    chosen_chunks = plan.chunks_per_rank if chunks_per_rank == AUTO else int(chunks_per_rank)
    chosen_order = plan.order if order == AUTO else order
    name = profile.name + (" + emulated link" if link is not None else "")
    return Resolution(
        chunks_per_rank=chosen_chunks,
        order=chosen_order,
        hardware=name,
        template=work.template,
        shape=(work.m, work.n, work.k),
        dtype=work.dtype,
        world=world,
        fused_s=plan.fused_s,
        sequential_s=plan.sequential_s,
        reason=plan.reason,
    )
