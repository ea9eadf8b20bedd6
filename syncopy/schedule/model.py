"""The chunk schedule (version 1): what moves, in which pieces, in what order.

    version: 1
    pattern: all_gather        # all_gather | reduce_scatter | all_reduce | all_to_all
    kernel: mm2d               # the @triton.jit function to transform
    tensor: A                  # the kernel argument that is communicated
    dim: 0                     # the sharded dimension of that tensor
    chunks_per_rank: 3         # granularity
    order: ring                # ring | local_first | bidirectional_ring | [explicit list of peer offsets]

`binding` is optional and overrides inference where it cannot see how programs map to rows.
"""
from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

Pattern = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]
NamedOrder = Literal["ring", "local_first", "bidirectional_ring"]

#: Patterns the runtime can execute today; the others validate but are rejected at transform time.
IMPLEMENTED_PATTERNS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
#: Patterns whose kernel produces the communicated tensor (it announces chunks; the runtime reduces).
PRODUCER_PATTERNS = ("reduce_scatter", "all_reduce")


class Binding(BaseModel):
    """Explicit binding of programs to the communicated tensor, for kernels inference cannot read.

    `rows` is a Triton expression, written in the kernel's own names, that evaluates (at the point
    given by `before_line`, or before the first read of the tensor) to the indices along `dim` that a
    program reads, e.g. ``pid_m * BLOCK_M + tl.arange(0, BLOCK_M)``.
    """

    model_config = ConfigDict(extra="forbid")

    rows: str = Field(min_length=1)
    before_line: int | None = Field(default=None, ge=1)


class Schedule(BaseModel):
    """A version-1 chunk schedule. Load one with `syncopy.load_schedule` or build it in Python."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    pattern: Pattern
    kernel: str | None = Field(default=None, min_length=1)
    tensor: str = Field(min_length=1)
    dim: StrictInt = Field(default=0, ge=0)
    chunks_per_rank: StrictInt = Field(default=1, ge=1)
    order: Union[NamedOrder, list[int]] = "ring"
    binding: Binding | None = None

    @field_validator("order")
    @classmethod
    def _order_is_permutation(cls, order):
        # An explicit order lists peer offsets (1 = the previous rank in the ring, 2 = the one
        # before ...), one per peer, each exactly once; the world size is checked at launch.
        if isinstance(order, list):
            if sorted(order) != list(range(1, len(order) + 1)):
                raise ValueError(
                    f"explicit order {order} is not a permutation of the peer offsets 1..{len(order)}; "
                    "list every peer offset exactly once"
                )
        return order

    def key(self) -> str:
        """A stable text form, used in cache keys."""
        return self.model_dump_json()
