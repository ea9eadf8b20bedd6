"""Device-side library that fused kernels call: tile remapping, chunk ranges, bounded waits.

Rewritten kernels import this module as `syncopy_device` and call these @triton.jit helpers, so
the injected code stays a few readable lines and the logic lives (and is tested) in one place.

Layouts shared with the host (see runtime/state/context.py):

    ctx     int64  [epoch, rank, rows_per_rank, chunks_per_rank, stride_bytes, size, wait bound (ns compiled, polls interpreted), world]
                   uneven all_to_all (rows_per_rank 0): then the first row of each of the world*C chunks
    signals int32  [error flag, error rank, error chunk, error epoch | one flag per chunk (world*C)
                    | chunks arrived (consumer) or sent (producer) so far | tiles started so far
                    | producer only: tiles finished per chunk, ever (world*C) | the count that completes
                    each chunk in this launch (world*C)]

A flag holds the epoch (launch number) of the last time its chunk landed (consumer) or was fully
written (producer); a wait is `flag >= epoch` (cyclically: the int32 words wrap after 2^31
launches, and `flag - epoch >= 0` still tells), so nothing is ever reset between launches. Producer
counters only grow: before each launch the host sets a chunk's target to its previous target plus
the number of tiles that write the chunk (int32 arithmetic wraps on both sides alike).
"""
import os

import triton
import triton.language as tl

#: The scope of the acquire that reads a flag. "sys" (the default) covers every writer a flag has:
#: a copy engine or stream write on this GPU, a peer GPU over NVLink, the host. "gpu" is cheaper
#: and what Triton-distributed's intra-node kernels use; SYNCOPY_WAIT_SCOPE=gpu selects it, so that
#: benchmarks/gpu_bench.py can measure what the wider scope costs (read once, at import).
WAIT_GPU_SCOPE = tl.constexpr(os.environ.get("SYNCOPY_WAIT_SCOPE", "sys") == "gpu")
#: Nanoseconds a waiting program sleeps (`nanosleep`, sm_70+) between two polls of a flag that was
#: down. Every poll is a block-wide atomic on one word, and a whole wave of programs waiting on the
#: same chunk turns that word's L2 slice into a hot spot the copy engine and the computing tiles
#: share; sleeping between polls thins the traffic at the price of seeing a flag up to that much
#: later. SYNCOPY_WAIT_BACKOFF_NS (read once, at import) sets it; 0 polls back to back.
WAIT_BACKOFF_NS = tl.constexpr(int(os.environ.get("SYNCOPY_WAIT_BACKOFF_NS", "0")))

CTX_EPOCH = tl.constexpr(0)
CTX_RANK = tl.constexpr(1)
CTX_ROWS = tl.constexpr(2)
CTX_CHUNKS = tl.constexpr(3)
CTX_STRIDE_BYTES = tl.constexpr(4)
CTX_SIZE = tl.constexpr(5)
CTX_SPIN_LIMIT = tl.constexpr(6)
CTX_WORLD = tl.constexpr(7)
CTX_LEN = 8
#: Uneven all_to_all only (CTX_ROWS is 0): the first row of each of the world * C chunks follows the block.
CTX_TABLE = tl.constexpr(8)
#: int32 words of a traced tile's record: start sequence + 1, chunks arrived, began waiting, started (us).
TRACE_WORDS = tl.constexpr(4)

SIG_ERROR = tl.constexpr(0)
SIG_BASE = tl.constexpr(4)
SIG_HEADER = 4


@triton.jit
def _linear_program_id():
    """The hardware linear id x + n0*(y + n1*z), the index of the order table and of the probe output."""
    return tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))


#: Words per slot in the order table: (pid0, pid1, pid2, first chunk, last chunk).
SLOT_WORDS = 5


@triton.jit
def slot_entry(order):
    """This program's slot record in the order table: the tile it runs, as (pid0, pid1, pid2), and
    the (first, last) chunk that tile reads or writes.

    The runtime fills the table per launch shape from the probe kernel: tiles sorted by chunk
    arrival (or send order) and placed so the hardware runs them in that order; the tiles form a
    permutation of the grid, so the remap is a bijection. One record per slot, read with five
    loads: the fewest instructions we found (this runs once per program, and under the
    interpreter every instruction is tens of microseconds).
    """
    rec = order + 5 * _linear_program_id()
    return tl.load(rec), tl.load(rec + 1), tl.load(rec + 2), tl.load(rec + 3), tl.load(rec + 4)


