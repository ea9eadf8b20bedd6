"""Tutorial-style matmul: one program axis, tiles grouped along M for L2 reuse."""
import triton
import triton.language as tl


@triton.jit
def swizzled_mm(left, right, dst, n_rows, n_cols, depth,
                l_r, l_c, r_r, r_c, d_r, d_c,
                BR: tl.constexpr, BC: tl.constexpr, BD: tl.constexpr, SWZ: tl.constexpr):
    me = tl.program_id(axis=0)
    nr = tl.cdiv(n_rows, BR)
    nc = tl.cdiv(n_cols, BC)
    band = SWZ * nc
    which = me // band
    top = which * SWZ
    height = min(nr - top, SWZ)
    br = top + ((me % band) % height)
    bc = (me % band) // height
    ir = (br * BR + tl.arange(0, BR)) % n_rows
    ic = (bc * BC + tl.arange(0, BC)) % n_cols
    idep = tl.arange(0, BD)
    lptr = left + (ir[:, None] * l_r + idep[None, :] * l_c)
    rptr = right + (idep[:, None] * r_r + ic[None, :] * r_c)
    total = tl.zeros((BR, BC), dtype=tl.float32)
    for step in range(0, tl.cdiv(depth, BD)):
        lv = tl.load(lptr, mask=idep[None, :] < depth - step * BD, other=0.0)
        rv = tl.load(rptr, mask=idep[:, None] < depth - step * BD, other=0.0)
        total = tl.dot(lv, rv, total)
        lptr += BD * l_c
        rptr += BD * r_r
    outr = br * BR + tl.arange(0, BR)
    outc = bc * BC + tl.arange(0, BC)
    tl.store(dst + outr[:, None] * d_r + outc[None, :] * d_c, total.to(dst.dtype.element_ty),
             mask=(outr[:, None] < n_rows) & (outc[None, :] < n_cols))
