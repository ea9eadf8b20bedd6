import triton
import triton.language as tl


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
