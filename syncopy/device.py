"""Device-side library that fused kernels call: tile remapping, chunk ranges, bounded waits.

Rewritten kernels import this module as `syncopy_device` and call these @triton.jit helpers, so
the injected code stays a few readable lines and the logic lives (and is tested) in one place.

Layouts shared with the host (see runtime/context.py):

    ctx     int64  [epoch, rank, rows_per_rank, chunks_per_rank, stride_bytes, size, spin_limit, world]
    signals int32  [error flag, error rank, error chunk, error epoch | one flag per chunk (world*C)
                    | chunks arrived (consumer) or sent (producer) so far | tiles started so far
                    | producer only: tiles finished per chunk, ever (world*C) | the count that completes
                    each chunk in this launch (world*C)]

A flag holds the epoch (launch number) of the last time its chunk landed (consumer) or was fully
written (producer); a wait is `flag >= epoch`, so nothing is ever reset between launches. Producer
counters only grow: before each launch the host sets a chunk's target to its previous target plus
the number of tiles that write the chunk (int32 arithmetic wraps on both sides alike).
"""
import triton
import triton.language as tl

CTX_EPOCH = tl.constexpr(0)
CTX_RANK = tl.constexpr(1)
CTX_ROWS = tl.constexpr(2)
CTX_CHUNKS = tl.constexpr(3)
CTX_STRIDE_BYTES = tl.constexpr(4)
CTX_SIZE = tl.constexpr(5)
CTX_SPIN_LIMIT = tl.constexpr(6)
CTX_WORLD = tl.constexpr(7)
CTX_LEN = 8

SIG_ERROR = tl.constexpr(0)
SIG_BASE = tl.constexpr(4)
SIG_HEADER = 4


@triton.jit
def _linear_program_id():
    """The hardware linear id x + n0*(y + n1*z), the index of the order table and of the probe output."""
    return tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))


