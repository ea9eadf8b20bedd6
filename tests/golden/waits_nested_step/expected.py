import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def nested_steps(X, out, NC: tl.constexpr, OUTER: tl.constexpr, INNER: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Case 3: a pointer stepped inside an inner loop: out[p] = sum of rows p*OUTER*INNER ... + OUTER*INNER - 1."""
    pid = tl.program_id(0)
    p = X + pid * (OUTER * INNER) * NC
    c = tl.arange(0, NC)
    acc = tl.zeros([NC], dtype=tl.float32)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for o in range(OUTER):
        for i in range(INNER):
            # syncopy: no bound before the loop (p changes inside the loop in a way inference cannot follow): wait before each read, from its own pointers
            # syncopy: wait for the chunks of X this read needs
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range(p + c, X, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            acc += tl.load(p + c).to(tl.float32)
            p += NC
    tl.store(out + pid * NC + c, acc)