@triton.jit
def _chunk_of_row(row, ctx):
    # Chunk boundaries are floor(i*S/C) (schedule/chunks.py); the chunk of local row r is
    # ((r+1)*C - 1) // S, offset by C chunks per source rank.
    rows_per_rank = tl.load(ctx + CTX_ROWS)
    chunks = tl.load(ctx + CTX_CHUNKS)
    if rows_per_rank > 0:
        src = row // rows_per_rank
        local = row - src * rows_per_rank
        g = src * chunks + ((local + 1) * chunks - 1) // rows_per_rank
    else:
        # Uneven all_to_all (rows_per_rank 0): blocks of their own sizes, so the chunk is the last
        # one whose start (the table after the context block) is at or before the row; an empty
        # chunk starts where the next one does and is never the answer.
        g = row * 0
        for i in range(1, tl.load(ctx + CTX_WORLD) * chunks):
            g += (tl.load(ctx + CTX_TABLE + i) <= row).to(g.dtype)
    return g


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
def chunk_range_clamped(ptrs, mask, base, ctx, DIM_OUTER: tl.constexpr):
    """`chunk_range_masked` for the union of a loop's first and last iterations after a mask term that
    changes with the loop was dropped: offsets before the tensor count as its first row (those past
    it count as its last, as always), so a middle iteration's rows always lie inside the union."""
    off = ptrs.to(tl.int64) - base.to(tl.int64) + tl.zeros([1], dtype=tl.int64)
    keep = (off == off) & mask
    return _range_of_offsets(tl.maximum(off, 0), keep, ctx, DIM_OUTER)


