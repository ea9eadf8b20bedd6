import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def tiled_product(P, Q, R, m_size, n_size, k_size, p0, p1, q0, q1, r0, r1,
                  TILE_A: tl.constexpr, TILE_B: tl.constexpr, TILE_K: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    ta = syncopy_pid0
    tb = syncopy_pid1
    ia = ta * TILE_A + tl.arange(0, TILE_A)
    ib = tb * TILE_B + tl.arange(0, TILE_B)
    out = tl.zeros((TILE_A, TILE_B), dtype=tl.float32)
    # syncopy: wait for the chunks of P this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range(P + ia[:, None] * p0 + tl.arange(0, TILE_K)[None, :] * p1, P, syncopy_ctx, True)
        syncopy_lo_1, syncopy_hi_1 = syncopy_device.chunk_range(P + ia[:, None] * p0 + ((((k_size - 1) // TILE_K) * TILE_K) + tl.arange(0, TILE_K))[None, :] * p1, P, syncopy_ctx, True)
        syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_1, syncopy_hi_1)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    for k0 in range(0, k_size, TILE_K):
        ik = k0 + tl.arange(0, TILE_K)
        # syncopy: checked: the chunks of P this read touches have arrived
        syncopy_device.check_read(syncopy_signals, syncopy_ctx, P + ia[:, None] * p0 + ik[None, :] * p1, True, P, 15, True)
        pv = tl.load(P + ia[:, None] * p0 + ik[None, :] * p1)
        qv = tl.load(Q + ik[:, None] * q0 + ib[None, :] * q1)
        out += tl.dot(pv, qv)
    tl.store(R + ia[:, None] * r0 + ib[None, :] * r1, out)
