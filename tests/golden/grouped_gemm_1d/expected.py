"""Tutorial-style matmul: one program axis, tiles grouped along M for L2 reuse."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def swizzled_mm(left, right, dst, n_rows, n_cols, depth,
                l_r, l_c, r_r, r_c, d_r, d_c,
                BR: tl.constexpr, BC: tl.constexpr, BD: tl.constexpr, SWZ: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    me = syncopy_pid0
    nr = tl.cdiv(n_rows, BR)
    nc = tl.cdiv(n_cols, BC)
    band = SWZ * nc
    which = me // band
    top = which * SWZ
    height = min(nr - top, SWZ)
    br = top + ((me % band) % height)
    bc = (me % band) // height
    ir = (br * BR + tl.arange(0, BR)) % n_rows
    ic = (bc * BC + tl.arange(0, BC)) % n_cols
    idep = tl.arange(0, BD)
    lptr = left + (ir[:, None] * l_r + idep[None, :] * l_c)
    rptr = right + (idep[:, None] * r_r + ic[None, :] * r_c)
    total = tl.zeros((BR, BC), dtype=tl.float32)
    # syncopy: wait for the chunks of left this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_affine(lptr, (lptr + ((tl.cdiv(depth, BD) - 1) * (BD * l_c))), True, (idep[None, :] - depth), (idep[None, :] - (depth - (tl.cdiv(depth, BD) - 1) * BD)), tl.cdiv(depth, BD) - 1, left, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for step in range(0, tl.cdiv(depth, BD)):
        lv = tl.load(lptr, mask=idep[None, :] < depth - step * BD, other=0.0)
        rv = tl.load(rptr, mask=idep[:, None] < depth - step * BD, other=0.0)
        total = tl.dot(lv, rv, total)
        lptr += BD * l_c
        rptr += BD * r_r
    outr = br * BR + tl.arange(0, BR)
    outc = bc * BC + tl.arange(0, BC)
    tl.store(dst + outr[:, None] * d_r + outc[None, :] * d_c, total.to(dst.dtype.element_ty),
             mask=(outr[:, None] < n_rows) & (outc[None, :] < n_cols))
