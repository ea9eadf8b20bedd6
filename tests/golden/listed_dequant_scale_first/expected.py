"""A kernel reading several communicated tensors: dequantisation whose per-row scale S is read before its data Q (tests/kernels/listed.py)."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def dequant_rows(Q, S, Y, M, N: tl.constexpr, BR: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Dequantise BR rows per program: y = q * s[row], the per-row scale `s` read before `q`."""
    syncopy_base_S = S
    syncopy_base_Q = Q
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    row0 = syncopy_pid0 * BR
    S += row0
    Q += row0 * N
    Y += row0 * N
    r = tl.arange(0, BR)
    c = tl.arange(0, N)
    rm = (row0 + r) < M
    # syncopy: wait for the chunks of S this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(S + r, rm, syncopy_base_S, (syncopy_ctx + 8), True)
    syncopy_device.wait_chunks(syncopy_signals, (syncopy_ctx + 8), syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    s = tl.load(S + r, mask=rm, other=0.0)
    # syncopy: Q waits for its own rows: no earlier wait is proven to cover them
    # syncopy: wait for the chunks of Q this program reads
    syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(Q + r[:, None] * N + c[None, :], rm[:, None], syncopy_base_Q, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    q = tl.load(Q + r[:, None] * N + c[None, :], mask=rm[:, None], other=0.0)
    tl.store(Y + r[:, None] * N + c[None, :], q * s[:, None], mask=rm[:, None])
