"""One flat loop of K steps x tiles; a tile starts inside `if ki == 0:`; descriptor loads."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def flat_k_desc(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SMS: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, SYNCOPY_ASYNC_PROXY: tl.constexpr):
    first = tl.program_id(0)
    grid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    tiles = tl.cdiv(M, BM) * grid_n
    mine = tiles // SMS
    if first < tiles % SMS:
        mine += 1
    a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tile = first - SMS
    ki = -1
    om = 0
    on = 0
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    # syncopy: run tiles in chunk-arrival order
    tile = syncopy_device.tile_of(syncopy_order, tile)
    for _ in range(0, k_tiles * mine):
        ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
        if ki == 0:
            tile += SMS
            tile = syncopy_device.advance_tile(syncopy_order, tile, SMS)
            om = (tile // grid_n) * BM
            on = (tile % grid_n) * BN
            # syncopy: wait for the chunks of A this tile reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_device.tile_range(syncopy_order, tile, syncopy_ctx)
            else:
                syncopy_lo, syncopy_hi = syncopy_device.desc_chunk_range(A, om, BM, M, K, (K - 1), A, syncopy_ctx)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.async_proxy_acquire(SYNCOPY_ASYNC_PROXY)
            syncopy_device.trace_tile_start_at(syncopy_signals, syncopy_trace, syncopy_ctx, syncopy_order, tile, SYNCOPY_TRACE)
        a = a_desc.load([om, ki * BK])
        b = b_desc.load([ki * BK, on])
        acc = tl.dot(a, b, acc)
        if ki == k_tiles - 1:
            c_desc.store([om, on], acc.to(C.dtype.element_ty))
            acc = tl.zeros((BM, BN), dtype=tl.float32)
