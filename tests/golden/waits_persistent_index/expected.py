import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def persistent_blocks(X, blocks, out, n_tiles, M, NC: tl.constexpr, BR: tl.constexpr, NP: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Case 7, persistent: tile t copies row block blocks[t]: out block t = X block blocks[t]."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    for t in range(pid, n_tiles, NP):
        b = tl.load(blocks + t)
        rows = b * BR + tl.arange(0, BR)
        # syncopy: tiles keep their order: the rows of its first read depend on loaded data, which changes from launch to launch
        # syncopy: wait for the chunks of X this program reads
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], rows[:, None] < M, X, syncopy_ctx, True)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        tl.store(out + (t * BR + tl.arange(0, BR))[:, None] * NC + c[None, :], v)
