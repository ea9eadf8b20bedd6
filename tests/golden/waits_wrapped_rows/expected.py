import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def ring_rows(X, out, M, NC: tl.constexpr, BR: tl.constexpr, NB: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Case 4: every program reads all NB row blocks in wrapped order, starting at its own:
    out block p = sum_i X block (p + i) % NB / 2**(NB - 1 - i)."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    acc = tl.zeros([BR, NC], dtype=tl.float32)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for i in range(NB):
        r = (pid + i) % NB
        rows = r * BR + tl.arange(0, BR)
        # syncopy: no bound before the loop (the rows read are not affine in the loop counter): wait before each read, from its own pointers
        # syncopy: wait for the chunks of X this read needs
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], rows[:, None] < M, X, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        acc = acc * 0.5 + v.to(tl.float32)
    tl.store(out + (pid * BR + tl.arange(0, BR))[:, None] * NC + c[None, :], acc)
