"""AllToAll-GEMM's local kernel (MoE experts): each block of `tokens_per_block` token rows holds
`tokens_per_block // tokens_per_expert` groups of rows, one per local expert, and every row is
multiplied by its expert's weight: Y[row] = X[row] @ W[expert(row)]."""
import triton
import triton.language as tl


@triton.jit
def expert_gemm_kernel(X, Wt, Y, M, N, K, tokens_per_block, tokens_per_expert,
                       stride_xm, stride_xk, stride_we, stride_wk, stride_wn, stride_ym, stride_yn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    # A tile never straddles two experts: BLOCK_M divides tokens_per_expert.
    expert = ((pid_m * BLOCK_M) % tokens_per_block) // tokens_per_expert
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = X + rm[:, None] * stride_xm + rk[None, :] * stride_xk
    w_ptrs = Wt + expert * stride_we + rk[:, None] * stride_wk + rn[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        x = tl.load(x_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BLOCK_K), other=0.0)
        w = tl.load(w_ptrs, mask=(rk[:, None] < K - k * BLOCK_K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    tl.store(Y + rm[:, None] * stride_ym + rn[None, :] * stride_yn, acc.to(Y.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))
