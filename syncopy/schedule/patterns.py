"""The names a schedule's patterns and planned keys are told by, below the model and its validation."""

#: The value of `chunks_per_rank` and `order` that asks the planner to choose at launch.
AUTO = "auto"

#: Patterns the runtime can execute today; the others validate but are rejected at transform time.
IMPLEMENTED_PATTERNS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
#: Patterns whose kernel produces the communicated tensor (it announces chunks; the runtime reduces).
PRODUCER_PATTERNS = ("reduce_scatter", "all_reduce")
