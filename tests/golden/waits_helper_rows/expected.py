import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def _block_of(P, which, M, NC: tl.constexpr, BR: tl.constexpr):
    rows = which * BR + tl.arange(0, BR)
    return tl.load(P + rows[:, None] * NC + tl.arange(0, NC)[None, :], mask=rows[:, None] < M, other=0.0)


@triton.jit
def _wrapped_block(P, which, nb, M, NC: tl.constexpr, BR: tl.constexpr):
    acc = tl.zeros([BR, NC], dtype=tl.float32)
    for i in range(2):
        rows = ((which + i) % nb) * BR + tl.arange(0, BR)
        acc += tl.load(P + rows[:, None] * NC + tl.arange(0, NC)[None, :], mask=rows[:, None] < M, other=0.0).to(tl.float32)
    return acc


@triton.jit
def two_helpers(X, out, M, NC: tl.constexpr, BR: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    pid = syncopy_pid0
    # Followed: the helper's own row arithmetic, in this kernel's names.
    # syncopy: wait for the chunks of X this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + (pid * BR + tl.arange(0, BR))[:, None] * NC + tl.arange(0, NC)[None, :], (pid * BR + tl.arange(0, BR))[:, None] < M, X, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    v = _block_of(X, pid, M, NC, BR)
    # Not bounded by any corner (wrapped rows inside the helper): every chunk.
    # syncopy: wait for every chunk of X: syncopy cannot bound the rows a helper called here reads (_wrapped_block reads rows it cannot bound before the call: the rows read are not affine in the loop counter)
    syncopy_lo, syncopy_hi = syncopy_device.all_chunks(syncopy_ctx)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    w = _wrapped_block(X, pid, tl.num_programs(0), M, NC, BR)
    rows = pid * BR + tl.arange(0, BR)
    tl.store(out + rows[:, None] * NC + tl.arange(0, NC)[None, :], v + w, mask=rows[:, None] < M)
