"""Names syncopy adds to a kernel. All start with `syncopy_`/`SYNCOPY_`; a kernel that already uses
one of them is rejected with a message rather than silently shadowed."""
CTX = "syncopy_ctx"
SIGNALS = "syncopy_signals"
ORDER = "syncopy_order"
TRACE = "syncopy_trace"
TRACE_FLAG = "SYNCOPY_TRACE"
TABLE_FLAG = "SYNCOPY_TABLE"
# Only in kernels that reach the tensor through tensor descriptors: the target has TMA's async
# proxy (sm_90+, compiled), so waits and notifies fence it (device.async_proxy_acquire / _release).
ASYNC_PROXY_FLAG = "SYNCOPY_ASYNC_PROXY"
PROBE_OUT = "syncopy_probe_out"
DEVICE = "syncopy_device"
PIDS = ("syncopy_pid0", "syncopy_pid1", "syncopy_pid2")
LO, HI = "syncopy_lo", "syncopy_hi"
TABLE_LO, TABLE_HI = "syncopy_table_lo", "syncopy_table_hi"

#: Words of one context block (syncopy.device.CTX_LEN). With several communicated tensors, the
#: context holds one block per tensor (its own row stride), so tensor i's waits read `ctx_of(i)`.
CTX_WORDS = 8


def base_of(tensor: str) -> str:
    """Where listed tensor `tensor` starts, kept before the kernel moves its pointer (`X += row * N`);
    a kernel with one communicated tensor keeps it in frontend.infer.BASE_NAME (syncopy_base)."""
    return f"syncopy_base_{tensor}"


def ctx_of(i: int) -> str:
    """The context pointer the waits for the i-th listed tensor pass (0: the main one)."""
    return CTX if i == 0 else f"({CTX} + {CTX_WORDS * i})"


#: Extra kernel parameters, in order, after the user's parameters without defaults.
EXTRA_PARAMS = (CTX, SIGNALS, ORDER, TRACE)
