"""Producer kernels whose store rows the analysis must prove before it bounds them (issue 30, C).
Each writes every row r < M of its output C (M x N), C[r, :] = 2 A[r, :] + 1 (a row written twice gets
the same value twice), so the result of a
reduce_scatter / all_reduce is known; they differ in how a program's rows are written:

    mod_rows            one store, rows (pid * BM + SHIFT + i) % M: bounded at the store (exact)
    mod_rows_loop       T stores in a loop strided over the programs, rows wrapping with % M: not affine,
                        taken at each store
    floordiv_rows_loop  a loop whose rows use //: not affine, taken at each store
    loaded_rows_loop    a loop whose rows are loaded from a permutation: taken at each store
    mixed_corner        two nested loops, rows i * Q - j * S: extremes at the mixed corners (proven)
    mixed_corner_masked the same with a mask that changes with the loops (dropped, rows clamped)
    masked_tail_loop    one loop, the last iterations of the last program fully masked (issue 10 case 1)
    while_rows          a while loop that steps its rows by hand: taken at each store
    early_return_loop   returns from inside a wrapping loop after some stores (the interpreter runs it;
                        compiled Triton refuses a return inside a loop)
    helper_rows         hands C to a helper that stores one block (followed: its rows are bounded)
    helper_wrapped_loop hands C to a helper whose loop wraps its rows with % (every chunk)
    kept_return         program 0 returns between its two stores from an `if` the probe keeps (it assigns
                        rows, which the second store uses): rows M/2 .. M/2 + BM - 1 stay unwritten
"""
import triton
import triton.language as tl


@triton.jit
def _value(A, rows, cols, N, keep):
    a = tl.load(A + rows[:, None] * N + cols[None, :], mask=keep, other=0.0)
    return a * 2.0 + 1.0


@triton.jit
def mod_rows(A, C, M, N, SHIFT, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    rows = (pid * BM + SHIFT + tl.arange(0, BM)) % M
    cols = tl.arange(0, BN)
    keep = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)


@triton.jit
def mod_rows_loop(A, C, M, N, SHIFT, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BN)
    for i in range(T):
        rows = (pid * BM + i * tl.num_programs(0) * BM + SHIFT + tl.arange(0, BM)) % M
        keep = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)


@triton.jit
def floordiv_rows_loop(A, C, M, N, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BN)
    for i in range(T):
        rows = pid * T * BM + (i * 2 * BM + 2 * tl.arange(0, BM)) // 2
        keep = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)


@triton.jit
def loaded_rows_loop(A, C, perm, M, N, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BN)
    for i in range(T):
        at = pid * T * BM + i * BM + tl.arange(0, BM)
        rows = tl.load(perm + at, mask=at < M, other=0)
        keep = (at[:, None] < M) & (cols[None, :] < N)
        tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)


@triton.jit
def mixed_corner(A, C, M, N, I: tl.constexpr, J: tl.constexpr, Q: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BN)
    for i in range(I):
        for j in range(J):
            rows = pid * I * J * Q + (J - 1) * I * Q - j * I * Q + i * Q + tl.arange(0, Q)
            keep = cols[None, :] < N
            tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)


@triton.jit
def mixed_corner_masked(A, C, M, N, I: tl.constexpr, J: tl.constexpr, Q: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BN)
    for i in range(I):
        for j in range(J):
            rows = pid * I * J * Q + (J - 1) * I * Q - j * I * Q + i * Q + tl.arange(0, Q)
            keep = (rows[:, None] < M) & (cols[None, :] < N)
            tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)


@triton.jit
def masked_tail_loop(A, C, M, N, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BN)
    for i in range(T):
        rows = pid * T * BM + i * BM + tl.arange(0, BM)
        keep = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)


@triton.jit
def while_rows(A, C, M, N, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BN)
    r0 = pid * T * BM
    while r0 < (pid + 1) * T * BM:
        rows = r0 + tl.arange(0, BM)
        keep = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)
        r0 += BM


@triton.jit
def early_return_loop(A, C, M, N, SHIFT, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BN)
    for i in range(T):
        rows = (pid * T * BM + i * BM + SHIFT + tl.arange(0, BM)) % M
        keep = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)
        if pid * T * BM + (i + 1) * BM >= M:
            return


@triton.jit
def _put(C, rows, cols, N, v, keep):
    tl.store(C + rows[:, None] * N + cols[None, :], v, mask=keep)


@triton.jit
def helper_rows(A, C, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    keep = (rows[:, None] < M) & (cols[None, :] < N)
    _put(C, rows, cols, N, _value(A, rows, cols, N, keep), keep)


@triton.jit
def _put_wrapped(A, C, pid, M, N, SHIFT, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    cols = tl.arange(0, BN)
    for i in range(T):
        rows = (pid * BM + i * tl.num_programs(0) * BM + SHIFT + tl.arange(0, BM)) % M
        keep = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)


@triton.jit
def helper_wrapped_loop(A, C, M, N, SHIFT, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    _put_wrapped(A, C, pid, M, N, SHIFT, T, BM, BN)


@triton.jit
def kept_return(A, C, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    keep = (rows[:, None] < M // 2) & (cols[None, :] < N)
    tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)
    if pid == 0:
        rows = rows + M // 2
        return
    rows = rows + M // 2
    keep = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(C + rows[:, None] * N + cols[None, :], _value(A, rows, cols, N, keep), mask=keep)
