"""Templates as cost shapes: what each one communicates and what its kernel computes.

`--shape M,N,K` means, per template (world W, element size b):

    template    pattern         communicated (rows x width)      kernel per rank
    ag_gemm     all_gather      A: M x K, M/W rows per rank      gathered A (M x K) @ B (K x N)
    ag_gemm_persistent          (as ag_gemm; one program per SM loops over the tiles)
    gemm_rs     reduce_scatter  C: M x N partials, M/W rows out  A (M x K) @ B (K x N), K the local slice
    gemm_ar     all_reduce      C: M x N partials                A (M x K) @ B (K x N), K the local slice
    a2a_gemm    all_to_all      tokens: M x K per rank, M/W each  grouped GEMM of the M received tokens
                                way (uniform routing)            (M x K) @ W_expert (K x N)
    ag_rmsnorm  all_gather      X: M x N, M/W rows per rank      RMSNorm of the gathered M x N (K unused)
    ag_attention all_gather     K and V: M x K each, M/W rows    attention of N local queries over the M
                                per rank (K = heads x head dim)  gathered keys and values (causal: about half)

M is always the number of rows one rank's kernel computes; for a2a_gemm that is the tokens a rank
holds (top-k copies included) and, with uniform routing, also the tokens it receives.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from syncopy.planner.hardware import DTYPE_BYTES

Pattern = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]
Kind = Literal["gemm", "rmsnorm", "attention"]

#: The largest operand the planner models (256 TiB): far beyond any machine's memory, and well
#: within the exact integers of a float, so the seconds it predicts still mean something.
MAX_OPERAND_BYTES = 2**48

#: Patterns whose kernel consumes the communicated chunks (tiles wait); the others produce them.
CONSUMER_PATTERNS = ("all_gather", "all_to_all")


@dataclass(frozen=True)
class Template:
    """One row of the template table."""

    name: str
    pattern: Pattern
    kind: Kind
    summary: str
    comm_width: Literal["K", "N"]  # the communicated tensor's row width


TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template("ag_gemm", "all_gather", "gemm", "all_gather of A rows, then A @ B", "K"),
        Template("ag_gemm_persistent", "all_gather", "gemm", "all_gather of A rows, then a persistent A @ B", "K"),
        Template("gemm_rs", "reduce_scatter", "gemm", "A @ B, then reduce_scatter of the output rows", "N"),
        Template("gemm_ar", "all_reduce", "gemm", "A @ B, then all_reduce of the output", "N"),
        Template("a2a_gemm", "all_to_all", "gemm", "all_to_all of tokens, then grouped GEMM (MoE)", "K"),
        Template("ag_rmsnorm", "all_gather", "rmsnorm", "all_gather of rows, then RMSNorm (memory bound)", "N"),
        # Its work follows the key rows: a block of keys is attended to by every local query as it
        # lands (the kernel's key/value loop waits per iteration), so "rows" below are key rows.
        Template("ag_attention", "all_gather", "attention", "all_gather of K and V along the sequence, then flash "
                 "attention (context parallelism)", "K"),
    )
}

#: The GEMM template that stands for each schedule pattern when the planner is asked by pattern.
PATTERN_TEMPLATE = {"all_gather": "ag_gemm", "reduce_scatter": "gemm_rs", "all_reduce": "gemm_ar", "all_to_all": "a2a_gemm"}


@dataclass(frozen=True)
class Workload:
    """One fused operator to plan: a template at a shape and dtype."""

    template: str
    pattern: Pattern
    kind: Kind
    m: int
    n: int
    k: int
    dtype: str

    @property
    def consumer(self) -> bool:
        """True when tiles wait for chunks (all_gather, all_to_all); False when they produce them."""
        return self.pattern in CONSUMER_PATTERNS

    @property
    def elem_bytes(self) -> int:
        """Bytes per element of `dtype`."""
        return DTYPE_BYTES[self.dtype]

    @property
    def comm_row_bytes(self) -> int:
        """Bytes of one row of the communicated tensor."""
        width = self.k if TEMPLATES[self.template].comm_width == "K" else self.n
        return width * self.elem_bytes * (2 if self.kind == "attention" else 1)  # attention: a row of K and one of V

    def col_tiles(self, tile_n: int) -> int:
        """Tiles across the output's columns (an RMSNorm program owns whole rows)."""
        return math.ceil(self.n / tile_n) if self.kind == "gemm" else 1

    def tile_flops(self, tile_m: int, tile_n: int) -> float:
        """FLOPs of one tile."""
        if self.kind == "gemm":
            return 2.0 * tile_m * tile_n * self.k
        if self.kind == "attention":
            return 4.0 * tile_m * self.n * self.k  # Q K^T and P V for tile_m keys against the N queries
        return 4.0 * tile_m * self.n  # square, sum, scale by rsqrt, multiply by the weight

    def kernel_bytes(self, rows: int | None = None) -> float:
        """Bytes a kernel over `rows` rows (default M) moves through memory, each operand once.

        L2 serves the reuse between tiles. The weight is read whole by every kernel, so a GEMM cut
        into per-chunk kernels reads it once per chunk.
        """
        rows = self.m if rows is None else rows
        b = self.elem_bytes
        if self.kind == "gemm":
            return float((rows * self.k + self.k * self.n + rows * self.n) * b)
        if self.kind == "attention":
            return float((2 * rows * self.k + 2 * self.n * self.k) * b)  # K, V rows; Q and the output once
        return float((2 * rows * self.n + self.n) * b)


