"""Kernels whose reads of the communicated tensor `X` ([M, NC], gathered along dim 0) no single
first/last-iteration bound covers: issue 10, part A, one kernel per numbered case. Each computes
something every wrongly-waited row would spoil (NaN from a poisoned buffer, or stale data)."""
import triton
import triton.language as tl


@triton.jit
def masked_quad(X, out, M, NC: tl.constexpr, BM: tl.constexpr):
    """Case 1: four row blocks per program; the last program's last block(s) are masked off."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    for i in tl.static_range(4):
        rows = (pid * 4 + i) * BM + tl.arange(0, BM)
        mask = rows < M
        v = tl.load(X + rows[:, None] * NC + c[None, :], mask=mask[:, None], other=0.0)
        tl.store(out + rows[:, None] * NC + c[None, :], v * 2.0 + 1.0, mask=mask[:, None])


@triton.jit
def reverse_scan(X, out, M, NC: tl.constexpr):
    """Case 2: a negative-step loop over every row, last row first: out[p] = sum_r X[r] / 2**r."""
    c = tl.arange(0, NC)
    acc = tl.zeros([NC], dtype=tl.float32)
    for r in range(M - 1, -1, -1):
        acc = acc * 0.5 + tl.load(X + r * NC + c).to(tl.float32)
    tl.store(out + tl.program_id(0) * NC + c, acc)


@triton.jit
def nested_steps(X, out, NC: tl.constexpr, OUTER: tl.constexpr, INNER: tl.constexpr):
    """Case 3: a pointer stepped inside an inner loop: out[p] = sum of rows p*OUTER*INNER ... + OUTER*INNER - 1."""
    pid = tl.program_id(0)
    p = X + pid * (OUTER * INNER) * NC
    c = tl.arange(0, NC)
    acc = tl.zeros([NC], dtype=tl.float32)
    for o in range(OUTER):
        for i in range(INNER):
            acc += tl.load(p + c).to(tl.float32)
            p += NC
    tl.store(out + pid * NC + c, acc)


@triton.jit
def ring_rows(X, out, M, NC: tl.constexpr, BR: tl.constexpr, NB: tl.constexpr):
    """Case 4: every program reads all NB row blocks in wrapped order, starting at its own:
    out block p = sum_i X block (p + i) % NB / 2**(NB - 1 - i)."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    acc = tl.zeros([BR, NC], dtype=tl.float32)
    for i in range(NB):
        r = (pid + i) % NB
        rows = r * BR + tl.arange(0, BR)
        v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        acc = acc * 0.5 + v.to(tl.float32)
    tl.store(out + (pid * BR + tl.arange(0, BR))[:, None] * NC + c[None, :], acc)


@triton.jit
def _block_of(P, which, M, NC: tl.constexpr, BR: tl.constexpr):
    rows = which * BR + tl.arange(0, BR)
    return tl.load(P + rows[:, None] * NC + tl.arange(0, NC)[None, :], mask=rows[:, None] < M, other=0.0)


