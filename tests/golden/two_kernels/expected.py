import triton
import triton.language as tl
import syncopy.device as syncopy_device

SCALE = 2.0  # a module constant


def launch_helper(n, block):
    # plain Python: untouched
    return (triton.cdiv(n, block),)


@triton.jit
def first_kernel(u, v, n, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    o = i * BLOCK + tl.arange(0, BLOCK)
    tl.store(v + o, tl.load(u + o, mask=o < n) * SCALE, mask=o < n)


# between the kernels
@triton.jit
def second_kernel(u, v, n, BLOCK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    i = syncopy_pid0
    o = i * BLOCK + tl.arange(0, BLOCK)
    # syncopy: wait for the chunks of u this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(u + o, o < n, u, syncopy_ctx, True)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    tl.store(v + o, tl.load(u + o, mask=o < n) + 1.0, mask=o < n)


@triton.jit
def third_kernel(u,  v, n,
                 BLOCK :  tl.constexpr):   # odd spacing is kept
    pass
# trailing comment at the end of the file
