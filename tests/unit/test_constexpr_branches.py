"""Issue 31 item 7: reads under a constexpr `if` wait only where Triton compiles them. Each read's
range is computed under the same constexpr tests as the read (one `if` per test, both arms), so a
dead arm's unmasked load widens neither the wait nor the probe; tests that are not constexpr (a
runtime value, a reassigned constexpr) are left out, as before. And item 10: a tile whose waits are
all per read deeper in its first statement records its start before that statement."""
from __future__ import annotations

import textwrap

from syncopy.frontend.source import find_kernel
from syncopy.passes import transform
from syncopy.schedule import Schedule
from tests.golden.spans import inside

_EVEN = '''\
import triton
import triton.language as tl


@triton.jit
def ragged_sum(X, out, N, EVEN_N: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BN + tl.arange(0, BN)
    if EVEN_N:
        x = tl.load(X + rows)
    else:
        x = tl.load(X + rows, mask=rows < N, other=0.0)
    tl.store(out + pid, tl.sum(x, 0))
'''

_EVEN_AFTER = '''\
    # syncopy: wait for the chunks of X this program reads
    if SYNCOPY_TABLE:
        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
    else:
        syncopy_lo, syncopy_hi = syncopy_device.empty_range(syncopy_ctx)
        if EVEN_N:
            syncopy_lo_0, syncopy_hi_0 = syncopy_device.chunk_range(X + rows, X, syncopy_ctx, True)
            syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_0, syncopy_hi_0)
        else:
            syncopy_lo_1, syncopy_hi_1 = syncopy_device.chunk_range_masked(X + rows, rows < N, X, syncopy_ctx, True)
            syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_1, syncopy_hi_1)
    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
    if EVEN_N:
'''


def _fused(src: str, kernel: str, tensor) -> str:
    ks = find_kernel(textwrap.dedent(src), "kern.py", kernel)
    t = transform(ks, Schedule(pattern="all_gather", kernel=kernel, tensor=tensor))
    return t, inside(t.code(), kernel)


def test_each_arm_of_a_constexpr_if_bounds_its_own_reads_under_the_same_test():
    t, body = _fused(_EVEN, "ragged_sum", "X")
    assert _EVEN_AFTER in body, body
    # The probe (the tile order table) computes the same guarded range.
    assert "if EVEN_N:\n" in t.code(t.probe) and "empty_range" in t.code(t.probe)
    assert "rows of X + rows if EVEN_N\n" in t.stages["binding"] and "rows of X + rows where rows < N if not (EVEN_N)\n" in t.stages["binding"]


def test_a_test_that_is_not_constexpr_is_left_out_and_both_reads_are_merged():
    for test in ("N > 0", "EVEN_N & (N > 0)"):
        _, body = _fused(_EVEN.replace("if EVEN_N:", f"if {test}:"), "ragged_sum", "X")
        assert "empty_range" not in body and f"        if {test}:" not in body.split("wait_chunks")[0], body
        assert "syncopy_lo, syncopy_hi = syncopy_device.chunk_range(X + rows, X, syncopy_ctx, True)\n" in body, body


def test_a_reassigned_constexpr_is_no_constexpr_test():
    src = _EVEN.replace("    pid = tl.program_id(0)\n", "    pid = tl.program_id(0)\n    EVEN_N = N % BN == 0\n")
    _, body = _fused(src, "ragged_sum", "X")
    assert "empty_range" not in body, body


def test_nested_and_elif_constexpr_tests_each_keep_their_arm():
    src = _EVEN.replace('''    if EVEN_N:
        x = tl.load(X + rows)
    else:''', '''    if EVEN_N:
        x = tl.load(X + rows)
    elif WIDE:
        x = tl.load(X + rows + BN, mask=rows + BN < N, other=0.0)
    else:''').replace("BN: tl.constexpr", "BN: tl.constexpr, WIDE: tl.constexpr")
    _, body = _fused(src, "ragged_sum", "X")
    head = body.split("syncopy_device.wait_chunks")[0]
    assert "        if EVEN_N:\n            syncopy_lo_0" in head, head
    assert "        else:\n            if WIDE:\n                syncopy_lo_1, syncopy_hi_1 = syncopy_device.chunk_range_masked(X + rows + BN" in head, head
    assert "            else:\n                syncopy_lo_2, syncopy_hi_2 = syncopy_device.chunk_range_masked(X + rows, rows < N" in head, head


def test_a_wait_under_a_constexpr_if_does_not_cover_the_same_read_outside_it():
    src = _EVEN.replace("    else:\n        x = tl.load(X + rows, mask=rows < N, other=0.0)\n", "").replace(
        "    if EVEN_N:\n", "    x = tl.zeros([BN], dtype=tl.float32)\n    if EVEN_N:\n").replace(
        "    tl.store(out + pid, tl.sum(x, 0))\n", "    y = tl.load(X + rows)\n    tl.store(out + pid, tl.sum(x, 0) + tl.sum(y, 0))\n")
    _, body = _fused(src, "ragged_sum", "X")
    # Where EVEN_N is false the first wait is compiled out: the later read waits for itself.
    assert body.count("syncopy_device.wait_chunks(") == 2, body
    assert ("    syncopy_lo, syncopy_hi = syncopy_device.chunk_range(X + rows, X, syncopy_ctx, True)\n"
            "    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)\n    y = tl.load(X + rows)\n") in body, body


_DECODE = '''\
import triton
import triton.language as tl


@triton.jit
def paged_sum(X, idx, out, L, BN: tl.constexpr):
    pid = tl.program_id(0)
    n = tl.load(L + pid)
    acc = tl.zeros([BN], dtype=tl.float32)
    if n > 0:
        for s in range(0, n, BN):
            loc = tl.load(idx + s + tl.arange(0, BN))
            acc += tl.load(X + loc)
    tl.store(out + pid * BN + tl.arange(0, BN), acc)
'''


def test_a_tile_whose_waits_are_all_per_read_under_an_if_records_its_start_before_that_statement():
    _, body = _fused(_DECODE, "paged_sum", "X")
    start = "    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)\n    if n > 0:\n"
    assert start in body, body
    assert body.count("trace_tile_start") == 1 and body.index("trace_tile_start") < body.index("wait_chunks")
