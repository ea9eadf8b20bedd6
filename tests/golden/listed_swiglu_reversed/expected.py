"""A kernel reading several communicated tensors: SwiGLU forward listed as [B, A] while the kernel reads A first (tests/kernels/listed.py)."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def swiglu_fwd(A, B, Y, M, N: tl.constexpr, BR: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """SwiGLU forward, BR rows per program: y = silu(a) * b, `a` read before `b`."""
    syncopy_base_A = A
    syncopy_base_B = B
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    row0 = syncopy_pid0 * BR
    A += row0 * N
    B += row0 * N
    Y += row0 * N
    r = tl.arange(0, BR)
    c = tl.arange(0, N)
    m = (row0 + r)[:, None] < M
    # syncopy: wait for the chunks of A this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(A + r[:, None] * N + c[None, :], m, syncopy_base_A, (syncopy_ctx + 8), True)
    syncopy_device.wait_chunks(syncopy_signals, (syncopy_ctx + 8), syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    a = tl.load(A + r[:, None] * N + c[None, :], mask=m, other=0.0)
    # syncopy: B waits for its own rows: no earlier wait is proven to cover them
    # syncopy: wait for the chunks of B this program reads
    syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(B + r[:, None] * N + c[None, :], m, syncopy_base_B, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    b = tl.load(B + r[:, None] * N + c[None, :], mask=m, other=0.0)
    tl.store(Y + r[:, None] * N + c[None, :], a * tl.sigmoid(a) * b, mask=m)
