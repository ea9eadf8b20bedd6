"""The chunk schedule (version 1): what moves, in which pieces, in what order.

    version: 1
    pattern: all_gather        # all_gather | reduce_scatter | all_reduce | all_to_all
    kernel: mm2d               # the @triton.jit function to transform
    tensor: A                  # the kernel argument that is communicated
    dim: 0                     # the sharded dimension of that tensor
    chunks_per_rank: 3         # granularity, or auto
    order: ring                # ring | local_first | bidirectional_ring | auto | [peer offsets] | explicit

`chunks_per_rank: auto` and `order: auto` are chosen by the planner (syncopy.planner) at the first
launch for each shard shape: the rewritten kernel does not depend on either, it reads the chunk
count from the runtime's context. `binding` is optional and overrides inference where it cannot
see how programs map to rows.

The full form (see `syncopy.schedule.explicit`) adds `units_per_rank` + `chunks` (explicit slices of
every shard) and `order: explicit` + `world` + `transfers` (every transfer written out), so that a
plan from another system is written down verbatim.
"""
from __future__ import annotations

import ast
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from syncopy.schedule.patterns import AUTO, IMPLEMENTED_PATTERNS, PRODUCER_PATTERNS  # noqa: F401 (IMPLEMENTED_PATTERNS: re-exported)

Pattern = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]
NamedOrder = Literal["ring", "local_first", "bidirectional_ring"]
ReduceOp = Literal["sum", "prod", "max", "min", "avg"]

Auto = Literal["auto"]


class Binding(BaseModel):
    """Explicit binding of programs to the communicated tensor, for kernels inference cannot read.

    `rows` is a Triton expression, written in the kernel's own names, that evaluates (at the point
    given by `before_line`, or before the first read of the tensor) to the indices along `dim` that a
    program reads, e.g. ``pid_m * BLOCK_M + tl.arange(0, BLOCK_M)``. `before_line` is a line of the
    kernel's file that starts a statement directly in the kernel's body, at or before the one holding
    the first read: the wait goes right before it (not for persistent kernels or producer patterns).
    """

    model_config = ConfigDict(extra="forbid")

    rows: str = Field(min_length=1, description="an expression in the kernel's names giving the indices along `dim` that one "
                      "program reads, e.g. `pid_m * BLOCK_M + tl.arange(0, BLOCK_M)`; it may use the kernel's parameters "
                      "and the names it assigns before the wait (checked at transform)")
    before_line: int | None = Field(default=None, ge=1, description="a line of the kernel's file starting a statement directly "
                                    "in the kernel's body, at or before the one holding the first read: the wait goes before "
                                    "it (not for persistent kernels or `reduce_scatter` / `all_reduce`)")

    @field_validator("rows")
    @classmethod
    def _rows_is_one_expression(cls, rows: str) -> str:
        # The text is pasted into the kernel as a call argument, so it must be one value on its own
        # and inside parentheses (a trailing comment or an unbalanced bracket would swallow the rest).
        example = "e.g. pid_m * BLOCK_M + tl.arange(0, BLOCK_M)"
        for text in (rows, f"({rows})"):
            try:
                tree = ast.parse(text.strip(), mode="eval")
            except SyntaxError as exc:
                raise ValueError(f"{rows!r} is not a Python expression ({exc.msg}); write one expression in the "
                                 f"kernel's names, {example}") from None
        if isinstance(tree.body, (ast.Tuple, ast.Starred, ast.NamedExpr, ast.Lambda, ast.Yield, ast.YieldFrom, ast.Await)):
            raise ValueError(f"{rows!r} is not one value (a {type(tree.body).__name__.lower()}); write one expression "
                             f"for the row indices along `dim`, {example}")
        return rows


