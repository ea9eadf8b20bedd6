"""The communicated tensor as the kernel sees it (issue 30, E and F).

E: an all-gathered input is read-only: a store into it, made by the kernel or by a @triton.jit helper
it is handed to (at any depth, whether or not inference can follow the helper's rows), is refused
before the first launch in one located line; the refusal is never swallowed into the "wait for
every chunk" fallback, whose peers would then send the modified rows on.
F: its strides are the gathered tensor's (reduce_scatter: the full partial's), not the shard's."""
from __future__ import annotations

import textwrap

import pytest

from syncopy.errors import KernelError
from syncopy.frontend.source import find_kernel
from syncopy.passes import transform
from syncopy.schedule import Schedule

HEAD = '''\
import triton
import triton.language as tl
'''

# A running max written back into the gathered tensor through a helper (the case); the
# kernel's own reads are plain rows of A.
HELPER_STORES = HEAD + '''

@triton.jit
def keep_max(row_ptr, acc, N, BN: tl.constexpr):
    cols = tl.arange(0, BN)
    tl.store(row_ptr + cols, tl.maximum(acc, tl.load(row_ptr + cols, mask=cols < N)), mask=cols < N)


@triton.jit
def rowmax(A, Y, N, BN: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.load(A + row * N + tl.arange(0, BN), mask=tl.arange(0, BN) < N, other=0.0)
    keep_max(A + row * N, acc, N, BN)
    tl.store(Y + row, tl.max(acc, axis=0))
'''

# The store two helpers deep, the outer helper's rows unreadable to inference (a loaded offset).
NESTED = HEAD + '''

@triton.jit
def poke(p, v):
    tl.atomic_max(p, v)


@triton.jit
def via_index(base, idx_ptr, v):
    k = tl.load(idx_ptr)
    poke(base + k, v)


@triton.jit
def rowmax(A, IDX, Y, N, BN: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.load(A + row * N + tl.arange(0, BN), mask=tl.arange(0, BN) < N, other=0.0)
    via_index(A, IDX, tl.max(acc, axis=0))
    tl.store(Y + row, tl.max(acc, axis=0))
'''

# A helper that only reads through the pointer it is handed is followed, as before.
HELPER_READS = HEAD + '''

@triton.jit
def row_of(row_ptr, N, BN: tl.constexpr):
    return tl.load(row_ptr + tl.arange(0, BN), mask=tl.arange(0, BN) < N, other=0.0)


@triton.jit
def rowmax(A, Y, N, BN: tl.constexpr):
    row = tl.program_id(0)
    acc = row_of(A + row * N, N, BN)
    tl.store(Y + row, tl.max(acc, axis=0))
'''


def _refusal(text: str, pattern: str = "all_gather") -> str:
    with pytest.raises(KernelError) as info:
        transform(find_kernel(textwrap.dedent(text), "kern.py", "rowmax"), Schedule(pattern=pattern, tensor="A"))
    return str(info.value)


@pytest.mark.parametrize("pattern", ["all_gather", "all_to_all"])
def test_a_store_in_a_helper_handed_the_gathered_input_is_refused_at_the_store(pattern):
    assert _refusal(HELPER_STORES, pattern) == (
        "kern.py:8:5: the kernel writes into 'A' (tl.store in helper 'keep_max', handed it as 'row_ptr'); an all-gathered input "
        "is read-only, so write results to another argument")


def test_a_store_two_helpers_deep_behind_rows_inference_cannot_follow_is_refused():
    assert _refusal(NESTED) == (
        "kern.py:7:5: the kernel writes into 'A' (tl.atomic_max in helper 'poke', handed it as 'p'); an all-gathered input "
        "is read-only, so write results to another argument")


def test_a_helper_that_only_reads_is_followed():
    # Its rows, written in the caller's names, bound the wait (not "every chunk").
    t = transform(find_kernel(HELPER_READS, "kern.py", "rowmax"), Schedule(pattern="all_gather", tensor="A"))
    assert ("syncopy_device.chunk_range_masked((A + row * N) + tl.arange(0, BN), tl.arange(0, BN) < N, A, syncopy_ctx, True)"
            in t.code())


