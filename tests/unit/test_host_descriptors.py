"""Issue 31 item 2: tensor descriptors made on the host (`triton.tools.tensor_descriptor.TensorDescriptor`)
as the communicated argument. The kernel that reads its descriptor parameter directly waits per chunk
from the descriptor's own geometry (exact rewritten source); the launch binds the shard the descriptor
wraps and hands the kernel one over the gathered tensor; what cannot be remade so is refused in one
line. Worlds: tests/world/test_host_descriptors.py; PTX for sm_90: tests/ptx/test_host_descriptors_ptx.py."""
from __future__ import annotations

import textwrap

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import syncopy
from syncopy.errors import InferenceError, LaunchError
from syncopy.frontend.source import find_kernel
from syncopy.passes import read_check, transform
from syncopy.runtime.launch import host_descriptors
from syncopy.schedule import Schedule

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def kern(Xd, out, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    v = Xd.load([pid * BR, 0])
    tl.store(out + (pid * BR + tl.arange(0, BR))[:, None] * NC + tl.arange(0, NC)[None, :], v)
"""

WAIT = ("syncopy_device.desc_chunk_range(Xd, pid * BR, Xd.block_shape[0], Xd.shape[0], Xd.strides[0], Xd.strides[0] - 1, "
        "Xd, syncopy_ctx)")

FUSED = f"""

@triton.jit
def kern(Xd, out, NC: tl.constexpr, BR: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, SYNCOPY_ASYNC_PROXY: tl.constexpr):
    # syncopy: run tiles in chunk-arrival order
    syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
    pid = syncopy_pid0
    # syncopy: wait for the chunks of Xd this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = {WAIT}
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.async_proxy_acquire(SYNCOPY_ASYNC_PROXY)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    v = Xd.load([pid * BR, 0])
    tl.store(out + (pid * BR + tl.arange(0, BR))[:, None] * NC + tl.arange(0, NC)[None, :], v)
"""


def _transformed(text: str, dim: int = 0):
    return transform(find_kernel(textwrap.dedent(text), "kern.py", "kern"), Schedule(pattern="all_gather", tensor="Xd", dim=dim))


def _where(text: str, needle: str) -> tuple[int, int]:
    lines = textwrap.dedent(text).splitlines()
    row = next(i for i, line in enumerate(lines) if needle in line)
    return row + 1, lines[row].index(needle) + 1


# --- the transform -----------------------------------------------------------------------------------

def test_a_descriptor_parameter_waits_from_its_own_geometry():
    assert _transformed(KERNEL).stages["fused"] == FUSED


def test_checked_mode_checks_reads_through_a_host_descriptor():
    checked = read_check.apply(_transformed(KERNEL)).stages["fused"]
    assert ("    # syncopy: checked: the chunks of Xd this read touches have arrived\n"
            "    syncopy_device.check_desc_read(syncopy_signals, syncopy_ctx, Xd, pid * BR, Xd.block_shape[0], Xd.shape[0], "
            "Xd.strides[0], Xd.strides[0] - 1, Xd, 9)\n    v = Xd.load([pid * BR, 0])\n") in checked


def test_a_helper_handed_the_descriptor_waits_before_the_call_in_the_callers_names():
    text = KERNEL.replace("    v = Xd.load([pid * BR, 0])", "    v = rows_of(Xd, pid * BR)").replace(
        "@triton.jit\ndef kern", "@triton.jit\ndef rows_of(d, row):\n    return d.load([row, 0])\n\n\n@triton.jit\ndef kern")
    fused = _transformed(text).stages["fused"]
    wait = WAIT.replace("Xd, pid * BR,", "Xd, (pid * BR),")
    assert f"        syncopy_lo, syncopy_hi = {wait}\n" in fused
    assert fused.index(wait) < fused.index("    v = rows_of(Xd, pid * BR)") and "SYNCOPY_ASYNC_PROXY: tl.constexpr" in fused


def test_a_descriptor_a_helper_makes_waits_in_the_callers_names():
    # The helper's own names (Y, MM, NCC, BRR) mean nothing where the wait goes, before the call.
    text = """
    import triton
    import triton.language as tl


    @triton.jit
    def rows_of(Y, row, MM, NCC: tl.constexpr, BRR: tl.constexpr):
        d = tl.make_tensor_descriptor(Y, shape=[MM, NCC], strides=[NCC, 1], block_shape=[BRR, NCC])
        return d.load([row, 0])


    @triton.jit
    def kern(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
        pid = tl.program_id(0)
        v = rows_of(X, pid * BR, M, NC, BR)
        tl.store(out + pid, tl.sum(tl.sum(v, axis=1), axis=0))
    """
    t = transform(find_kernel(textwrap.dedent(text), "kern.py", "kern"), Schedule(pattern="all_gather", tensor="X"))
    assert ("        syncopy_lo, syncopy_hi = syncopy_device.desc_chunk_range(X, (pid * BR), BR, M, NC, (NC - 1), X, "
            "syncopy_ctx)\n") in t.stages["fused"]


def test_a_reassigned_descriptor_parameter_is_refused_where_it_is_read():
    text = KERNEL.replace("    pid = tl.program_id(0)\n", "    pid = tl.program_id(0)\n    Xd = Xd\n")
    with pytest.raises(InferenceError) as info:
        _transformed(text)
    line, col = _where(text, "Xd.load(")
    assert str(info.value) == (f"kern.py:{line}:{col}: 'Xd' is read as a tensor descriptor made on the host but the kernel "
                               "assigns 'Xd' too, so syncopy cannot tell which descriptor a read uses; read the one handed in "
                               "under its own name")


def test_a_host_descriptor_sharded_along_another_dim_is_refused():
    with pytest.raises(InferenceError) as info:
        _transformed(KERNEL, dim=1)
    line, col = _where(KERNEL, "Xd.load(")
    assert str(info.value) == (f"kern.py:{line}:{col}: 'Xd' is a tensor descriptor made on the host but the schedule shards "
                               "dim 1; syncopy gathers host descriptors along their dim 0 only, so shard dim 0 (make the "
                               "descriptor's rows the sharded dim)")


# --- the launch --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def attention():
    from tests.kernels.attention_host_descriptors import attn_host_desc_inline

    return syncopy.overlap({"pattern": "all_gather", "tensor": ["desc_k", "desc_v"], "chunks_per_rank": 2})(attn_host_desc_inline)


def _args(k: TensorDescriptor, v: TensorDescriptor | None = None):
    q, out = torch.zeros(64, 16), torch.zeros(64, 16)
    dq, do = (TensorDescriptor(t, [64, 16], [16, 1], [16, 16]) for t in (q, out))
    v = v if v is not None else TensorDescriptor(torch.zeros(k.base.shape), [32, 16], [16, 1], [16, 16])
    return (0.25, torch.zeros(64), 1, 1, dq, k, v, do, 64), dict(HEAD_DIM=16, BLOCK_M=16, BLOCK_N=16)


def test_the_launch_binds_the_shard_and_hands_the_kernel_a_descriptor_over_the_gathered_tensor(attention):
    k = torch.randn(2, 16, 16)  # [Z, rows, D] flattened by the descriptor to [32, 16]
    dk = TensorDescriptor(k, [32, 16], [16, 1], [16, 16], padding="nan")
    args, kwargs = _args(dk)
    call = attention.binder.bind(args, kwargs)
    assert call.shard is k and call.arguments["desc_k"] is k and call.arguments["desc_q"] is args[4]
    assert list(call.descriptors) == ["desc_k", "desc_v"] and call.descriptors["desc_k"] is dk
    gathered = torch.randn(4, 16, 16)
    made = host_descriptors.rewrapped({**call.arguments, "desc_k": gathered}, {"desc_k": dk})["desc_k"]
    assert (made.base is gathered, made.shape, made.strides, made.block_shape, made.padding) == (
        True, [64, 16], [16, 1], [16, 16], "nan")


def test_a_launch_shape_with_descriptors_is_a_key(attention):
    args, kwargs = _args(TensorDescriptor(torch.zeros(32, 16), [32, 16], [16, 1], [16, 16]))
    named = dict(zip(attention.signature.parameters, args), **kwargs)
    key = attention.orders.shape_key((4, 1), named)
    assert hash(key) == hash(attention.orders.shape_key((4, 1), dict(named)))
    assert dict(key[1])["desc_q"] == ("TensorDescriptor", (64, 16), (16, 1), (16, 16), "zero", torch.float32)


@pytest.mark.parametrize(("desc", "shape", "strides"), [
    (lambda k: TensorDescriptor(k, [16, 16], [16, 1], [16, 16]), [16, 16], [16, 1]),  # half the shard
    (lambda k: TensorDescriptor(k, [64, 8], [16, 1], [16, 8]), [64, 8], [16, 1]),     # as many elements, rows that overlap
], ids=["part", "overlapping"])
def test_a_descriptor_that_is_not_the_whole_shard_row_major_is_one_line(attention, desc, shape, strides):
    k = torch.zeros(32, 16)
    args, kwargs = _args(desc(k))
    with pytest.raises(LaunchError) as info:
        attention.binder.bind(args, kwargs)
    assert str(info.value) == (
        f"launch of 'attn_host_desc_inline': 'desc_k' is a TensorDescriptor with shape {shape} and strides {strides} over a "
        "shard of shape [32, 16]; syncopy remakes it over the gathered tensor only where it covers the whole contiguous "
        "shard row-major: pass TensorDescriptor(desc_k_shard, shape=[32, 16], strides=[16, 1], block_shape=...)")


def test_a_descriptor_over_a_strided_view_is_one_line(attention):
    k = torch.zeros(32, 32)[:, :16]
    with pytest.raises(LaunchError) as info:
        attention.binder.bind(*_args(TensorDescriptor(k, [32, 16], [32, 1], [16, 16])))
    assert str(info.value).startswith("launch of 'attn_host_desc_inline': 'desc_k' is a TensorDescriptor with shape "
                                      "[32, 16] and strides [32, 1] over a shard of shape [32, 16]; syncopy remakes it")


def test_a_producer_output_as_a_descriptor_is_one_line():
    from tests.kernels.attention_host_descriptors import attn_host_desc_inline

    op = syncopy.overlap({"pattern": "reduce_scatter", "tensor": "desc_o", "chunks_per_rank": 1})(attn_host_desc_inline)
    args, kwargs = _args(TensorDescriptor(torch.zeros(32, 16), [32, 16], [16, 1], [16, 16]))
    with pytest.raises(LaunchError) as info:
        op.binder.bind(args, kwargs)
    assert str(info.value) == ("launch of 'attn_host_desc_inline': 'desc_o' is a TensorDescriptor, but reduce_scatter "
                               "writes 'desc_o' through a buffer of syncopy's; pass the output tensor and make its "
                               "descriptor in the kernel with tl.make_tensor_descriptor")


def test_a_descriptor_where_a_plain_argument_goes_is_taken_as_triton_takes_it(attention):
    # desc_q and desc_o are not communicated: they reach the kernel as passed (no "cannot take" refusal).
    args, kwargs = _args(TensorDescriptor(torch.zeros(32, 16), [32, 16], [16, 1], [16, 16]))
    call = attention.binder.bind(args, kwargs)
    assert call.arguments["desc_o"] is args[7]
