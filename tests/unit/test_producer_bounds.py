

DESC = '''\
import triton
import triton.language as tl


@triton.jit
def desc_wrapped(X, C, M, N, SHIFT, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    for i in range(T):
        row = (pid * T * BM + i * BM + SHIFT) % M
        x = tl.load(X + row * N + tl.arange(0, BN))
        c_desc.store([row, 0], x[None, :] + tl.zeros([BM, BN], dtype=tl.float32))
'''


def test_a_descriptor_store_at_wrapped_rows_is_taken_at_the_store():
    t = transform(find_kernel(DESC, "desc.py", "desc_wrapped"), Schedule(pattern="reduce_scatter", tensor="C"))
    assert "taken at the store, announced after the last store" in t.stages["fused"]
    probe = t.stages["probe"]
    loop = probe.index("for i in range(T)")
    assert probe.index("syncopy_device.desc_chunk_range(", loop) > loop and "tl.load(X" not in probe
