"""AllToAll-GEMM's local kernel (MoE experts), a grouped GEMM: the received token rows come grouped
by local expert, and a table lists the tiles, each a run of at most BLOCK_M rows of one expert:
tiles[3t : 3t + 3] = (first row, end of that expert's run of rows, expert). Every row is multiplied
by its expert's weight: Y[row] = X[row] @ W[expert(row)]. The table follows the routing, so a run
may hold any number of rows, zero included (it then has no tile)."""
import triton
import triton.language as tl


@triton.jit
def expert_gemm_kernel(X, Wt, Y, tiles, N, K,
                       stride_xm, stride_xk, stride_we, stride_wk, stride_wn, stride_ym, stride_yn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    # A tile never straddles two experts: its rows end at its expert's run of rows.
    row0 = tl.load(tiles + 3 * pid_m)
    row_end = tl.load(tiles + 3 * pid_m + 1)
    expert = tl.load(tiles + 3 * pid_m + 2)
    rm = row0 + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = X + rm[:, None] * stride_xm + rk[None, :] * stride_xk
    w_ptrs = Wt + expert * stride_we + rk[:, None] * stride_wk + rn[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        x = tl.load(x_ptrs, mask=(rm[:, None] < row_end) & (rk[None, :] < K - k * BLOCK_K), other=0.0)
        w = tl.load(w_ptrs, mask=(rk[:, None] < K - k * BLOCK_K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    tl.store(Y + rm[:, None] * stride_ym + rn[None, :] * stride_yn, acc.to(Y.dtype.element_ty),
             mask=(rm[:, None] < row_end) & (rn[None, :] < N))