@triton.jit
def program_ids(order):
    """The tile this program runs: `order[linear program id]`, split back into (pid0, pid1, pid2).

    The runtime fills `order` with a permutation of the grid, so the remap is a bijection.
    """
    n0 = tl.num_programs(0)
    n1 = tl.num_programs(1)
    tile = tl.load(order + _linear_program_id())
    return tile % n0, (tile // n0) % n1, tile // (n0 * n1)


@triton.jit
def table_range(order):
    """This tile's chunk range from the table the runtime built with the probe kernel.

    `order` holds [tile per slot (n) | (first chunk, last chunk) per tile (2n)]; the probe ran the
    kernel's own index arithmetic for every tile, so this equals what the kernel would compute,
    without a block-wide reduction per tile.
    """
    n = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
    tile = tl.load(order + _linear_program_id())
    return tl.load(order + n + 2 * tile), tl.load(order + n + 2 * tile + 1)


@triton.jit
def _chunk_of_row(row, ctx):
    # Chunk boundaries are floor(i*S/C) (schedule/chunks.py); the chunk of local row r is
    # ((r+1)*C - 1) // S, offset by C chunks per source rank.
    rows_per_rank = tl.load(ctx + CTX_ROWS)
    chunks = tl.load(ctx + CTX_CHUNKS)
    src = row // rows_per_rank
    local = row - src * rows_per_rank
    return src * chunks + ((local + 1) * chunks - 1) // rows_per_rank


@triton.jit
def _range_of_offsets(off, keep, ctx, DIM_OUTER: tl.constexpr):
    stride_bytes = tl.load(ctx + CTX_STRIDE_BYTES)
    size = tl.load(ctx + CTX_SIZE)
    if DIM_OUTER:
        # Rows grow with the offset when `dim` is the outermost dimension: two reductions suffice.
        lo = tl.min(tl.where(keep, off, 9223372036854775807))
        hi = tl.max(tl.where(keep, off, -1))
        any_kept = hi >= 0
        row_lo = tl.minimum(tl.where(any_kept, lo, 0) // stride_bytes, size - 1)
        row_hi = tl.minimum(tl.where(any_kept, hi, 0) // stride_bytes, size - 1)
    else:
        rows = (off // stride_bytes) % size
        row_lo = tl.min(tl.where(keep, rows, 9223372036854775807))
        row_hi = tl.max(tl.where(keep, rows, -1))
        any_kept = row_hi >= 0
        row_lo = tl.where(any_kept, row_lo, 0)
        row_hi = tl.where(any_kept, row_hi, 0)
    g_lo = _chunk_of_row(row_lo, ctx)
    g_hi = _chunk_of_row(row_hi, ctx)
    return g_lo, tl.where(any_kept, g_hi, g_lo - 1)


@triton.jit
def chunk_range(ptrs, base, ctx, DIM_OUTER: tl.constexpr):
    """First and last chunk (global index src*C + i) holding an element of the pointer block."""
    off = ptrs.to(tl.int64) - base.to(tl.int64) + tl.zeros([1], dtype=tl.int64)
    return _range_of_offsets(off, off >= 0, ctx, DIM_OUTER)


@triton.jit
def chunk_range_masked(ptrs, mask, base, ctx, DIM_OUTER: tl.constexpr):
    """`chunk_range` counting only the elements the load's mask keeps."""
    off = ptrs.to(tl.int64) - base.to(tl.int64) + tl.zeros([1], dtype=tl.int64)
    keep = (off >= 0) & mask
    return _range_of_offsets(off, keep, ctx, DIM_OUTER)


@triton.jit
def chunk_range_of_rows(rows, ctx):
    """Chunk range of explicit row indices (the schedule's `binding.rows`)."""
    r = rows.to(tl.int64) + tl.zeros([1], dtype=tl.int64)
    size = tl.load(ctx + CTX_SIZE)
    keep = (r >= 0) & (r < size)
    row_lo = tl.min(tl.where(keep, r, 9223372036854775807))
    row_hi = tl.max(tl.where(keep, r, -1))
    any_kept = row_hi >= 0
    g_lo = _chunk_of_row(tl.where(any_kept, row_lo, 0), ctx)
    g_hi = _chunk_of_row(tl.where(any_kept, row_hi, 0), ctx)
    return g_lo, tl.where(any_kept, g_hi, g_lo - 1)


@triton.jit
def wait_chunks(signals, ctx, g_lo, g_hi):
    """Wait until chunks g_lo..g_hi carry this launch's epoch; bounded.

    Each poll is an acquire load at system scope (the writer may be another device or the host),
    inside a loop the compiler cannot hoist. Past `spin_limit` polls the program records
    (rank, chunk, epoch) in the error slot and stops waiting; the host raises SyncopyTimeout.
    """
    epoch = tl.load(ctx + CTX_EPOCH).to(tl.int32)
    limit = tl.load(ctx + CTX_SPIN_LIMIT)
    for g in range(g_lo, g_hi + 1):
        if tl.load(signals + SIG_ERROR, volatile=True) == 0:
            flag = tl.atomic_add(signals + SIG_BASE + g, 0, sem="acquire", scope="sys")
            polls = 0
            while (flag < epoch) & (polls < limit):
                flag = tl.atomic_add(signals + SIG_BASE + g, 0, sem="acquire", scope="sys")
                polls += 1
            if flag < epoch:
                tl.atomic_xchg(signals + SIG_ERROR + 1, tl.load(ctx + CTX_RANK).to(tl.int32))
                tl.atomic_xchg(signals + SIG_ERROR + 2, g)
                tl.atomic_xchg(signals + SIG_ERROR + 3, epoch)
                tl.atomic_xchg(signals + SIG_ERROR, 1, sem="release", scope="sys")


@triton.jit
def notify_chunks(signals, ctx, g_lo, g_hi):
    """After a tile's stores: count the tile against chunks g_lo..g_hi; the tile that completes a
    chunk (its count reaches the launch's target) raises the chunk's flag to the epoch.

        tile stores --bar.sync--> atomic_add(counter, 1, acq_rel) --if last--> atomic_xchg(flag, epoch, release)

    The barrier orders every thread's stores before the count; acq_rel makes the last tile see
    (synchronise with) the other tiles' counts, and its release on the flag carries all of them to
    whoever acquires the flag (the host, a copy engine, a peer).
    """
    epoch = tl.load(ctx + CTX_EPOCH).to(tl.int32)
    n = (tl.load(ctx + CTX_WORLD) * tl.load(ctx + CTX_CHUNKS)).to(tl.int32)
    counters = signals + SIG_BASE + n + 2
    tl.debug_barrier()
    for g in range(g_lo, g_hi + 1):
        target = tl.load(counters + n + g)
        done = tl.atomic_add(counters + g, 1, sem="acq_rel", scope="sys") + 1
        if done == target:
            tl.atomic_xchg(signals + SIG_BASE + g, epoch, sem="release", scope="sys")


@triton.jit
def trace_tile_start(signals, trace, ctx, TRACE: tl.constexpr):
    """With TRACE, record for this tile (start sequence number, chunks arrived when it started)."""
    if TRACE:
        world = tl.load(ctx + CTX_WORLD)
        chunks = tl.load(ctx + CTX_CHUNKS)
        n_sig = (world * chunks).to(tl.int32)
        arrived = tl.atomic_add(signals + SIG_BASE + n_sig, 0, sem="acquire", scope="sys")
        seq = tl.atomic_add(signals + SIG_BASE + n_sig + 1, 1, sem="relaxed", scope="sys")
        lin = _linear_program_id()
        tl.store(trace + 2 * lin, seq + 1)
        tl.store(trace + 2 * lin + 1, arrived)


@triton.jit
def probe_store(out, g_lo, g_hi):
    """Probe kernels store each program's chunk range at its (un-remapped) linear id."""
    lin = _linear_program_id()
    tl.store(out + 2 * lin, g_lo.to(tl.int32))
    tl.store(out + 2 * lin + 1, g_hi.to(tl.int32))


@triton.jit
def merge_ranges(lo, hi, lo2, hi2):
    """Union of two chunk ranges (an empty range has hi < lo)."""
    empty = hi < lo
    empty2 = hi2 < lo2
    new_lo = tl.where(empty, lo2, tl.where(empty2, lo, tl.minimum(lo, lo2)))
    new_hi = tl.where(empty, hi2, tl.where(empty2, hi, tl.maximum(hi, hi2)))
    return new_lo, new_hi
