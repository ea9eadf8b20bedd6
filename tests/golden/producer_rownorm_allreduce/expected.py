import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def layer_norm_rows(Inp, Gamma, Out, row_stride, ncols, eps, BLK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    syncopy_base = Out
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    line = syncopy_pid0
    Inp += line * row_stride
    Out += line * row_stride
    total = tl.zeros([BLK], dtype=tl.float32)
    for base in range(0, ncols, BLK):
        idx = base + tl.arange(0, BLK)
        total += tl.load(Inp + idx, mask=idx < ncols, other=0.0).to(tl.float32)
    mean = tl.sum(total, axis=0) / ncols
    sq = tl.zeros([BLK], dtype=tl.float32)
    for base in range(0, ncols, BLK):
        idx = base + tl.arange(0, BLK)
        x = tl.load(Inp + idx, mask=idx < ncols, other=0.0).to(tl.float32)
        sq += tl.where(idx < ncols, (x - mean) * (x - mean), 0.0)
    inv = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / ncols + eps)
    # syncopy: the chunks of Out this program writes
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_affine(Out + tl.arange(0, BLK), Out + ((((ncols - 1) // BLK) * BLK) + tl.arange(0, BLK)), True, (tl.arange(0, BLK) - ncols), (((((ncols - 1) // BLK) * BLK) + tl.arange(0, BLK)) - ncols), (ncols - 1) // BLK, syncopy_base, syncopy_ctx, True)
    for base in range(0, ncols, BLK):
        idx = base + tl.arange(0, BLK)
        x = tl.load(Inp + idx, mask=idx < ncols, other=0.0).to(tl.float32)
        g = tl.load(Gamma + idx, mask=idx < ncols, other=0.0)
        tl.store(Out + idx, (x - mean) * inv * g, mask=idx < ncols)
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