# -- strides given for the shard (issue 30, F): the unit side; worlds 2 and 3 in tests/world/test_strides.py --

def _call(fused, shard, **scalars):
    from syncopy.runtime.launch.binding import BoundCall

    return BoundCall({fused.schedule.tensor: shard, **scalars}, shard, {})


def test_a_producer_given_its_shards_strides_is_told_the_full_partials():
    import torch

    import syncopy
    from syncopy.errors import LaunchError
    from syncopy.templates.gemm_rs.kernel import gemm_rs_kernel

    fused = syncopy.overlap({"pattern": "reduce_scatter", "tensor": "C", "dim": 1, "chunks_per_rank": 1})(gemm_rs_kernel)
    t = fused.kernel.build().transformed
    assert t.binding.scales == ("stride_cm", "stride_cn")
    out = torch.empty(8, 4)  # this rank's columns of C = A @ B (8 x 12 over 3 ranks)
    with pytest.raises(LaunchError) as info:
        fused.binder.check_strides(_call(fused, out, stride_cm=4, stride_cn=1), 3)
    assert str(info.value) == ("launch of 'gemm_rs_kernel': 'stride_cm' is 4, the stride of dim 0 of 'C' as passed (this rank's "
                               "shard, shape [8, 4]), but the kernel writes the full partial 'C' (shape [8, 12], strides (12, 1)): "
                               "pass stride_cm=12")
    fused.binder.check_strides(_call(fused, out, stride_cm=12, stride_cn=1), 3)  # the full partial's: taken
    fused.binder.check_strides(_call(fused, out, stride_cm=4, stride_cn=1), 1)  # a world of one: they are the same


def test_along_dim_0_the_shards_strides_are_the_gathered_ones():
    import torch

    import syncopy
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 1})(ag_gemm_kernel)
    a = torch.empty(8, 6)
    fused.binder.check_strides(_call(fused, a, stride_am=6, stride_ak=1), 4)


# -- outputs shorter than the grid writes (issue 30, G): the unit side; worlds 2 and 3 in tests/world/test_argument_shapes.py --

def _ag_gemm_extents(c):
    import torch

    import syncopy
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 2})(ag_gemm_kernel)
    m, n, k = 32, 16, 16
    args = dict(A=torch.randn(m, k), B=torch.randn(k, n), C=c, M=m, N=n, K=k, stride_am=k, stride_ak=1, stride_bk=n,
                stride_bn=1, stride_cm=c.stride(0), stride_cn=c.stride(1), BLOCK_M=8, BLOCK_N=8, BLOCK_K=8, GROUP_M=1)
    fused.orders.check_extents((4 * 2,), args)


def test_an_output_of_any_layout_is_checked_by_element_offset():
    import torch

    from syncopy.errors import LaunchError

    _ag_gemm_extents(torch.empty(32, 16))  # fits
    _ag_gemm_extents(torch.empty(16, 32).t())  # a transposed view that fits: its rows are not its memory order
    with pytest.raises(LaunchError) as info:
        _ag_gemm_extents(torch.empty(24, 16))
    assert str(info.value) == ("launch of 'ag_gemm_kernel': the grid writes rows up to 31 of 'C', which has 24 rows; give 'C' at "
                               "least 32 rows, or a grid and bounds that write 24")
    with pytest.raises(LaunchError) as info:
        _ag_gemm_extents(torch.empty(16, 24).t())  # transposed, 24 of the 32 rows: row 31, column 15 is at 31 + 24 * 15
    assert str(info.value) == ("launch of 'ag_gemm_kernel': the grid writes 'C' at element offset 391, past its last element "
                               "(shape [24, 16], strides (1, 24)); give 'C' room for what the grid writes, or a grid and bounds "
                               "that stay within it")
