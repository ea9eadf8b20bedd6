"""A Hopper-style persistent GEMM: programs loop over output tiles, operands through tensor
descriptors, tile coordinates from a jit helper."""
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def block_of(job, n_row_blocks, n_col_blocks, SWZ: tl.constexpr):
    """Which (row block, column block) job number `job` computes (grouped for L2 reuse)."""
    band = SWZ * n_col_blocks
    top = (job // band) * SWZ
    tall = min(n_row_blocks - top, SWZ)
    return top + (job % tall), (job % band) // tall


@triton.jit
def gemm_persistent(lhs, rhs, res, R, C, D, TR: tl.constexpr, TC: tl.constexpr, TD: tl.constexpr,
                    SWZ: tl.constexpr, CORES: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, SYNCOPY_ASYNC_PROXY: tl.constexpr):
    lhs_desc = tl.make_tensor_descriptor(lhs, shape=[R, D], strides=[D, 1], block_shape=[TR, TD])
    rhs_desc = tl.make_tensor_descriptor(rhs, shape=[D, C], strides=[C, 1], block_shape=[TD, TC])
    res_desc = tl.make_tensor_descriptor(res, shape=[R, C], strides=[C, 1], block_shape=[TR, TC])
    worker = tl.program_id(0)
    n_r = tl.cdiv(R, TR)
    n_c = tl.cdiv(C, TC)
    for job in range(worker, n_r * n_c, CORES):
        # where this job's output block sits
        # syncopy: run tiles in chunk-arrival order
        job = syncopy_device.tile_of(syncopy_order, job)
        rb, cb = block_of(job, n_r, n_c, SWZ)
        row0 = rb * TR
        col0 = cb * TC
        acc = tl.zeros((TR, TC), dtype=tl.float32)
        # syncopy: wait for the chunks of lhs this tile reads
        if SYNCOPY_TABLE:
            syncopy_lo, syncopy_hi = syncopy_device.tile_range(syncopy_order, job, syncopy_ctx)
        else:
            syncopy_lo, syncopy_hi = syncopy_device.desc_chunk_range(lhs, row0, TR, R, D, (D - 1), lhs, syncopy_ctx)
        syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
        syncopy_device.async_proxy_acquire(SYNCOPY_ASYNC_PROXY)
        syncopy_device.trace_tile_start_at(syncopy_signals, syncopy_trace, syncopy_ctx, syncopy_order, job, SYNCOPY_TRACE)
        for d0 in range(0, D, TD):
            acc = tl.dot(lhs_desc.load([row0, d0]), rhs_desc.load([d0, col0]), acc)
        res_desc.store([row0, col0], acc.to(res.dtype.element_ty))