@triton.jit
def chunk_range_affine(p0, p1, keep, v0, v1, n, base, ctx, DIM_OUTER: tl.constexpr):
    """Chunk range of every read a loop `for k in 0..n` makes through p(k) = p0 + k (p1 - p0) / n,
    where the load's mask is `keep & (v(k) < 0)` and v(k) = v0 + k (v1 - v0) / n (the mask term that
    changes with the loop, as a difference; both affine in k, so the divisions are exact).

    Each element is counted at the first and the last iteration that keeps it (an interval of k,
    since v is affine), so the range is exact: a last iteration masked off entirely (issue 10
    case 1) counts no rows, and a ragged K counts no element past a row's end.
    """
    off0 = p0.to(tl.int64) - base.to(tl.int64) + tl.zeros([1], dtype=tl.int64)
    off1 = p1.to(tl.int64) - base.to(tl.int64) + tl.zeros([1], dtype=tl.int64)
    w0 = v0 + tl.zeros([1], dtype=tl.int64)
    w1 = v1 + tl.zeros([1], dtype=tl.int64)
    if w0.dtype.is_floating():
        # A float comparison has no integer interval: count every iteration's offsets (clamped).
        a = tl.maximum(tl.minimum(off0, off1), 0)
        b = tl.maximum(tl.maximum(off0, off1), 0)
        lo, hi = _range_of_offsets(a, keep & (off0 == off0), ctx, DIM_OUTER)
        lo2, hi2 = _range_of_offsets(b, keep & (off0 == off0), ctx, DIM_OUTER)
        return merge_ranges(lo, hi, lo2, hi2)
    steps = tl.maximum(n, 1)
    d_off = (off1 - off0) // steps
    d_v = (w1 - w0) // steps
    # The iterations that keep an element: w0 + k d_v < 0. Numerators stay >= 0, so the division
    # rounds the same compiled (toward zero) and interpreted (toward minus infinity).
    k_max = tl.where(d_v > 0, tl.where(w0 < 0, tl.maximum(-w0 - 1, 0) // tl.maximum(d_v, 1), -1),
                     tl.where((d_v == 0) & (w0 >= 0), -1, n))
    k_min = tl.where((d_v < 0) & (w0 >= 0), tl.maximum(w0, 0) // tl.maximum(-d_v, 1) + 1, 0)
    k_max = tl.minimum(k_max, n)
    kept = keep & (k_min <= k_max) & (off0 == off0)
    first = tl.maximum(off0 + k_min * d_off, 0)
    last = tl.maximum(off0 + k_max * d_off, 0)
    lo, hi = _range_of_offsets(tl.minimum(first, last), kept, ctx, DIM_OUTER)
    lo2, hi2 = _range_of_offsets(tl.maximum(first, last), kept, ctx, DIM_OUTER)
    return merge_ranges(lo, hi, lo2, hi2)


@triton.jit
def trip_count(start, stop, step):
    """How many iterations `range(start, stop, step)` runs (step > 0; none: zero or less)."""
    return (stop - start + step - 1) // step


@triton.jit
def first_row(ptrs, base, ctx):
    """The first row (along dim 0) a pointer block points into, masks aside: where a loop iteration's
    rows begin, to order iterations by the rank that owns them."""
    off = ptrs.to(tl.int64) - base.to(tl.int64) + tl.zeros([1], dtype=tl.int64)
    return tl.min(off) // tl.load(ctx + CTX_STRIDE_BYTES)


@triton.jit
def first_row_along(ptrs, base, ctx):
    """`first_row` for a tensor communicated along a dim other than 0: the first row along that dim a
    pointer block points into, (offset // stride) % size, as the waits count rows there."""
    off = ptrs.to(tl.int64) - base.to(tl.int64) + tl.zeros([1], dtype=tl.int64)
    return tl.min((off // tl.load(ctx + CTX_STRIDE_BYTES)) % tl.load(ctx + CTX_SIZE))


@triton.jit
def _first_iteration(src, r0, dr, rows_per_rank, world, n):
    # The first iteration whose rows begin in rank src's block or later (iteration j begins at r0 + j*dr).
    j = (tl.maximum(src * rows_per_rank - r0, 0) + dr - 1) // dr
    return tl.where(src <= 0, 0, tl.where(src >= world, n, tl.minimum(j, n)))


@triton.jit
def arrival_iteration(t, n, r0, r1, ctx):
    """The iteration a loop runs t-th when it runs in chunk-arrival order: iterations whose rows begin
    in this rank's block first, then those of rank - 1, rank - 2, ... (the ring's arrival order),
    each rank's in their written order. Iteration j's rows begin at r0 + j (r1 - r0); where they do
    not grow (r1 <= r0) the loop keeps its order. A bijection of 0..n-1 either way: the blocks'
    first iterations never decrease, so the ranks' ranges tile 0..n-1."""
    zero = tl.full([], 0, tl.int64)  # every value below in int64: loop-carried types must not change
    t = zero + t
    n = zero + n
    dr = r1 - r0
    j = t
    rows_per_rank = tl.load(ctx + CTX_ROWS)
    # Uneven all_to_all blocks (rows_per_rank 0) keep the written order: each iteration still waits.
    if (dr > 0) & (rows_per_rank > 0):
        world = tl.load(ctx + CTX_WORLD)
        rank = tl.load(ctx + CTX_RANK)
        before = zero
        for p in range(0, world):
            src = (rank - p + world) % world
            lo = _first_iteration(src, r0, dr, rows_per_rank, world, n)
            count = _first_iteration(src + 1, r0, dr, rows_per_rank, world, n) - lo
            j = tl.where((t >= before) & (t < before + count), lo + t - before, j)
            before += count
    return j


@triton.jit
def all_chunks(ctx):
    """Every chunk: the range of a read whose rows syncopy cannot tell."""
    last = (tl.load(ctx + CTX_WORLD) * tl.load(ctx + CTX_CHUNKS) - 1).to(tl.int32)
    return last * 0, last


@triton.jit
def empty_range(ctx):
    """No chunk (hi < lo), typed as the ranges above: where a producer starts collecting the chunks
    its stores write, one store at a time (passes/producer_notify.py)."""
    g = _chunk_of_row(tl.load(ctx + CTX_SIZE).to(tl.int64) * 0, ctx)
    return g, g - 1


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
def _ld_acquire_sys(ptr):
    """One acquire load at system scope, issued by every thread for itself: no block barrier, no
    shared-memory broadcast (what a scalar `tl.atomic_add(ptr, 0)` costs on every call)."""
    return tl.inline_asm_elementwise("ld.global.acquire.sys.b32 $0, [$1];", "=r,l", [ptr], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _globaltimer():
    """The GPU's global nanosecond timer (%globaltimer)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _flag_of_block(ptr):
    """The flag as the whole block sees it: one acquire load (system scope) broadcast to every thread,
    so that branches on it are uniform (the block barriers inside scalar atomics need that)."""
    if WAIT_GPU_SCOPE:
        flag = tl.atomic_add(ptr, 0, sem="acquire", scope="gpu")
    else:
        flag = tl.atomic_add(ptr, 0, sem="acquire", scope="sys")
    return flag


@triton.jit
def _backoff():
    """Sleep WAIT_BACKOFF_NS between polls (compiled only: the interpreter runs no PTX)."""
    if not TIMED_WAITS:
        if WAIT_BACKOFF_NS > 0:
            tl.inline_asm_elementwise("nanosleep.u32 $1;\n\tmov.u32 $0, 0;", "=r,r",
                                      [tl.full([], WAIT_BACKOFF_NS, tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _behind(flag, epoch):
    """Was `flag` raised by an earlier launch than `epoch`? Compared cyclically in int32 (the
    difference wraps as the words do), so launches go on past 2^31 with nothing reset."""
    return (flag - epoch) < 0


@triton.jit
def _spin_polls(ptr, epoch, limit, error_ptr):
    """After the block saw the flag down: compiled, at most `limit` more block-wide polls (see the
    comment below for why not a per-thread timed spin); interpreted, polls for `limit` microseconds
    of the host's clock (an interpreted poll's cost drifts within a process, so a count of polls
    is no bound in time there), and stops early once the error word is set: the host's transfer
    thread sets it when a peer's connection closed (Context.abort_waits), so a dead peer is reported
    at once, not after the timeout."""
    flag = _flag_of_block(ptr)
    if TIMED_WAITS:
        end = _now_us() + limit
        while _behind(flag, epoch) & (_now_us() < end) & (tl.load(error_ptr) == 0):
            flag = _flag_of_block(ptr)
    else:
        # Count the polls left down from the int64 budget: a 32-bit count of polls made would wrap
        # past 2^31 polls (timeout_s above ~430 s at 200 ns a poll) and the wait would never end.
        left = limit
        while _behind(flag, epoch) & (left > 0):
            _backoff()
            flag = _flag_of_block(ptr)
            left -= 1
    return flag


# How a wait spins, compiled and interpreted alike: block-wide acquire polls (one thread loads,
# the block sees one value, so every branch on it is uniform), at most CTX_SPIN_LIMIT of them. On
# an H200 one such poll costs ~190 ns (benchmarks/gpu_bench.py, poll_cost), and the host turns
# timeout_s into a poll budget with that cost (runtime/where.py, spin_limit). We measured the alternative, each
# thread spinning on its own ld.acquire.sys bounded by %globaltimer: cheaper per poll (~170 ns) but,
# with every thread of every waiting program polling, it slowed the loopback overlap run from
# 1.33 ms to 1.82 ms (8192x8192x4096, world 4): the polls competed with the copy engine and the
# tiles that compute. A bound that is a poll count is looser in time, which a timeout can afford.
INTERPRETED = type(_spin_polls).__name__ == "InterpretedFunction"
#: Under the interpreter a wait that finds its flag down says so to the host (runtime/transport/link.py, Hold):
#: the CPU backend's hold mode lands a chunk only once a program is waiting for it. Compiled
#: kernels never see the call (a constexpr-false branch is not generated).
NOTE_WAITS = tl.constexpr(INTERPRETED)
#: Interpreted waits are bounded in host time, CTX_SPIN_LIMIT then being microseconds (runtime/where.py).
TIMED_WAITS = tl.constexpr(INTERPRETED)

if INTERPRETED:
    import time as _time

    def _host_now_us() -> int:
        return _time.perf_counter_ns() // 1000

    @triton.jit
    def _now_us():
        return _host_now_us()
else:
    @triton.jit
    def _now_us():  # never called compiled (TIMED_WAITS is false there); the dependency scan needs a jit function
        return 0


#: (flag address, epoch word) of every flag an interpreted program found down while waiting on it:
#: what the hold-until-waited link (runtime/transport/link.py, Hold) reads to tell a tile blocked.
POLLED_DOWN: set[tuple[int, int]] = set()

if INTERPRETED:
    def _note_waiting(flag_ptr, epoch):
        """Plain Python, run inside an interpreted program: (the flag's address, the epoch word)."""
        POLLED_DOWN.add((int(flag_ptr.handle.data.reshape(-1)[0]), int(epoch.handle.data.reshape(-1)[0])))
else:
    # Compiled, the branch that calls it is never generated, but Triton's dependency scan of a kernel
    # refuses any name that is not a @triton.jit function: a no-op stands in.
    @triton.jit
    def _note_waiting(flag_ptr, epoch):
        pass

# -- trace clocks ------------------------------------------------------------------------------------
# A traced tile records when it began waiting and when it started (its wait done), in microseconds
# modulo 2^31 (an int32 word; the host takes differences, so a launch may last up to ~35 minutes).
# Compiled: %globaltimer, the GPU's nanosecond clock, when the tile started (a wait's begin would
# need state shared between two calls, so it stays 0: unknown). Interpreted: the host's
# perf_counter, the clock the runtime stamps landings with, so CPU traces line up with the transfers;
# the interpreter runs a rank's programs one after another on one thread, so the begin of the last
# wait on this thread is the tile's.
if INTERPRETED:
    import threading
    import time

    _waits = threading.local()

    def _host_us() -> int:
        return (time.perf_counter_ns() // 1000) % (1 << 31)

    def _note_wait_begin() -> int:
        _waits.begin = _host_us()
        return 0

    def _wait_began() -> int:
        return getattr(_waits, "begin", 0)

    @triton.jit
    def note_wait_begin():
        _note_wait_begin()

    @triton.jit
    def trace_clocks():
        """(began waiting, started) of this program's tile, microseconds modulo 2^31."""
        return _wait_began(), _host_us()
else:
    @triton.jit
    def note_wait_begin():
        pass

    @triton.jit
    def trace_clocks():
        """(0: not recorded, started) of this program's tile, microseconds modulo 2^31."""
        ns = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        return 0, ((ns // 1000) % 2147483648).to(tl.int32)


@triton.jit
def wait_chunks(signals, ctx, g_lo, g_hi):
    """Wait until chunks g_lo..g_hi carry this launch's epoch; bounded.

    Each poll is an acquire load at system scope (the writer may be another device, a copy engine
    or the host), inside a loop the compiler cannot hoist; the bound is CTX_SPIN_LIMIT polls. Past it
    the program records (rank, chunk, epoch) in the error slot and stops waiting; the host raises
    SyncopyTimeout. A program also stops waiting once any program recorded an error.
    """
    note_wait_begin()
    epoch = tl.load(ctx + CTX_EPOCH).to(tl.int32)
    limit = tl.load(ctx + CTX_SPIN_LIMIT)
    for g in range(g_lo, g_hi + 1):
        # Fast path first (the chunk is usually there by the time a tile asks): one acquire poll.
        # Only a chunk that is missing pays for the error-slot check and the bounded spin.
        flag = _flag_of_block(signals + SIG_BASE + g)
        if _behind(flag, epoch):
            if NOTE_WAITS:
                _note_waiting(signals + SIG_BASE + g, epoch)
            # Read for the whole block (uniform): a plain load could differ between warps.
            failed = tl.atomic_add(signals + SIG_ERROR, 0, sem="relaxed", scope="sys")
            if failed == 0:
                flag = _spin_polls(signals + SIG_BASE + g, epoch, limit, signals + SIG_ERROR)
                if _behind(flag, epoch):
                    tl.atomic_xchg(signals + SIG_ERROR + 1, tl.load(ctx + CTX_RANK).to(tl.int32))
                    tl.atomic_xchg(signals + SIG_ERROR + 2, g)
                    tl.atomic_xchg(signals + SIG_ERROR + 3, epoch)
                    tl.atomic_xchg(signals + SIG_ERROR, 1, sem="release", scope="sys")


# -- the async proxy (TMA) ---------------------------------------------------------------------------
# On sm_90 a tensor descriptor's loads and stores are TMA copies, which the *async proxy* performs.
# Under the PTX memory model an acquire (or release) by the generic proxy orders nothing of another
# proxy: a proxy fence must sit between them (PTX ISA, "Proxies" and `fence.proxy.async`).
#
#   consumer:  wait_chunks: ld.acquire.sys flag --bar.sync--> fence.proxy.async.global --> cp.async.bulk.tensor (load)
#   producer:  cp.async.bulk.tensor (store) --> cp.async.bulk.wait_group 0 --> fence.proxy.async.global
#              --> notify_chunks: bar.sync --> atom.acq_rel.sys count --> atom.release.sys flag
#
# Every thread runs the fence (the TMA copies are issued by one elected thread, whichever it is).
# The flag ON is the fused kernel's SYNCOPY_ASYNC_PROXY: the runtime sets it for compiled launches
# on sm_90+ only (`has_async_proxy`); older targets have no such instruction and the interpreter
# runs no PTX, so there the helpers compile to nothing.


def has_async_proxy(arch: int) -> bool:
    """Whether sm_<arch> copies tensor descriptors with TMA (the async proxy): Hopper (sm_90) and later."""
    return arch >= 90


@triton.jit
def async_proxy_acquire(ON: tl.constexpr):
    """After a wait: order the TMA loads that follow after the wait's acquire."""
    if ON:
        tl.inline_asm_elementwise("fence.proxy.async.global;\n\tmov.u32 $0, 0;", "=r", [], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def async_proxy_release(ON: tl.constexpr):
    """Before a notify: complete this thread's TMA stores (not only their reads of shared memory)
    and order them before the release that announces them."""
    if ON:
        tl.inline_asm_elementwise("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;\n\tmov.u32 $0, 0;", "=r", [],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def notify_chunks(signals, ctx, g_lo, g_hi):
    """After a tile's stores: count the tile against chunks g_lo..g_hi; the tile that completes a
    chunk (its count reaches the launch's target) raises the chunk's flag to the epoch.

        tile stores --bar.sync--> atomic_add(counter, 1, acq_rel) --if last--> atomic_xchg(flag, epoch, release)

    The barrier orders every thread's stores before the count; acq_rel makes the last tile see
    (synchronise with) the other tiles' counts, and its release on the flag carries all of them to
    whoever acquires the flag (the host, a copy engine, a peer).

    Every tile calls this exactly once, on every path: a tile that returns before its stores calls
    it first, over its range from the order table (passes/producer_notify.py), because the targets
    count every tile the probe saw writing the chunk, whether or not it stores this time.
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
def _arrived(signals, ctx, n_sig):
    """Chunks landed when a traced tile starts: the word the host counts them in (CPU backends,
    Context.land), or, where no host counts them (it reads -1: the GPU backends, whose copy engines
    and peers raise the flags), the flags of this launch that are up, counted here."""
    arrived = tl.atomic_add(signals + SIG_BASE + n_sig, 0, sem="acquire", scope="sys")
    if arrived < 0:
        epoch = tl.load(ctx + CTX_EPOCH).to(tl.int32)
        arrived = arrived * 0
        for f in range(0, n_sig):
            flag = tl.atomic_add(signals + SIG_BASE + f, 0, sem="relaxed", scope="sys")
            arrived += (flag - epoch >= 0).to(tl.int32)
    return arrived


@triton.jit
def trace_tile_start(signals, trace, ctx, TRACE: tl.constexpr):
    """With TRACE, record for this tile (start sequence number, chunks arrived when it started)."""
    if TRACE:
        world = tl.load(ctx + CTX_WORLD)
        chunks = tl.load(ctx + CTX_CHUNKS)
        n_sig = (world * chunks).to(tl.int32)
        arrived = _arrived(signals, ctx, n_sig)
        seq = tl.atomic_add(signals + SIG_BASE + n_sig + 1, 1, sem="relaxed", scope="sys")
        began, started = trace_clocks()
        lin = _linear_program_id()
        tl.store(trace + TRACE_WORDS * lin, seq + 1)
        tl.store(trace + TRACE_WORDS * lin + 1, arrived)
        tl.store(trace + TRACE_WORDS * lin + 2, began)
        tl.store(trace + TRACE_WORDS * lin + 3, started)


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


# -- persistent kernels ----------------------------------------------------------------------------
# A persistent kernel loops over tiles (`for t in range(pid, n_tiles, NUM_PROGRAMS)`, or a counter
# stepped by `t += NUM_PROGRAMS`). Its tiles are remapped through the *tile id*, not the program id:
# slot v of the loop runs tile order[v], so all programs together visit tiles in arrival order.
# The table is [n | tile per slot (n) | slot per tile (n) | (first, last) chunk per tile (2n)];
# n = 0 (no probe, or a loop that is not a bijection on 0..n-1) makes every remap the identity.


@triton.jit
def _scalar_i32(x):
    # Loop variables are Python ints under the interpreter and i32 scalars when compiled.
    return (x + tl.zeros([], dtype=tl.int32)).to(tl.int32)


@triton.jit
def tile_of(order, slot):
    """The tile that slot `slot` of a persistent loop runs (the identity outside 0..n-1)."""
    slot = _scalar_i32(slot)
    n = tl.load(order)
    inside = (slot >= 0) & (slot < n)
    tile = tl.load(order + 1 + tl.where(inside, slot, 0))
    return tl.where(inside, tile, slot)


@triton.jit
def advance_tile(order, tile, step):
    """Right after the kernel's own `tile += step` on a remapped tile id: the tile of the next slot.

    `tile - step` is the tile just finished; its slot plus `step` is the next slot, and that slot's
    tile is what the kernel runs next. Outside 0..n-1 (a counter that starts at pid - step, or one
    past the last tile) ids are slots themselves, so loop bounds keep their meaning.
    """
    prev = _scalar_i32(tile - step)
    n = tl.load(order)
    inside = (prev >= 0) & (prev < n)
    slot = tl.where(inside, tl.load(order + 1 + n + tl.where(inside, prev, 0)), prev)
    return tile_of(order, slot + step)


@triton.jit
def tile_range(order, tile, ctx):
    """Chunk range of tile `tile` from the probe table; every chunk for a tile outside the table."""
    tile = _scalar_i32(tile)
    n = tl.load(order)
    inside = (tile >= 0) & (tile < n)
    at = order + 1 + 2 * n + 2 * tl.where(inside, tile, 0)
    last = (tl.load(ctx + CTX_WORLD) * tl.load(ctx + CTX_CHUNKS) - 1).to(tl.int32)
    return tl.where(inside, tl.load(at), 0), tl.where(inside, tl.load(at + 1), last)


@triton.jit
def trace_tile_start_at(signals, trace, ctx, order, tile, TRACE: tl.constexpr):
    """`trace_tile_start` for a persistent loop: the record goes to the tile's own slot (0..n-1)."""
    if TRACE:
        world = tl.load(ctx + CTX_WORLD)
        chunks = tl.load(ctx + CTX_CHUNKS)
        n_sig = (world * chunks).to(tl.int32)
        arrived = _arrived(signals, ctx, n_sig)
        seq = tl.atomic_add(signals + SIG_BASE + n_sig + 1, 1, sem="relaxed", scope="sys")
        began, started = trace_clocks()
        tile = _scalar_i32(tile)
        n = tl.load(order)
        inside = (tile >= 0) & (tile < n)
        at = TRACE_WORDS * tl.where(inside, tile, 0)
        tl.store(trace + at, seq + 1, mask=inside)
        tl.store(trace + at + 1, arrived, mask=inside)
        tl.store(trace + at + 2, began, mask=inside)
        tl.store(trace + at + 3, started, mask=inside)


#: Probe output of a persistent loop: [max tile id + 1 | negative id seen | capacity | per tile:
#: first chunk, last chunk, program, iteration of that program's loop, visits].
PROBE_HEADER = 3
PROBE_FIELDS = 5


@triton.jit
def probe_store_tile(out, tile, g_lo, g_hi, iteration):
    """Probe of a persistent loop: record tile `tile`'s chunk range, who ran it, and when."""
    tile = _scalar_i32(tile)
    cap = tl.load(out + 2)
    tl.atomic_max(out, tile + 1)
    tl.atomic_max(out + 1, (tile < 0).to(tl.int32))
    inside = (tile >= 0) & (tile < cap)
    at = out + 3 + 5 * tl.where(inside, tile, 0)
    tl.store(at, g_lo.to(tl.int32), mask=inside)
    tl.store(at + 1, g_hi.to(tl.int32), mask=inside)
    tl.store(at + 2, _linear_program_id().to(tl.int32), mask=inside)
    tl.store(at + 3, _scalar_i32(iteration), mask=inside)
    tl.atomic_add(at + 4, 1, mask=inside)


# -- tensor descriptors ----------------------------------------------------------------------------
@triton.jit
def desc_chunk_range(desc_base, row0, block0, size0, stride0, tail, base, ctx):
    """Chunk range of `desc.load([row0, ...])` on `tl.make_tensor_descriptor(desc_base, ...)`.

    The block covers descriptor rows [row0, row0 + block0) clipped to [0, size0) (the copy engine
    fills rows outside with zeros), and we count every element of the other dimensions (`tail` is
    the element offset of the last of them): exact when dim 0 of the descriptor is the tensor's
    outermost dimension, a superset otherwise, and independent of the column coordinate, so one
    wait covers a whole K loop.

    `desc_base` may be a descriptor itself: one made on the host (the tutorial's
    `_maybe_make_tensor_desc` passes it through, or the kernel reads its parameter directly). The
    launch made it over the whole gathered tensor, row-major (runtime/launch/host_descriptors.py), so
    its own shape, row stride and block rows are the ones its loads use, whatever the kernel's
    helper was told, and its rows start at the tensor's start.
    """
    if isinstance(desc_base, tl.tensor_descriptor):  # a constexpr test: compiled, only its branch is built
        return _host_desc_chunk_range(desc_base, row0, ctx)
    else:
        return _made_desc_chunk_range(desc_base, row0, block0, size0, stride0, tail, base, ctx)


@triton.jit
def _made_desc_chunk_range(desc_base, row0, block0, size0, stride0, tail, base, ctx):
    """desc_chunk_range of a descriptor made in the kernel from the pointer `desc_base`."""
    row0 = _scalar_i32(row0)
    r_lo = tl.maximum(row0, 0).to(tl.int64)
    r_hi = (tl.minimum(row0 + block0, size0) - 1).to(tl.int64)
    lo_ptr = desc_base + r_lo * stride0
    hi_ptr = desc_base + r_hi * stride0 + tail
    corner = tl.arange(0, 2)
    lo_off = tl.maximum(lo_ptr.to(tl.int64) - base.to(tl.int64), 0)
    off = tl.where(corner == 0, lo_off, hi_ptr.to(tl.int64) - base.to(tl.int64))
    keep = (off >= 0) & (r_hi >= r_lo)
    return _range_of_offsets(off, keep, ctx, True)


@triton.jit
def _host_desc_chunk_range(desc, row0, ctx):
    """desc_chunk_range of a host descriptor over the whole (gathered) tensor, row-major: row r holds
    elements [r * stride0, (r + 1) * stride0) from the tensor's start (offsets in bytes, as pointers')."""
    row0 = _scalar_i32(row0)
    stride0 = desc.strides[0].to(tl.int64) * (desc.dtype.primitive_bitwidth // 8)
    r_lo = tl.maximum(row0, 0).to(tl.int64)
    r_hi = (tl.minimum(row0 + desc.block_shape[0], desc.shape[0]) - 1).to(tl.int64)
    corner = tl.arange(0, 2)
    off = tl.where(corner == 0, r_lo * stride0, r_hi * stride0 + stride0 - 1)
    keep = (off >= 0) & (r_hi >= r_lo)
    return _range_of_offsets(off, keep, ctx, True)


# -- checked mode (passes/read_check.py) -------------------------------------------------------------
# Every read of the communicated tensor (consumer) and every store into it (producer) checks, from
# its own pointers, the flags of the chunks it touches. A violation leaves its site in the error
# flag word, so the host names the kernel's source line:
#
#     error flag = 1                          a wait ran out (SyncopyTimeout)
#     error flag = CHECK_BASE + 2 line + 0    a read of a chunk whose flag is behind the epoch
#     error flag = CHECK_BASE + 2 line + 1    a store into a chunk whose flag was raised already
#
# The first violation wins (compare-and-swap on the flag word); waits stop once it is set.
CHECK_BASE = tl.constexpr(16)


@triton.jit
def _report_violation(signals, ctx, g, epoch, code):
    """Record (code, rank, chunk, epoch) in the error slot, unless an error is there already."""
    if tl.atomic_cas(signals + SIG_ERROR, 0, code, sem="acq_rel", scope="sys") == 0:
        tl.atomic_xchg(signals + SIG_ERROR + 1, tl.load(ctx + CTX_RANK).to(tl.int32))
        tl.atomic_xchg(signals + SIG_ERROR + 2, g.to(tl.int32))
        tl.atomic_xchg(signals + SIG_ERROR + 3, epoch, sem="release", scope="sys")


@triton.jit
def _check_chunks(signals, ctx, g_lo, g_hi, line, STORE: tl.constexpr):
    """Chunks g_lo..g_hi must carry this launch's epoch (a read), or not yet (a store)."""
    epoch = tl.load(ctx + CTX_EPOCH).to(tl.int32)
    code = tl.zeros([], dtype=tl.int32) + (CHECK_BASE + 2 * line + STORE)
    for g in range(g_lo, g_hi + 1):
        behind = _behind(_flag_of_block(signals + SIG_BASE + g), epoch)
        if behind != STORE:
            _report_violation(signals, ctx, g + g_lo * 0, epoch, code)


#: Under the interpreter the checks run as plain Python on the program's values (`_check_on_host`):
#: the same ranges and comparisons as the device code below, which costs ~40 interpreted operations
#: and two reductions (tl.min, tl.max: @jit functions the interpreter re-patches triton.language for
#: on every call) per checked access, most of checked mode's cost on CPU worlds. Tests run both.
CHECK_ON_HOST = tl.constexpr(INTERPRETED)


@triton.jit
def check_read(signals, ctx, ptrs, mask, base, line, DIM_OUTER: tl.constexpr):
    """Checked mode: every chunk holding an element this load reads (its pointers, its mask) has arrived."""
    if CHECK_ON_HOST:
        _check_on_host(signals, ctx, ptrs, mask, base, line, DIM_OUTER, False)
    else:
        g_lo, g_hi = chunk_range_masked(ptrs, mask, base, ctx, DIM_OUTER)
        _check_chunks(signals, ctx, g_lo, g_hi, line, False)


@triton.jit
def check_store(signals, ctx, ptrs, mask, base, line, DIM_OUTER: tl.constexpr):
    """Checked mode: no chunk this store (or atomic) writes into has been announced yet."""
    if CHECK_ON_HOST:
        _check_on_host(signals, ctx, ptrs, mask, base, line, DIM_OUTER, True)
    else:
        g_lo, g_hi = chunk_range_masked(ptrs, mask, base, ctx, DIM_OUTER)
        _check_chunks(signals, ctx, g_lo, g_hi, line, True)


def _value(x):
    """A program's value as numpy (a tl.tensor's data), or the Python value of a constant."""
    import numpy as np

    if hasattr(x, "handle"):
        return x.handle.data
    return np.asarray(getattr(x, "value", x))


def _words(ptr, dtype, n: int):
    """`n` words of host memory at a pointer value of an interpreted program (CPU tensors only)."""
    import ctypes

    import numpy as np

    address = int(_value(ptr).reshape(-1)[0])
    return np.ctypeslib.as_array(((ctypes.c_int64 if dtype == "i64" else ctypes.c_int32) * n).from_address(address))


def _host_chunk_of_row(row: int, c) -> int:
    rows_per_rank, chunks = int(c[CTX_ROWS]), int(c[CTX_CHUNKS])
    if rows_per_rank <= 0:  # uneven all_to_all: the chunk starts follow the block (see _chunk_of_row)
        starts = c[CTX_LEN : CTX_LEN + int(c[CTX_WORLD]) * chunks]
        return max(sum(1 for s in starts[1:] if int(s) <= row), 0)
    src = row // rows_per_rank
    local = row - src * rows_per_rank
    return src * chunks + ((local + 1) * chunks - 1) // rows_per_rank


if INTERPRETED:
    def _check_on_host(signals, ctx, ptrs, mask, base, line, dim_outer, store: bool) -> None:
        """`chunk_range_masked` + `_check_chunks` in plain Python, for interpreted programs."""
        import numpy as np

        c = _words(ctx, "i64", CTX_LEN)
        if int(c[CTX_ROWS]) <= 0:  # uneven all_to_all: with its table of chunk starts
            c = _words(ctx, "i64", CTX_LEN + int(c[CTX_WORLD]) * int(c[CTX_CHUNKS]))
        off = _value(ptrs).astype(np.uint64).astype(np.int64) - np.int64(int(_value(base).reshape(-1)[0]))
        keep = (off >= 0) & np.broadcast_to(_value(mask).astype(bool), off.shape)
        if not keep.any():
            return
        stride_bytes, size = int(c[CTX_STRIDE_BYTES]), int(c[CTX_SIZE])
        if bool(_value(dim_outer)):
            kept = off[keep]
            row_lo, row_hi = min(int(kept.min()) // stride_bytes, size - 1), min(int(kept.max()) // stride_bytes, size - 1)
        else:
            rows = (off[keep] // stride_bytes) % size
            row_lo, row_hi = int(rows.min()), int(rows.max())
        n_flags = int(c[CTX_WORLD] * c[CTX_CHUNKS])
        words = _words(signals, "i32", SIG_HEADER + n_flags)
        epoch = int(c[CTX_EPOCH])
        for g in range(_host_chunk_of_row(row_lo, c), _host_chunk_of_row(row_hi, c) + 1):
            behind = (int(words[SIG_HEADER + g]) - epoch + 2**31) % 2**32 < 2**31  # cyclic in int32, as _behind
            if behind != store and words[0] == 0:
                code = CHECK_BASE.value + 2 * int(_value(line)) + int(store)
                words[1], words[2], words[3], words[0] = int(c[CTX_RANK]), g, epoch, code
else:
    @triton.jit
    def _check_on_host(signals, ctx, ptrs, mask, base, line, dim_outer, store):
        pass  # compiled kernels run the device checks (CHECK_ON_HOST is false); see _note_waiting


@triton.jit
def check_desc_read(signals, ctx, desc_base, row0, block0, size0, stride0, tail, base, line):
    """`check_read` for `desc.load([row0, ...])` (rows as in `desc_chunk_range`)."""
    g_lo, g_hi = desc_chunk_range(desc_base, row0, block0, size0, stride0, tail, base, ctx)
    _check_chunks(signals, ctx, g_lo, g_hi, line, False)


@triton.jit
def check_desc_store(signals, ctx, desc_base, row0, block0, size0, stride0, tail, base, line):
    """`check_store` for `desc.store([row0, ...], value)`."""
    g_lo, g_hi = desc_chunk_range(desc_base, row0, block0, size0, stride0, tail, base, ctx)
    _check_chunks(signals, ctx, g_lo, g_hi, line, True)


# -- the interpreter's calls of these helpers ---------------------------------------------------------
# Under TRITON_INTERPRET every call of a @triton.jit function from a running program patches
# triton.language again (inspect.getmembers over tl, tl.tensor, tl.math: about 1 ms a call on a CPU
# world, a third of checked mode's time and a good part of every world test's). The launch of the
# kernel that calls these helpers has patched it already (the interpreter never restores a nested
# patch anyway), so while it is patched a helper of this module runs its rewritten body directly;
# called any other way, it patches as before.
if INTERPRETED:
    _InterpretedFunction = type(_spin_polls)
    _unpatched_load = tl.load

    class _Helper(_InterpretedFunction):
        def __call__(self, *args, **kwargs):
            if tl.load is _unpatched_load:
                return super().__call__(*args, **kwargs)
            return self.rewrite()(*args, **kwargs)

    for _fn in list(globals().values()):
        if type(_fn) is _InterpretedFunction:
            _fn.__class__ = _Helper
