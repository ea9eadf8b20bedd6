"""Producer kernels (reduce_scatter / all_reduce of their output C) written the way people write them,
each touching its output in a way that a fused producer must reproduce exactly as the local kernel on
the user's C does (issue 10, cases 9-12). Every kernel computes C from A (M x K) @ B (K x N), row-major.

    splitk_atomic      split-K: programs (m, n, s) each add their K slice with tl.atomic_add
    partial_grid       writes rows < MW and columns < NW only; the rest of C is left as it was
    accumulate         C += A @ B: reads its output before it stores
    lower_triangular   tiles above the diagonal return before their store
    rows_by_index      tile rows come from a loaded permutation (store addresses depend on data)
    skip_by_flag       a tile returns early when its loaded flag says so (the store set depends on data)
    scatter_add_rows   MoE-combine style: tl.atomic_add into rows a loaded index names (repeats, gaps)
"""
import triton
import triton.language as tl


@triton.jit
def _dot_tile(A, B, rows, cols, M, N, K, k_lo, k_hi, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    offs_k = tl.arange(0, BK)
    for k in range(k_lo, k_hi, BK):
        a = tl.load(A + rows[:, None] * K + (k + offs_k)[None, :], mask=(rows[:, None] < M) & ((k + offs_k)[None, :] < k_hi), other=0.0)
        b = tl.load(B + (k + offs_k)[:, None] * N + cols[None, :], mask=((k + offs_k)[:, None] < k_hi) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def splitk_atomic(A, B, C, M, N, K, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    s = tl.program_id(2)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    per = tl.cdiv(K, SPLIT)
    acc = _dot_tile(A, B, rows, cols, M, N, K, s * per, tl.minimum(K, (s + 1) * per), BM, BN, BK)
    c_ptrs = C + rows[:, None] * N + cols[None, :]
    tl.atomic_add(c_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def partial_grid(A, B, C, M, N, K, MW, NW, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    acc = _dot_tile(A, B, rows, cols, M, N, K, 0, K, BM, BN, BK)
    c_ptrs = C + rows[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc, mask=(rows[:, None] < MW) & (cols[None, :] < NW))


@triton.jit
def accumulate(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    keep = (rows[:, None] < M) & (cols[None, :] < N)
    c_ptrs = C + rows[:, None] * N + cols[None, :]
    c = tl.load(c_ptrs, mask=keep, other=0.0)
    acc = _dot_tile(A, B, rows, cols, M, N, K, 0, K, BM, BN, BK)
    tl.store(c_ptrs, c + acc, mask=keep)


@triton.jit
def lower_triangular(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_n > pid_m:
        return
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    acc = _dot_tile(A, B, rows, cols, M, N, K, 0, K, BM, BN, BK)
    c_ptrs = C + rows[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def rows_by_index(A, B, C, perm, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    acc = _dot_tile(A, B, rows, cols, M, N, K, 0, K, BM, BN, BK)
    dest = tl.load(perm + rows, mask=rows < M, other=0)
    c_ptrs = C + dest[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def skip_by_flag(A, B, C, skip, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if tl.load(skip + pid_m * tl.num_programs(1) + pid_n) != 0:
        return
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    acc = _dot_tile(A, B, rows, cols, M, N, K, 0, K, BM, BN, BK)
    c_ptrs = C + rows[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def scatter_add_rows(A, B, C, dest, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    acc = _dot_tile(A, B, rows, cols, M, N, K, 0, K, BM, BN, BK)
    to = tl.load(dest + rows, mask=rows < M, other=0)
    tl.atomic_add(C + to[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))
