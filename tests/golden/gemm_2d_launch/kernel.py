import triton
import triton.language as tl


@triton.jit
def tiled_product(P, Q, R, m_size, n_size, k_size, p0, p1, q0, q1, r0, r1,
                  TILE_A: tl.constexpr, TILE_B: tl.constexpr, TILE_K: tl.constexpr):
    ta = tl.program_id(0)
    tb = tl.program_id(1)
    ia = ta * TILE_A + tl.arange(0, TILE_A)
    ib = tb * TILE_B + tl.arange(0, TILE_B)
    out = tl.zeros((TILE_A, TILE_B), dtype=tl.float32)
    for k0 in range(0, k_size, TILE_K):
        ik = k0 + tl.arange(0, TILE_K)
        pv = tl.load(P + ia[:, None] * p0 + ik[None, :] * p1)
        qv = tl.load(Q + ik[:, None] * q0 + ib[None, :] * q1)
        out += tl.dot(pv, qv)
    tl.store(R + ia[:, None] * r0 + ib[None, :] * r1, out)
