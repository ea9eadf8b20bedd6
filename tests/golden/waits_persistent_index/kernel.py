import triton
import triton.language as tl


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
