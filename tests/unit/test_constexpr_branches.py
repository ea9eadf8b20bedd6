"""Issue 31 item 7: reads under a constexpr `if` wait only where Triton compiles them. Each read's
range is computed under the same constexpr tests as the read (one `if` per test, both arms), so a
dead arm's unmasked load widens neither the wait nor the probe; tests that are not constexpr (a
runtime value, a reassigned constexpr) are left out, as before. And item 10: a tile whose waits are
all per read deeper in its first statement records its start before that statement. A helper's own
constexpr `if`s are resolved at each call from the expression the call hands it (`4 - STAGE`)."""
from __future__ import annotations

import textwrap

import pytest

from syncopy.frontend import infer
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


# Issue 31: the attention tutorial's inner helper chooses its bounds by `if STAGE == 1: ... elif
# STAGE == 2: ... else:` on its own constexpr, which the kernel hands it as `4 - STAGE` at one call
# and `2` at the other. Each call's wait holds each arm under the test in the caller's names (Triton
# keeps one when it compiles); a test of literals only is decided here.
_STAGED = '''\
import triton
import triton.language as tl


@triton.jit
def _band(acc, X, start_m, N, BM: tl.constexpr, STAGE: tl.constexpr):
    if STAGE == 1:
        lo, hi = 0, start_m * BM
    elif STAGE == 2:
        lo, hi = start_m * BM, (start_m + 1) * BM
    else:
        lo, hi = 0, N
    for s in range(lo, hi, BM):
        acc += tl.load(X + s + tl.arange(0, BM))
    return acc


@triton.jit
def staged_sum(X, out, N, BM: tl.constexpr, STAGE: tl.constexpr):
    start_m = tl.program_id(0)
    acc = tl.zeros([BM], dtype=tl.float32)
    if STAGE & 1:
        acc = _band(acc, X, start_m, N, BM, 4 - STAGE)
    if STAGE & 2:
        acc = _band(acc, X, start_m, N, BM, 2)
    tl.store(out + start_m * BM + tl.arange(0, BM), acc)
'''

_R = "syncopy_device.chunk_range(X + {rows} + tl.arange(0, BM), X, syncopy_ctx, True)"
_OFF_BAND = ("0", "(0 + ((((start_m * BM) - 0 - 1) // BM) * BM))")
_BAND = ("(start_m * BM)", "((start_m * BM) + (((((start_m + 1) * BM) - (start_m * BM) - 1) // BM) * BM))")
_WHOLE = ("0", "(0 + (((N - 0 - 1) // BM) * BM))")


def _ranges(rows, first: int, indent: str) -> str:
    out = ""
    for k, r in enumerate(rows, first):
        out += (f"{indent}syncopy_lo_{k}, syncopy_hi_{k} = {_R.format(rows=r)}\n"
                f"{indent}syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_{k}, syncopy_hi_{k})\n")
    return out


_STAGED_AFTER = (
    "    # syncopy: wait for the chunks of X this program reads\n"
    "    if SYNCOPY_TABLE:\n"
    "        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi\n"
    "    else:\n"
    "        syncopy_lo, syncopy_hi = syncopy_device.empty_range(syncopy_ctx)\n"
    "        if STAGE & 1:\n"
    "            if (4 - STAGE) == 1:\n" + _ranges(_OFF_BAND, 0, " " * 16)
    + "            else:\n"
    "                if (4 - STAGE) == 2:\n" + _ranges(_BAND, 2, " " * 20)
    + "                else:\n" + _ranges(_WHOLE, 4, " " * 20)
    + "    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)\n"
    "    syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)\n"
    "    if STAGE & 1:\n"
    "        acc = _band(acc, X, start_m, N, BM, 4 - STAGE)\n"
    "    # syncopy: wait for the chunks of X this program reads\n"
    "    syncopy_lo, syncopy_hi = syncopy_device.empty_range(syncopy_ctx)\n"
    "    if STAGE & 2:\n" + _ranges(_BAND, 0, " " * 8)
    + "    syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)\n"
    "    if STAGE & 2:\n"
    "        acc = _band(acc, X, start_m, N, BM, 2)\n")


def test_a_helpers_constexpr_arms_are_resolved_at_each_call_from_the_expression_it_is_handed():
    t, body = _fused(_STAGED, "staged_sum", "X")
    assert _STAGED_AFTER in body, body
    assert "every chunk" not in t.code() and t.remapped


def test_a_constexpr_argument_the_caller_names_first_waits_for_every_arm_of_the_helper():
    # `S = 4 - STAGE` is no constexpr parameter: the arms' tests are dropped, the wait covers all three.
    src = _STAGED.replace("    if STAGE & 1:\n", "    S = 4 - STAGE\n    if STAGE & 1:\n").replace("4 - STAGE)", "S)")
    _, body = _fused(src, "staged_sum", "X")
    first = body.split("syncopy_device.wait_chunks")[0]
    assert "if (S)" not in first and "if S " not in first and "        if STAGE & 1:\n" in first, first
    assert [r for r in (*_OFF_BAND, *_BAND, *_WHOLE) if _R.format(rows=r) not in first] == [], first


@pytest.mark.parametrize("code, value", [
    ("(4 - 3) == 1", (True,)), ("(2) == 1", (False,)), ("3 & 2", (2,)), ("not (1 << 2 >= 4)", (False,)),
    ("-(7 // 2) % 5", (2,)), ("(1 == 1) and (2 != 2)", (False,)), ("None", (None,)),
    ("STAGE == 1", None), ("1 // 0", None), ("1.5 > 1", None), ("f(1)", None),
])
def test_literal_constexpr_tests_are_folded_as_triton_folds_them(code, value):
    assert infer._static_value(code) == value
