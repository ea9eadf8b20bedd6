"""A GEMM whose output goes out through a tensor descriptor (TMA stores on sm_90), reduce-scattered."""
import triton
import triton.language as tl


@triton.jit
def gemm_desc_out(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    if pid_n * BN >= N:
        return  # a grid padded past the last column block
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(a_desc.load([pid_m * BM, k * BK]), b_desc.load([k * BK, pid_n * BN]), acc)
    # the tile's block of C
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(C.dtype.element_ty))
