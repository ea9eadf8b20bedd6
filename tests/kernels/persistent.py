"""Persistent GEMMs the way users write them for Hopper: programs loop over tiles, A is read through a
tensor descriptor or pointers, tile coordinates come from a @triton.jit helper. Names are the
users' own (none of them is what syncopy looks for). C = A @ B, A is M x K, B is K x N.

    sweep_tiles      for-loop over tiles, descriptors, `cell_of` helper returns (row block, col block)
    tutorial_ws      triton's 09-persistent-matmul (descriptor version): tl.range(..., flatten=True),
                     B given as N x K, and a second counter `tile_id_c` for the epilogue
    rolling_tiles    while loop with the counter stepped at the end, pointer loads
    stepping_first   while loop that steps its counter first and tests it: waits per tile, not remapped
    flat_k_steps     one flat loop of K steps x tiles, the tile starts inside `if ki == 0:`, pointers
    flat_k_desc      the same flat loop reading A through a descriptor
"""
import triton
import triton.language as tl


@triton.jit
def cell_of(job, rows_of_cells, cols_of_cells, BAND: tl.constexpr):
    per_band = BAND * cols_of_cells
    band = job // per_band
    top = band * BAND
    height = min(rows_of_cells - top, BAND)
    return top + (job % height), (job % per_band) // height


@triton.jit
def sweep_tiles(X, W, Y, rows, cols, depth, TR: tl.constexpr, TC: tl.constexpr, TD: tl.constexpr,
                BAND: tl.constexpr, WORKERS: tl.constexpr):
    xd = tl.make_tensor_descriptor(X, shape=[rows, depth], strides=[depth, 1], block_shape=[TR, TD])
    wd = tl.make_tensor_descriptor(W, shape=[depth, cols], strides=[cols, 1], block_shape=[TD, TC])
    yd = tl.make_tensor_descriptor(Y, shape=[rows, cols], strides=[cols, 1], block_shape=[TR, TC])
    me = tl.program_id(0)
    rcells = tl.cdiv(rows, TR)
    ccells = tl.cdiv(cols, TC)
    for job in range(me, rcells * ccells, WORKERS):
        rb, cb = cell_of(job, rcells, ccells, BAND)
        r0 = rb * TR
        c0 = cb * TC
        total = tl.zeros((TR, TC), dtype=tl.float32)
        for d in range(0, tl.cdiv(depth, TD)):
            total = tl.dot(xd.load([r0, d * TD]), wd.load([d * TD, c0]), total)
        yd.store([r0, c0], total.to(Y.dtype.element_ty))


@triton.jit
def _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def tutorial_ws(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    dtype = c_ptr.dtype.element_ty
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n

    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_SIZE_N, BLOCK_SIZE_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_N])

    # tile_id_c is used in the epilogue to break the dependency between
    # the prologue and the epilogue
    tile_id_c = start_pid - NUM_SMS
    num_pid_in_group = GROUP_SIZE_M * num_pid_n

    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_am = pid_m * BLOCK_SIZE_M
        offs_bn = pid_n * BLOCK_SIZE_N

        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_bn, offs_k])
            accumulator = tl.dot(a, b.T, accumulator)

        tile_id_c += NUM_SMS
        pid_m, pid_n = _compute_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_cm = pid_m * BLOCK_SIZE_M
        offs_cn = pid_n * BLOCK_SIZE_N
        c = accumulator.to(dtype)
        c_desc.store([offs_cm, offs_cn], c)