@triton.jit
def helper_block(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """Case 5: a helper handed the base pointer and the program id does the row arithmetic: out = 3 X."""
    pid = tl.program_id(0)
    v = _block_of(X, pid, M, NC, BR)
    rows = pid * BR + tl.arange(0, BR)
    tl.store(out + rows[:, None] * NC + tl.arange(0, NC)[None, :], v * 3.0, mask=rows[:, None] < M)


@triton.jit
def _wrapped_block(P, which, nb, M, NC: tl.constexpr, BR: tl.constexpr):
    acc = tl.zeros([BR, NC], dtype=tl.float32)
    for i in range(2):
        rows = ((which + i) % nb) * BR + tl.arange(0, BR)
        acc += tl.load(P + rows[:, None] * NC + tl.arange(0, NC)[None, :], mask=rows[:, None] < M, other=0.0).to(tl.float32)
    return acc


@triton.jit
def helper_wrapped(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """Case 5, a helper whose reads no bound covers (wrapped rows): out block p = X block p + X block (p+1) % nb."""
    pid = tl.program_id(0)
    v = _wrapped_block(X, pid, tl.num_programs(0), M, NC, BR)
    rows = pid * BR + tl.arange(0, BR)
    tl.store(out + rows[:, None] * NC + tl.arange(0, NC)[None, :], v, mask=rows[:, None] < M)


@triton.jit
def _my_rows(BR: tl.constexpr):
    return tl.program_id(0) * BR + tl.arange(0, BR)


@triton.jit
def helper_pid(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    """Case 6: tl.program_id inside a helper: out[p] = column sums of row block p."""
    pid = tl.program_id(0)
    rows = _my_rows(BR)
    c = tl.arange(0, NC)
    v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
    tl.store(out + pid * NC + c, tl.sum(v.to(tl.float32), axis=0))


@triton.jit
def gather_rows(X, idx, out, NC: tl.constexpr):
    """Case 7: rows chosen by data (an embedding lookup): out[p] = X[idx[p]]."""
    pid = tl.program_id(0)
    row = tl.load(idx + pid)
    c = tl.arange(0, NC)
    v = tl.load(X + row * NC + c)
    tl.store(out + pid * NC + c, v)


@triton.jit
def persistent_blocks(X, blocks, out, n_tiles, M, NC: tl.constexpr, BR: tl.constexpr, NP: tl.constexpr):
    """Case 7, persistent: tile t copies row block blocks[t]: out block t = X block blocks[t]."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    for t in range(pid, n_tiles, NP):
        b = tl.load(blocks + t)
        rows = b * BR + tl.arange(0, BR)
        v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        tl.store(out + (t * BR + tl.arange(0, BR))[:, None] * NC + c[None, :], v)


# -- case 8: persistent loops the tile remap does not fit --------------------------------------------


@triton.jit
def while_own_end(X, out, n_tiles, M, NC: tl.constexpr, BR: tl.constexpr, PER: tl.constexpr):
    """A contiguous run of tiles per program, `while tile < end` with an end of its own: out = 2 X."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    tile = pid * PER
    end = tl.minimum(tile + PER, n_tiles)
    while tile < end:
        rows = tile * BR + tl.arange(0, BR)
        v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        tl.store(out + rows[:, None] * NC + c[None, :], v * 2.0, mask=rows[:, None] < M)
        tile += 1


@triton.jit
def swizzled_tiles(X, out, n_tiles, M, NC: tl.constexpr, BR: tl.constexpr, NP: tl.constexpr, G: tl.constexpr):
    """`for i in range(my_tiles): tile = pid + i * NP` with an inline swizzle: out = 2 X + 1."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    my_tiles = tl.cdiv(n_tiles - pid, NP)
    for i in range(my_tiles):
        tile = pid + i * NP
        blk = (tile % G) * (n_tiles // G) + tile // G
        rows = blk * BR + tl.arange(0, BR)
        v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        tl.store(out + rows[:, None] * NC + c[None, :], v * 2.0 + 1.0, mask=rows[:, None] < M)


@triton.jit
def prefetch_next(X, out, n_tiles, M, NC: tl.constexpr, BR: tl.constexpr, NP: tl.constexpr):
    """Each iteration loads the next tile's block before storing its own: out = 2 X."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    first = pid * BR + tl.arange(0, BR)
    lim = n_tiles * BR
    nxt = tl.load(X + first[:, None] * NC + c[None, :], mask=(first[:, None] < M) & (first[:, None] < lim), other=0.0)
    for tile in range(pid, n_tiles, NP):
        cur = nxt
        ahead = (tile + NP) * BR + tl.arange(0, BR)
        nxt = tl.load(X + ahead[:, None] * NC + c[None, :], mask=(ahead[:, None] < M) & (ahead[:, None] < lim), other=0.0)
        rows = tile * BR + tl.arange(0, BR)
        tl.store(out + rows[:, None] * NC + c[None, :], cur * 2.0, mask=rows[:, None] < M)


@triton.jit
def stream_k(X, out, total, M, NC: tl.constexpr, BR: tl.constexpr, KS: tl.constexpr, NP: tl.constexpr):
    """Stream-K over (tile, k) steps: step s reads row block s, tile t sums blocks t*KS .. t*KS + KS - 1
    (out, zeroed, receives each program's partial sums by atomics)."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    per = tl.cdiv(total, NP)
    start = pid * per
    end = tl.minimum(start + per, total)
    acc = tl.zeros([BR, NC], dtype=tl.float32)
    for it in range(start, end):
        rows = it * BR + tl.arange(0, BR)
        acc += tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0).to(tl.float32)
        if (it % KS == KS - 1) | (it == end - 1):
            t = it // KS
            tl.atomic_add(out + (t * BR + tl.arange(0, BR))[:, None] * NC + c[None, :], acc)
            acc = tl.zeros([BR, NC], dtype=tl.float32)


@triton.jit
def persistent_wrapped(X, out, n_tiles, M, NC: tl.constexpr, BR: tl.constexpr, NP: tl.constexpr):
    """A persistent loop whose tile reads its block and the next one, wrapped (case 4 inside case 8):
    out block t = X block t + X block (t + 1) % n_tiles; the wait goes inside the inner loop."""
    pid = tl.program_id(0)
    c = tl.arange(0, NC)
    for t in range(pid, n_tiles, NP):
        acc = tl.zeros([BR, NC], dtype=tl.float32)
        for i in range(2):
            rows = ((t + i) % n_tiles) * BR + tl.arange(0, BR)
            acc += tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0).to(tl.float32)
        tl.store(out + (t * BR + tl.arange(0, BR))[:, None] * NC + c[None, :], acc)
