"""A GEMM whose output goes out through a tensor descriptor (TMA stores on sm_90), reduce-scattered."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def gemm_desc_out(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, SYNCOPY_ASYNC_PROXY: tl.constexpr):
    # syncopy: run tiles in chunk-send order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    pid_m = syncopy_pid0
    pid_n = syncopy_pid1
    a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    if pid_n * BN >= N:
        # syncopy: a tile that ends here still counts itself against its chunks
        syncopy_device.async_proxy_release(SYNCOPY_ASYNC_PROXY)
        syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_table_lo, syncopy_table_hi)
        return  # a grid padded past the last column block
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(a_desc.load([pid_m * BM, k * BK]), b_desc.load([k * BK, pid_n * BN]), acc)
    # the tile's block of C
    # syncopy: the chunks of C this program writes
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.desc_chunk_range(C, pid_m * BM, BM, M, N, (N - 1), C, syncopy_ctx)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(C.dtype.element_ty))
    # syncopy: the TMA stores land before the announcement (sm_90+)
    syncopy_device.async_proxy_release(SYNCOPY_ASYNC_PROXY)
    # syncopy: announce the finished chunks
    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
