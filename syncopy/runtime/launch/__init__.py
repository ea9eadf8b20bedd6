"""One launch of a fused operator, as parts api.FusedKernel holds: the fused kernel, compiled once
(kernel), the call bound by name (binding), the context found or made (contexts), the tile order
(order, persistent_order); and the launch itself, one function calling them in order (sequence),
taking turns on the group (turns) and reporting what went wrong (outcome). Around it, the operator's
autotuning (tuning), first-launch compile (warmup), traces (tracing), the file a transformed kernel
loads from (loaded) and the unfused reference (reference)."""