@triton.jit
def rolling_tiles(P, Q, R, m, n, k, sp0, sp1, sq0, sq1, sr0, sr1,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, LANES: tl.constexpr):
    cur = tl.program_id(0)
    across = tl.cdiv(n, BN)
    jobs = tl.cdiv(m, BM) * across
    while cur < jobs:
        bi = cur // across
        bj = cur % across
        ri = bi * BM + tl.arange(0, BM)
        rj = bj * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(0, tl.cdiv(k, BK)):
            p = tl.load(P + ri[:, None] * sp0 + (kk * BK + rk[None, :]) * sp1,
                        mask=(ri[:, None] < m) & (kk * BK + rk[None, :] < k), other=0.0)
            q = tl.load(Q + (kk * BK + rk[:, None]) * sq0 + rj[None, :] * sq1,
                        mask=(kk * BK + rk[:, None] < k) & (rj[None, :] < n), other=0.0)
            acc = tl.dot(p, q, acc)
        tl.store(R + ri[:, None] * sr0 + rj[None, :] * sr1, acc.to(R.dtype.element_ty),
                 mask=(ri[:, None] < m) & (rj[None, :] < n))
        cur += LANES


@triton.jit
def stepping_first(P, Q, R, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, LANES: tl.constexpr):
    across = tl.cdiv(n, BN)
    cur = tl.program_id(0) - LANES
    while cur < tl.cdiv(m, BM) * across - LANES:
        cur += LANES
        ri = (cur // across) * BM + tl.arange(0, BM)
        rj = (cur % across) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(0, tl.cdiv(k, BK)):
            p = tl.load(P + ri[:, None] * k + kk * BK + rk[None, :], mask=(ri[:, None] < m) & (kk * BK + rk[None, :] < k), other=0.0)
            q = tl.load(Q + (kk * BK + rk[:, None]) * n + rj[None, :], mask=(kk * BK + rk[:, None] < k) & (rj[None, :] < n), other=0.0)
            acc = tl.dot(p, q, acc)
        tl.store(R + ri[:, None] * n + rj[None, :], acc.to(R.dtype.element_ty), mask=(ri[:, None] < m) & (rj[None, :] < n))


@triton.jit
def flat_k_steps(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                 GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n
    tiles_per_SM = num_tiles // NUM_SMS
    if start_pid < num_tiles % NUM_SMS:
        tiles_per_SM += 1
    tile_id = start_pid - NUM_SMS
    ki = -1
    offs_k_for_mask = tl.arange(0, BLOCK_SIZE_K)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    pid_m = 0
    pid_n = 0
    offs_am = tl.arange(0, BLOCK_SIZE_M)
    offs_bn = tl.arange(0, BLOCK_SIZE_N)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for _ in range(0, k_tiles * tiles_per_SM):
        ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
        if ki == 0:
            tile_id += NUM_SMS
            group_id = tile_id // num_pid_in_group
            first_pid_m = group_id * GROUP_SIZE_M
            group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
            pid_m = first_pid_m + (tile_id % group_size_m)
            pid_n = (tile_id % num_pid_in_group) // group_size_m
            start_m = pid_m * BLOCK_SIZE_M
            start_n = pid_n * BLOCK_SIZE_N
            offs_am = start_m + tl.arange(0, BLOCK_SIZE_M)
            offs_bn = start_n + tl.arange(0, BLOCK_SIZE_N)
            offs_am = tl.where(offs_am < M, offs_am, 0)
            offs_bn = tl.where(offs_bn < N, offs_bn, 0)
        offs_k = ki * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        a = tl.load(a_ptrs, mask=offs_k_for_mask[None, :] < K - ki * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k_for_mask[:, None] < K - ki * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        if ki == k_tiles - 1:
            offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
            c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
            tl.store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask=c_mask)
            accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)


@triton.jit
def flat_k_desc(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SMS: tl.constexpr):
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
    for _ in range(0, k_tiles * mine):
        ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
        if ki == 0:
            tile += SMS
            om = (tile // grid_n) * BM
            on = (tile % grid_n) * BN
        a = a_desc.load([om, ki * BK])
        b = b_desc.load([ki * BK, on])
        acc = tl.dot(a, b, acc)
        if ki == k_tiles - 1:
            c_desc.store([om, on], acc.to(C.dtype.element_ty))
            acc = tl.zeros((BM, BN), dtype=tl.float32)
