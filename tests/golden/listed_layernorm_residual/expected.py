"""A kernel reading several communicated tensors: layer norm with a residual input (tests/kernels/listed.py)."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def layernorm_residual(X, RESIDUAL, W, Y, N, eps, BLOCK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    """Layer norm of x + residual, one row per program (Triton's tutorial, with a residual input):
    three passes over the row in column blocks, `x` and the residual read in each."""
    syncopy_base_X = X
    syncopy_base_RESIDUAL = RESIDUAL
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    row = syncopy_pid0
    X += row * N
    RESIDUAL += row * N
    Y += row * N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    # syncopy: wait for the chunks of X this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_affine(X + tl.arange(0, BLOCK), X + ((((N - 1) // BLOCK) * BLOCK) + tl.arange(0, BLOCK)), True, (tl.arange(0, BLOCK) - N), (((((N - 1) // BLOCK) * BLOCK) + tl.arange(0, BLOCK)) - N), (N - 1) // BLOCK, syncopy_base_X, (syncopy_ctx + 8), True)
    syncopy_device.wait_chunks(syncopy_signals, (syncopy_ctx + 8), syncopy_lo, syncopy_hi)
    # syncopy: RESIDUAL waits for its own rows: no earlier wait is proven to cover them
    # syncopy: wait for the chunks of RESIDUAL this program reads
    syncopy_lo, syncopy_hi = syncopy_device.chunk_range_affine(RESIDUAL + tl.arange(0, BLOCK), RESIDUAL + ((((N - 1) // BLOCK) * BLOCK) + tl.arange(0, BLOCK)), True, (tl.arange(0, BLOCK) - N), (((((N - 1) // BLOCK) * BLOCK) + tl.arange(0, BLOCK)) - N), (N - 1) // BLOCK, syncopy_base_RESIDUAL, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.0)
        acc += x + tl.load(RESIDUAL + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        h = tl.load(X + cols, mask=cols < N, other=0.0) + tl.load(RESIDUAL + cols, mask=cols < N, other=0.0)
        d = tl.where(cols < N, h - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        h = tl.load(X + cols, mask=cols < N, other=0.0) + tl.load(RESIDUAL + cols, mask=cols < N, other=0.0)
        w = tl.load(W + cols, mask=cols < N, other=0.0)
        tl.store(Y + cols, (h - mean) * rstd * w, mask=cols < N)