class Transfer(BaseModel):
    """One transfer of the full form: chunk `chunk` = [block, index] moves from rank `from` to rank `to`.

    Block b is the b-th of `world` equal blocks of the communicated tensor along `dim` (for
    all_gather: rank b's shard; all_to_all: what rank b sends; reduce patterns: rank b's part of
    the output), index i its i-th chunk. `into` names the landing region when it differs from the
    source region (all_to_all only); `reduce: sum` adds into the destination instead of
    overwriting (reduce_scatter, all_reduce); `signal: false` is refused by every pattern lowered
    today. `step` orders arrivals and sends (default: one after the latest transfer it waits for);
    `after` names transfers, by `id` or by list index, that must have landed on this transfer's
    sending rank first (not for reduce patterns). `mode` says who drives the copy (push: the
    sender, pull: the receiver); the gloo backend moves both the same way. What each pattern
    accepts and means: `syncopy.schedule.explicit`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    id: str | None = Field(default=None, min_length=1, description="a name other transfers' `after` may use")
    chunk: tuple[StrictInt, StrictInt] = Field(description="[block, index]: the index-th chunk of block `block` (all_gather: "
                                               "rank block's shard; all_to_all: what rank block sends; reduce patterns: "
                                               "rank block's part of the output)")
    src: StrictInt = Field(alias="from", ge=0, description="the sending rank")
    dst: StrictInt = Field(alias="to", ge=0, description="the receiving rank")
    step: StrictInt | None = Field(default=None, ge=0, description="orders arrivals and sends; default: one after the latest "
                                   "transfer it waits for")
    after: tuple[Union[StrictInt, str], ...] = Field(default=(), description="transfers (ids or list indices) that must have "
                                                     "landed on this transfer's sending rank first (not for reduce patterns)")
    mode: Literal["push", "pull"] = Field(default="push", description="who drives the copy: the sender (push) or the receiver "
                                          "(pull); gloo moves both the same way")
    into: tuple[StrictInt, StrictInt] | None = Field(default=None, description="the landing region [block, index] when it "
                                                     "differs from the source region (all_to_all only)")
    reduce: ReduceOp | None = Field(default=None, description="`sum` adds into the destination instead of overwriting "
                                    "(reduce_scatter, all_reduce; the only op lowered)")
    signal: StrictBool = Field(default=True, description="`false` is refused by every pattern lowered today")


class Schedule(BaseModel):
    """A version-1 chunk schedule. Load one with `syncopy.load_schedule` or build it in Python."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = Field(default=1, description="the schedule format's version")
    pattern: Pattern = Field(description="`all_gather`, `all_to_all` (the kernel reads `tensor`), `reduce_scatter`, "
                             "`all_reduce` (it writes `tensor`)")
    kernel: str | None = Field(default=None, min_length=1, description="the `@triton.jit` function to transform (required by "
                               "the CLI, checked by the decorator)")
    tensor: Union[Annotated[str, Field(min_length=1)], Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]] = Field(
        description="the kernel argument that is communicated, or a list of them (`[K, V]`, all_gather only): every listed "
        "tensor is sharded along the same `dim` with the same rows per rank (any dtypes and trailing shapes), and a chunk's "
        "flag rises once its rows of every listed tensor have landed")
    dim: StrictInt = Field(default=0, ge=0, description="its sharded dimension")
    chunks_per_rank: Union[Annotated[StrictInt, Field(ge=1)], Auto] = Field(
        default=1, description="each shard is cut into this many chunks (boundaries `floor(i*S/C)`: never empty, ragged is "
        "fine), or `auto`: the planner chooses at the first launch (`hardware=` / `$SYNCOPY_HARDWARE` pick the profile)"
    )
    order: Union[NamedOrder, Auto, Literal["explicit"], list[int]] = Field(
        default="ring", description="`ring`, `local_first` (direct sends, nearest peer first), `bidirectional_ring`, a list "
        "of peer offsets `[1, 3, 2]`, `explicit` (the full form, with `world` and `transfers`), or `auto` (the planner chooses)"
    )
    binding: Binding | None = Field(default=None, description="for kernels inference cannot follow: which rows a program "
                                    "reads (`rows`) and where its wait goes (`before_line`)")
    loop_order: Literal["arrival", "as_written"] | None = Field(
        default=None, description="how a loop whose iterations read other rows of `tensor` along `dim` runs (attention's "
        "key/value loop, FA2's `k_ptrs + start_n * stride_kn`, a GEMM reducing along `dim`, a scan stepping its pointer by a "
        "stride: docs/how-it-works.md, \"Loops in arrival order\"): each iteration waits for its own chunks; `arrival` runs "
        "the iterations in "
        "chunk-arrival order, this rank's rows first (refused where that order is not proven not to change the result: "
        "docs/how-it-works.md, \"Loops in arrival order\"), `as_written` keeps their order; unset: `arrival` where the "
        "loop is proven to run in any order, else `as_written`. "
        "Set, it also moves the waits into every loop whose pointer changes with it (a step written in constexprs, "
        "`p += H * K`)")
    units_per_rank: StrictInt | None = Field(default=None, ge=1, description="full form: each shard is cut into this many "
                                             "equal units, which `chunks` slices")
    chunks: list[tuple[StrictInt, StrictInt]] | None = Field(default=None, description="full form: chunk i's units "
                                                             "`[lo, hi)`, in any order; the slices must tile the units exactly "
                                                             "(no overlap, no gap)")
    world: StrictInt | None = Field(default=None, ge=1, description="the world the schedule is written for (required with "
                                     "`order: explicit`; with a named order the launch checks it against the group)")
    transfers: list[Transfer] | None = Field(default=None, description="full form: every transfer written out for `world` "
                                             "ranks (see below)")

    @model_validator(mode="before")
    @classmethod
    def _full_form_defaults(cls, data: Any):
        # Listing the slices gives the chunk count; listing the transfers gives the order.
        if isinstance(data, dict):
            if isinstance(data.get("chunks"), list) and data["chunks"] and "chunks_per_rank" not in data:
                data = {**data, "chunks_per_rank": len(data["chunks"])}
            if data.get("transfers") is not None and "order" not in data:
                data = {**data, "order": "explicit"}
        return data

    @field_validator("chunks_per_rank", mode="before")
    @classmethod
    def _chunk_count_or_auto(cls, value):
        # One sentence for every wrong value (0, -2, 2.5, "many", true), instead of pydantic's
        # separate complaints about each branch of the union.
        if value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError(f"must be a positive integer or auto (got {value!r})")

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

    @field_validator("tensor")
    @classmethod
    def _tensor_list_is_distinct(cls, tensor):
        if isinstance(tensor, list):
            twice = sorted({t for t in tensor if tensor.count(t) > 1})
            if twice:
                raise ValueError(f"lists '{twice[0]}' twice; name each communicated argument once")
        return tensor

    @model_validator(mode="after")
    def _lists_only_for_all_gather(self):
        if isinstance(self.tensor, list) and len(self.tensor) > 1 and self.pattern != "all_gather":
            from syncopy.schedule.explicit import PlanError

            raise PlanError(("tensor",), f"a list of tensors ({', '.join(self.tensor)}) is supported for pattern all_gather "
                            f"only, not {self.pattern}; name one tensor")
        if self.loop_order is not None and self.pattern in PRODUCER_PATTERNS:
            from syncopy.schedule.explicit import PlanError

            raise PlanError(("loop_order",), f"applies to the patterns whose kernel reads `tensor` (all_gather, all_to_all), "
                            f"not {self.pattern}; drop loop_order")
        return self

    @property
    def tensors(self) -> tuple[str, ...]:
        """Every communicated argument: `tensor`, or the names it lists (the first is the main one)."""
        return tuple(self.tensor) if isinstance(self.tensor, list) else (self.tensor,)

    @property
    def named(self) -> str:
        """The communicated argument(s) as an error names them: `'A'`, or `'K' and 'V'` for a list."""
        return " and ".join(f"'{t}'" for t in self.tensors)

    @model_validator(mode="after")
    def _full_form_is_consistent(self):
        # Raises ScheduleError with the key path (not ValueError: pydantic would drop the path).
        from syncopy.schedule.explicit import validate

        validate(self)
        return self

    @property
    def planned(self) -> bool:
        """True when the planner chooses `chunks_per_rank` or `order` at launch."""
        return self.chunks_per_rank == AUTO or self.order == AUTO

    def key(self) -> str:
        """A stable text form, used in cache keys."""
        return self.model_dump_json()