def parse_shape(text: str, template: str = "ag_gemm") -> tuple[int, int, int]:
    """`"M,N,K"` as three positive ints (ag_rmsnorm also takes `"M,N"`)."""
    parts = [p.strip() for p in str(text).split(",")]
    wanted = "M,N or M,N,K" if template == "ag_rmsnorm" else "M,N,K"
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if template == "ag_rmsnorm" and len(values) == 2:
        values.append(1)
    if len(values) != 3 or min(values) <= 0:
        raise ValueError(f"shape '{text}' is not {wanted} as positive integers; write it like --shape 8192,4096,4096")
    return values[0], values[1], values[2]


def make_workload(name: str, m: int, n: int, k: int, dtype: str = "bf16") -> Workload:
    """A workload from a template name (or a schedule pattern, read as its GEMM template)."""
    name = PATTERN_TEMPLATE.get(name, name)
    if name not in TEMPLATES:
        raise ValueError(f"unknown template '{name}'; use one of {', '.join(TEMPLATES)} (or a pattern: {', '.join(PATTERN_TEMPLATE)})")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype '{dtype}'; use one of {', '.join(DTYPE_BYTES)}")
    if min(m, n, k) <= 0:
        raise ValueError(f"shape {m},{n},{k} has a dimension <= 0; give positive M,N,K")
    t = TEMPLATES[name]
    _check_size(t, int(m), int(n), int(k), DTYPE_BYTES[dtype])
    return Workload(t.name, t.pattern, t.kind, int(m), int(n), int(k), dtype)


def _check_size(t: Template, m: int, n: int, k: int, elem_bytes: int) -> None:
    """Refuse a shape whose operands could not exist (the planner's cost does not grow with the
    shape, see simulate._row_tiles; an absurd one is a typo, answered at once)."""
    operands = {"A (M x K)": m * k, "B (K x N)": k * n, "C (M x N)": m * n} if t.kind == "gemm" else {"X (M x N)": m * n}
    for what, elements in operands.items():
        if elements * elem_bytes > MAX_OPERAND_BYTES:
            raise ValueError(f"shape {m},{n},{k}: {what} would hold {elements * elem_bytes:.3g} bytes, more than the planner's "
                             f"limit of {MAX_OPERAND_BYTES:.3g} (256 TiB); check the shape (M is the rows one rank's kernel computes)")
