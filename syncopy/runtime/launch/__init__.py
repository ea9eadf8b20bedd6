"""One launch of a fused operator, as steps: bind the arguments (binding), find or make the context
(contexts), order the tiles (order, persistent_order), take turns on the group (turns), run the
sequence (sequence) and report what went wrong (outcome); around it, the operator's autotuning
(tuning), first-launch compile (warmup), traces (tracing), the file a transformed kernel loads from
(loaded) and the unfused reference (reference)."""
