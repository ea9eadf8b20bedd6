import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def col_major_grid(feat, wt, res, F, H, D, sf0, sf1, sw0, sw1, sr0, sr1,
                   BF: tl.constexpr, BH: tl.constexpr, BD: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    col_tile = syncopy_pid0
    row_tile = syncopy_pid1
    fr = row_tile * BF + tl.arange(0, BF)
    hc = col_tile * BH + tl.arange(0, BH)
    acc = tl.zeros((BF, BH), dtype=tl.float32)
    # syncopy: wait for the chunks of feat this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_affine(feat + fr[:, None] * sf0 + tl.arange(0, BD)[None, :] * sf1, feat + fr[:, None] * sf0 + ((((D - 1) // BD) * BD) + tl.arange(0, BD))[None, :] * sf1, fr[:, None] < F, (tl.arange(0, BD)[None, :] - D), (((((D - 1) // BD) * BD) + tl.arange(0, BD))[None, :] - D), (D - 1) // BD, feat, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for d0 in range(0, D, BD):
        dd = d0 + tl.arange(0, BD)
        fv = tl.load(feat + fr[:, None] * sf0 + dd[None, :] * sf1, mask=(fr[:, None] < F) & (dd[None, :] < D), other=0.0)
        wv = tl.load(wt + dd[:, None] * sw0 + hc[None, :] * sw1, mask=(dd[:, None] < D) & (hc[None, :] < H), other=0.0)
        acc += tl.dot(fv, wv)
    tl.store(res + fr[:, None] * sr0 + hc[None, :] * sr1, acc, mask=(fr[:, None] < F) & (hc[None, :] < H))
