"""A kernel reading several communicated tensors: three listed tensors, the scale read first (tests/kernels/listed.py)."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def layernorm_scaled(X, RESIDUAL, ROWSCALE, W, Y, N, eps, BLOCK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Layer norm of x * rowscale[row] + residual: three communicated tensors, the scale read first."""
    syncopy_base_X = X
    syncopy_base_RESIDUAL = RESIDUAL
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    row = syncopy_pid0
    # syncopy: wait for the chunks of ROWSCALE this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range(ROWSCALE + row, ROWSCALE, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    s = tl.load(ROWSCALE + row)
    X += row * N
    RESIDUAL += row * N
    Y += row * N
    cols = tl.arange(0, BLOCK)
    m = cols < N
    # syncopy: X waits for its own rows: no earlier wait is proven to cover them
    # syncopy: wait for the chunks of X this program reads
    syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + cols, m, syncopy_base_X, (syncopy_ctx + 8), True)
    syncopy_device.wait_chunks(syncopy_signals, (syncopy_ctx + 8), syncopy_lo, syncopy_hi)
    # syncopy: RESIDUAL waits for its own rows: no earlier wait is proven to cover them
    # syncopy: wait for the chunks of RESIDUAL this program reads
    syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(RESIDUAL + cols, m, syncopy_base_RESIDUAL, (syncopy_ctx + 16), True)
    syncopy_device.wait_chunks(syncopy_signals, (syncopy_ctx + 16), syncopy_lo, syncopy_hi)
    h = tl.load(X + cols, mask=m, other=0.0) * s + tl.load(RESIDUAL + cols, mask=m, other=0.0)
    mean = tl.sum(h, axis=0) / N
    d = tl.where(m, h - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(W + cols, mask=m, other=0.0)
    tl.store(Y + cols, d * rstd * w, mask=m)
