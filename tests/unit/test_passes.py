"""The passes, one behaviour per case, as dedented before/after source (pyupgrade style).

No file comes out of `syncopy transform` byte-identical (the named kernel always changes), so the
"noop" cases check what must not change: every other kernel, function, comment and byte of the
module. Then before/after pairs for each piece: program-id remap, wait insertion (with and
without a mask), the base copy of a reassigned argument, parameters before defaults, the probe
kernel, and the reserved-name check.
"""
from __future__ import annotations

import re
import textwrap

import pytest

from syncopy.emit.source import rewrite_file
from syncopy.errors import InferenceError, KernelError
from syncopy.frontend.source import find_kernel
from syncopy.passes import transform
from syncopy.schedule import Schedule
from tests.golden.spans import assert_only_kernel_changed, inside


def _transform(src: str, kernel: str, tensor: str, **keys):
    text = textwrap.dedent(src)
    ks = find_kernel(text, "kern.py", kernel)
    return transform(ks, Schedule(pattern="all_gather", kernel=kernel, tensor=tensor, **keys))


def _rewrite(src: str, kernel: str, tensor: str, **keys) -> str:
    return rewrite_file(_transform(src, kernel, tensor, **keys))


# --- noop: everything outside the named kernel stays byte-identical ---------------------------

_STACKED = '''\
"""Kernels with stacked decorators and launch code around them."""
from __future__ import annotations

import torch
import triton
import triton.language as tl


def grid_for(meta, n):
    return (triton.cdiv(n, meta["B"]),)


@triton.autotune(configs=[triton.Config({"B": 32}), triton.Config({"B": 64})], key=["n"])
@triton.jit
def tuned(V, W, n, B: tl.constexpr):
    q = tl.program_id(0)
    at = q * B + tl.arange(0, B)
    tl.store(W + at, tl.load(V + at, mask=at < n), mask=at < n)


if __name__ == "__main__":
    x = torch.randn(100)
    tuned[lambda meta: grid_for(meta, 100)](x, torch.empty_like(x), 100)
'''

_SPECIALIZED = '''\
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n"])
def spec(V, W, n, B: tl.constexpr):
    q = tl.program_id(0)
    at = q * B + tl.arange(0, B)
    tl.store(W + at, tl.load(V + at, mask=at < n), mask=at < n)
'''

_BARE_JIT = '''\
from triton import jit
import triton.language as tl

LIMIT = 7  # stays


@jit
def bare(V, W, n, B: tl.constexpr):
    q = tl.program_id(0)
    at = q * B + tl.arange(0, B)
    tl.store(W + at, tl.load(V + at))


@jit
def untouched(V, W):
    tl.store(W, tl.load(V) + LIMIT)
'''

_ALREADY_IMPORTED = '''\
import triton
import triton.language as tl
import syncopy.device as syncopy_device


@triton.jit
def again(V, W, n, B: tl.constexpr):
    q = tl.program_id(0)
    at = q * B + tl.arange(0, B)
    tl.store(W + at, tl.load(V + at))
'''

_UNICODE = '''\
# -*- coding: utf-8 -*-
"""Noyau: réduction par ligne — commentaires non ASCII."""
import triton
import triton.language as tl


@triton.jit
def accent(V, W, n, B: tl.constexpr):
    # bloc de lignes (é, ü, 漢字)
    q = tl.program_id(0)
    at = q * B + tl.arange(0, B)
    tl.store(W + at, tl.load(V + at))


def après():
    return "ok"  # fin
'''

_LINES = '''\
import triton
import triton.language as tl


@triton.jit
def lines(V, W, n, B: tl.constexpr):
    q = tl.program_id(0)
    if q == 0:
        tl.store(W, 1)
    at = q * B + tl.arange(0, B)
    tl.store(W + at, tl.load(V + at))


@triton.jit
def neighbour(V, W):
    tl.store(W, tl.load(V))
'''

NOOP = [
    pytest.param(_STACKED, "tuned", id="autotune-stacked-decorators-and-main-block"),
    pytest.param(_SPECIALIZED, "spec", id="jit-called-with-arguments"),
    pytest.param(_BARE_JIT, "bare", id="bare-jit-other-kernel-after"),
    pytest.param(_ALREADY_IMPORTED, "again", id="device-import-already-there"),
    pytest.param(_UNICODE, "accent", id="non-ascii-comments"),
    pytest.param(_LINES, "lines", id="lf"),
    pytest.param(_LINES.replace("\n", "\r\n"), "lines", id="crlf-line-endings"),
    pytest.param(_LINES.replace("    ", "\t"), "lines", id="tab-indentation"),
    pytest.param(_LINES.rstrip("\n"), "lines", id="no-final-newline"),
]


@pytest.mark.parametrize(("src", "kernel"), NOOP)
def test_noop_outside_the_kernel(src, kernel):
    out = rewrite_file(transform(find_kernel(src, "kern.py", kernel), Schedule(pattern="all_gather", kernel=kernel, tensor="V")))
    assert_only_kernel_changed(src, out, kernel)
    compile(out, "kern.py", "exec")


def test_noop_line_endings_and_indentation_follow_the_file():
    crlf = _rewrite(_LINES.replace("\n", "\r\n"), "lines", "V")
    assert "\n" not in crlf.replace("\r\n", "")
    tabs = _rewrite(_LINES.replace("    ", "\t"), "lines", "V")
    assert "\n    " not in tabs and "\n\tsyncopy_device.wait_chunks(" in tabs
    assert "\n\tif SYNCOPY_TABLE:\n\t\tsyncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi\n\telse:\n\t\tsyncopy_lo" in tabs


def test_noop_existing_device_import_is_not_duplicated():
    assert _rewrite(_ALREADY_IMPORTED, "again", "V").count("import syncopy.device as syncopy_device") == 1


def test_noop_other_kernels_in_the_file_keep_their_program_ids():
    out = _rewrite(_LINES, "lines", "V")
    assert inside(out, "neighbour") == inside(_LINES, "neighbour")
    assert "tl.program_id" not in inside(out, "lines")


# --- before/after pairs: whole module out of `rewrite_file` -----------------------------------

PAIRS = [
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def cube(G, res, nx, ny, BX: tl.constexpr):
            gx = tl.program_id(0)
            gy = tl.program_id(axis=1)
            gz = tl.program_id(2)
            v = tl.load(G + gx * BX + tl.arange(0, BX) + gy * nx + gz * nx * ny)
            tl.store(res + gx, tl.sum(v, axis=0))
        ''',
        dict(kernel="cube", tensor="G"),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def cube(G, res, nx, ny, BX: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            gx = syncopy_pid0
            gy = syncopy_pid1
            gz = syncopy_pid2
            # syncopy: wait for the chunks of G this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range(G + gx * BX + tl.arange(0, BX) + gy * nx + gz * nx * ny, G, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            v = tl.load(G + gx * BX + tl.arange(0, BX) + gy * nx + gz * nx * ny)
            tl.store(res + gx, tl.sum(v, axis=0))
        ''',
        id="remap-program-id-every-axis-and-keyword-form",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def copy_rows(V, W, n, B: tl.constexpr):
            q = tl.program_id(0)
            at = q * B + tl.arange(0, B)
            tl.store(W + at, tl.load(V + at, mask=at < n, other=0.0), mask=at < n)
        ''',
        dict(kernel="copy_rows", tensor="V"),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def copy_rows(V, W, n, B: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            q = syncopy_pid0
            at = q * B + tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(V + at, at < n, V, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            tl.store(W + at, tl.load(V + at, mask=at < n, other=0.0), mask=at < n)
        ''',
        id="wait-before-a-masked-read-nested-in-a-store",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def shift_rows(V, W, stride, n, B: tl.constexpr):
            q = tl.program_id(0)
            V += q * stride
            W += q * stride
            at = tl.arange(0, B)
            tl.store(W + at, tl.load(V + at, mask=at < n), mask=at < n)
        ''',
        dict(kernel="shift_rows", tensor="V"),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def shift_rows(V, W, stride, n, B: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            syncopy_base = V
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            q = syncopy_pid0
            V += q * stride
            W += q * stride
            at = tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(V + at, at < n, syncopy_base, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            tl.store(W + at, tl.load(V + at, mask=at < n), mask=at < n)
        ''',
        id="base-copy-for-a-reassigned-argument",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def with_default(V, W, n, B: tl.constexpr = 64):
            q = tl.program_id(0)
            at = q * B + tl.arange(0, B)
            tl.store(W + at, tl.load(V + at))
        ''',
        dict(kernel="with_default", tensor="V"),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def with_default(V, W, n, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, B: tl.constexpr = 64):
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            q = syncopy_pid0
            at = q * B + tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range(V + at, V, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            tl.store(W + at, tl.load(V + at))
        ''',
        id="params-inserted-before-the-first-default",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def twice(V, W, n, B: tl.constexpr):
            q = tl.program_id(0)
            at = q * B + tl.arange(0, B)
            first = tl.load(V + at)
            nxt = (q + 1) * B + tl.arange(0, B)
            second = tl.load(V + nxt, mask=nxt < n)
            tl.store(W + at, first + second)
        ''',
        dict(kernel="twice", tensor="V"),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def twice(V, W, n, B: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            q = syncopy_pid0
            at = q * B + tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range(V + at, V, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            first = tl.load(V + at)
            nxt = (q + 1) * B + tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(V + nxt, nxt < n, V, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            second = tl.load(V + nxt, mask=nxt < n)
            tl.store(W + at, first + second)
        ''',
        id="second-read-of-other-rows-waits-again-without-a-second-trace",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def same_twice(V, W, n, B: tl.constexpr):
            q = tl.program_id(0)
            at = q * B + tl.arange(0, B)
            first = tl.load(V + at)
            second = tl.load(V + at)
            tl.store(W + at, first * second)
        ''',
        dict(kernel="same_twice", tensor="V"),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def same_twice(V, W, n, B: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            q = syncopy_pid0
            at = q * B + tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range(V + at, V, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            first = tl.load(V + at)
            second = tl.load(V + at)
            tl.store(W + at, first * second)
        ''',
        id="repeated-read-of-the-same-rows-waits-once",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def stepped(V, W, K, sk, B: tl.constexpr, BK: tl.constexpr):
            q = tl.program_id(0)
            ptr = V + (q * B + tl.arange(0, B))[:, None] * K + tl.arange(0, BK)[None, :] * sk
            acc = tl.zeros((B, BK), dtype=tl.float32)
            for it in range(0, K, BK):
                acc += tl.load(ptr)
                ptr += BK * sk
            tl.store(W + q, tl.sum(tl.sum(acc, axis=1), axis=0))
        ''',
        dict(kernel="stepped", tensor="V"),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def stepped(V, W, K, sk, B: tl.constexpr, BK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            q = syncopy_pid0
            ptr = V + (q * B + tl.arange(0, B))[:, None] * K + tl.arange(0, BK)[None, :] * sk
            acc = tl.zeros((B, BK), dtype=tl.float32)
            # syncopy: wait for the chunks of V this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range(ptr, V, syncopy_ctx, True)
                syncopy_lo_1, syncopy_hi_1 = syncopy_device.chunk_range((ptr + (((K - 1) // BK) * (BK * sk))), V, syncopy_ctx, True)
                syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_1, syncopy_hi_1)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            for it in range(0, K, BK):
                acc += tl.load(ptr)
                ptr += BK * sk
            tl.store(W + q, tl.sum(tl.sum(acc, axis=1), axis=0))
        ''',
        id="loop-read-waits-for-first-and-last-iteration",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def whole(V, W, n, B: tl.constexpr):
            at = tl.arange(0, B)
            tl.store(W + at, tl.load(V + at, mask=at < n))
        ''',
        dict(kernel="whole", tensor="V"),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def whole(V, W, n, B: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            at = tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(V + at, at < n, V, syncopy_ctx, True)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            tl.store(W + at, tl.load(V + at, mask=at < n))
        ''',
        id="no-program-id-no-remap",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def cols(V, W, n, sv, B: tl.constexpr):
            q = tl.program_id(0)
            cc = q * B + tl.arange(0, B)
            tl.store(W + cc, tl.load(V + cc * sv))
        ''',
        dict(kernel="cols", tensor="V", dim=1),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def cols(V, W, n, sv, B: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            q = syncopy_pid0
            cc = q * B + tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range(V + cc * sv, V, syncopy_ctx, False)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            tl.store(W + cc, tl.load(V + cc * sv))
        ''',
        id="inner-dim-is-not-outer",
    ),
    pytest.param(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def told(V, W, n, B: tl.constexpr):
            q = tl.program_id(0)
            at = q * B + tl.arange(0, B)
            tl.store(W + at, tl.load(V + at))
        ''',
        dict(kernel="told", tensor="V", binding={"rows": "q * B + tl.arange(0, B)"}),
        '''
        import triton
        import triton.language as tl
        import syncopy.device as syncopy_device


        @triton.jit
        def told(V, W, n, B: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
            # syncopy: run tiles in chunk-arrival order
            syncopy_pid0, syncopy_pid1, syncopy_pid2, syncopy_table_lo, syncopy_table_hi = syncopy_device.slot_entry(syncopy_order)
            q = syncopy_pid0
            at = q * B + tl.arange(0, B)
            # syncopy: wait for the chunks of V this program reads
            if SYNCOPY_TABLE:
                syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi
            else:
                syncopy_lo, syncopy_hi = syncopy_device.chunk_range_of_rows(q * B + tl.arange(0, B), syncopy_ctx)
            syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)
            syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
            tl.store(W + at, tl.load(V + at))
        ''',
        id="explicit-binding-rows",
    ),
]


@pytest.mark.parametrize(("before", "keys", "after"), PAIRS)
def test_before_after(before, keys, after):
    got = _rewrite(before, **keys)
    assert got == textwrap.dedent(after)
    compile(got, "kern.py", "exec")


# --- signature: parameters before defaults, in the file's own style ---------------------------

def test_params_go_before_every_default_and_keep_kwonly_marker():
    t = _transform(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def k(V, W, n=4, *, B: tl.constexpr = 16):
            q = tl.program_id(0)
            tl.store(W + q, tl.load(V + q))
        ''',
        "k",
        "V",
    )
    assert t.code().splitlines()[3] == (
        "def k(V, W, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, n=4, *, B: tl.constexpr = 16):"
    )


def test_constexpr_flag_uses_the_files_spelling():
    t = _transform(
        '''
        import triton
        import triton.language


        @triton.jit
        def k(V, W, B: triton.language.constexpr):
            q = triton.language.program_id(0)
            triton.language.store(W + q, triton.language.load(V + q))
        ''',
        "k",
        "V",
    )
    assert "SYNCOPY_TRACE: triton.language.constexpr, SYNCOPY_TABLE: triton.language.constexpr):" in t.code()
    assert "language.program_id" not in t.code() and "    q = syncopy_pid0\n" in t.code()


_MAGIC_COMMA = '''
import triton
import triton.language as tl


@triton.jit
def k(
    V,
    W,
    n,
    B: tl.constexpr,
):
    q = tl.program_id(0)
    tl.store(W + q, tl.load(V + q))
'''


def test_one_param_per_line_signature_stays_valid():
    out = _rewrite(_MAGIC_COMMA, "k", "V")
    compile(out, "kern.py", "exec")
    # (the inserted params' indentation is the xfail below; this checks their order and the closing paren)
    assert len(re.findall(r"\n\s*SYNCOPY_TRACE: tl\.constexpr,\n\s*SYNCOPY_TABLE: tl\.constexpr,\n\):\n", out)) == 1


def test_one_param_per_line_signature_keeps_its_indentation():
    out = _rewrite(_MAGIC_COMMA, "k", "V")
    assert "    B: tl.constexpr,\n    syncopy_ctx,\n    syncopy_signals,\n" in out
    assert "    SYNCOPY_TRACE: tl.constexpr,\n    SYNCOPY_TABLE: tl.constexpr,\n):\n" in out


# --- probe kernel: the fused kernel cut before its first wait, stores dropped -----------------

def test_probe_drops_stores_and_keeps_raw_program_ids():
    t = _transform(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def flagged(V, W, seen, n, B: tl.constexpr):
            q = tl.program_id(0)
            tl.store(seen + q, 1)
            if q == 0:
                tl.atomic_add(seen, 1)
            at = q * B + tl.arange(0, B)
            tl.store(W + at, tl.load(V + at) * 2)
        ''',
        "flagged",
        "V",
    )
    assert t.stages["probe"] == "\n\n" + textwrap.dedent(
        '''\
        @triton.jit
        def flagged__syncopy_probe(V, W, seen, n, B: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, syncopy_probe_out):
            q = tl.program_id(0)
            if q == 0:
                pass
            at = q * B + tl.arange(0, B)
            syncopy_lo, syncopy_hi = syncopy_device.chunk_range(V + at, V, syncopy_ctx, True)
            syncopy_device.probe_store(syncopy_probe_out, syncopy_lo, syncopy_hi)
        '''
    )
    # ... while the fused kernel keeps every store.
    assert "tl.store(seen + q, 1)" in t.stages["fused"] and "tl.atomic_add(seen, 1)" in t.stages["fused"]


def test_probe_of_a_reassigned_argument_starts_with_the_base_copy():
    t = _transform(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def shift(V, W, stride, B: tl.constexpr):
            q = tl.program_id(0)
            V += q * stride
            tl.store(W + q, tl.sum(tl.load(V + tl.arange(0, B)), axis=0))
        ''',
        "shift",
        "V",
    )
    body = t.stages["probe"].split("):\n", 1)[1].splitlines()
    assert body[0] == "    syncopy_base = V"
    assert body[-2].endswith("syncopy_base, syncopy_ctx, True)")


def test_probe_puts_its_output_before_defaults():
    t = _transform(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def k(V, W, B: tl.constexpr = 8):
            q = tl.program_id(0)
            tl.store(W + q, tl.load(V + q))
        ''',
        "k",
        "V",
    )
    assert "SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr, syncopy_probe_out, B: tl.constexpr = 8):" in t.stages["probe"]
    compile(t.stages["probe"], "probe.py", "exec")


def test_no_probe_when_a_value_comes_from_an_atomic_before_the_read():
    # Running the prefix twice would take two tickets: the probe must not exist.
    t = _transform(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def ticket(V, W, counter, B: tl.constexpr):
            q = tl.program_id(0)
            slot = tl.atomic_add(counter, 1)
            tl.store(W + slot, tl.load(V + q))
        ''',
        "ticket",
        "V",
    )
    assert t.probe is None and "probe" not in t.stages


def test_no_probe_without_program_ids():
    t = _transform(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def whole(V, W, B: tl.constexpr):
            tl.store(W, tl.sum(tl.load(V + tl.arange(0, B)), axis=0))
        ''',
        "whole",
        "V",
    )
    assert not t.remapped and t.probe is None


def test_no_table_block_without_program_ids():
    # Without tl.program_id there is no probe and no tile table: every wait computes its own range.
    # The flag is still a parameter (the runtime always passes it), it just selects nothing.
    t = _transform(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def whole(V, W, n, B: tl.constexpr):
            at = tl.arange(0, B)
            first = tl.load(V + at, mask=at < n)
            nxt = B + tl.arange(0, B)
            second = tl.load(V + nxt, mask=nxt < n)
            tl.store(W + at, first + second)
        ''',
        "whole",
        "V",
    )
    fused = t.stages["fused"]
    assert not t.remapped and t.probe is None
    assert "SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):" in fused
    assert "if SYNCOPY_TABLE" not in fused and "table_range" not in fused
    assert fused.count("syncopy_device.wait_chunks(") == 2
    assert "    syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(V + at, at < n, V, syncopy_ctx, True)\n" in fused
    assert "    syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(V + nxt, nxt < n, V, syncopy_ctx, True)\n" in fused


def test_only_the_first_wait_reads_the_table():
    t = _transform(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def twice(V, W, n, B: tl.constexpr):
            q = tl.program_id(0)
            at = q * B + tl.arange(0, B)
            first = tl.load(V + at)
            nxt = (q + 1) * B + tl.arange(0, B)
            second = tl.load(V + nxt, mask=nxt < n)
            tl.store(W + at, first + second)
        ''',
        "twice",
        "V",
    )
    fused = t.stages["fused"]
    assert fused.count("if SYNCOPY_TABLE:") == 1 and fused.count("= syncopy_table_lo, syncopy_table_hi") == 1
    assert fused.index("if SYNCOPY_TABLE:") < fused.index("syncopy_device.wait_chunks(")
    assert fused.count("syncopy_device.wait_chunks(") == 2
    # The probe computes the range the table holds, so it never reads the table itself.
    assert "SYNCOPY_TABLE" in t.stages["probe"] and "if SYNCOPY_TABLE" not in t.stages["probe"]


def test_stages_are_named_and_ordered():
    t = _transform(_LINES, "lines", "V")
    assert list(t.stages) == ["kernel", "binding", "fused", "probe"]
    assert t.stages["kernel"] == t.source.code(t.source.func)
    assert t.stages["binding"].startswith("tensor V dim 0 base V\nwait before line 11:\n")


# --- errors of the passes ---------------------------------------------------------------------

@pytest.mark.parametrize(
    ("signature", "body", "name"),
    [
        pytest.param("V, W, syncopy_ctx", "    tl.store(W, tl.load(V))\n", "syncopy_ctx", id="parameter"),
        pytest.param("V, W", "    syncopy_lo = tl.load(V)\n    tl.store(W, syncopy_lo)\n", "syncopy_lo", id="local-variable"),
        pytest.param("V, W, SYNCOPY_TRACE: tl.constexpr", "    tl.store(W, tl.load(V))\n", "SYNCOPY_TRACE", id="constexpr-flag"),
        pytest.param("V, W, SYNCOPY_TABLE: tl.constexpr", "    tl.store(W, tl.load(V))\n", "SYNCOPY_TABLE", id="table-flag"),
        pytest.param("V, W", "    tl.store(W, tl.load(V) + syncopy_device)\n", "syncopy_device", id="read-only-global"),
    ],
)
def test_reserved_name_clash_is_an_error(signature, body, name):
    text = f"import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef clash({signature}):\n{body}"
    with pytest.raises(KernelError) as info:
        transform(find_kernel(text, "user.py", "clash"), Schedule(pattern="all_gather", tensor="V"))
    err = info.value
    assert f"uses the name '{name}'" in err.message and "rename it" in err.message
    assert (err.location.file, err.location.line, err.location.col) == ("user.py", 6, 1)


def test_program_id_with_a_computed_axis_is_an_error():
    text = textwrap.dedent(
        '''
        import triton
        import triton.language as tl


        @triton.jit
        def k(V, W, AX: tl.constexpr):
            q = tl.program_id(AX)
            tl.store(W + q, tl.load(V + q))
        '''
    )
    with pytest.raises(KernelError) as info:
        transform(find_kernel(text, "user.py", "k"), Schedule(pattern="all_gather", tensor="V"))
    assert str(info.value).startswith("user.py:8:9: tl.program_id needs a literal axis 0, 1 or 2")


# --------------------------------------------------------------------------------------------------
# Producer notify (reduce_scatter, all_reduce)
# --------------------------------------------------------------------------------------------------
_SCALE = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def scale(X, Y, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(X + offs, mask=offs < n)
        tl.store(Y + offs, v * 2, mask=offs < n)
        tl.store(Y + offs, v * 3, mask=offs < n)
''')


def test_producer_announces_once_after_the_last_store_with_the_union_of_the_write_ranges():
    t = transform(find_kernel(_SCALE, "kern.py", "scale"), Schedule(pattern="reduce_scatter", tensor="Y"))
    body = t.stages["fused"]
    assert body.count("notify_chunks(") == 1 and "wait_chunks" not in body
    assert body.index("notify_chunks(") > body.rindex("tl.store(Y + offs, v * 3")
    assert "syncopy_lo_w1, syncopy_hi_w1 = syncopy_device.chunk_range_masked(Y + offs, offs < n, Y, syncopy_ctx, True)" in body
    assert "syncopy_lo, syncopy_hi = syncopy_device.merge_ranges(syncopy_lo, syncopy_hi, syncopy_lo_w1, syncopy_hi_w1)" in body
    # The probe computes the addresses only: no load of X, no store.
    probe = t.stages["probe"]
    assert "tl.load" not in probe and "tl.store" not in probe and "probe_store" in probe


def test_producer_kernel_that_never_stores_into_the_tensor_names_the_key():
    with pytest.raises(InferenceError) as info:
        transform(find_kernel(_SCALE, "kern.py", "scale"), Schedule(pattern="all_reduce", tensor="X"))
    assert str(info.value).startswith("kern.py:6:1: kernel 'scale' never stores into 'X', so no program would announce its chunks; "
                                      "check `tensor:` (for reduce_scatter and all_reduce it is the output the kernel writes)")


def test_producer_kernel_without_program_id_is_refused():
    text = _SCALE.replace("pid = tl.program_id(0)", "pid = 0")
    with pytest.raises(KernelError) as info:
        transform(find_kernel(text, "kern.py", "scale"), Schedule(pattern="reduce_scatter", tensor="Y"))
    assert str(info.value) == ("kern.py:6:1: kernel 'scale' never calls tl.program_id, so every program would write the same rows "
                               "of 'Y'; a reduce_scatter kernel must split its output over programs")


def test_consumer_store_into_gathered_input_is_still_refused():
    with pytest.raises(KernelError, match="an all-gathered input is read-only"):
        transform(find_kernel(_SCALE, "kern.py", "scale"), Schedule(pattern="all_gather", tensor="Y"))


def test_producer_follows_descriptor_stores():
    from pathlib import Path

    text = Path(__file__).resolve().parents[1].joinpath("kernels", "desc_out.py").read_text()
    t = transform(find_kernel(text, "desc_out.py", "mm_desc_out"), Schedule(pattern="reduce_scatter", tensor="C"))
    body = t.stages["fused"]
    assert "syncopy_device.desc_chunk_range(C, pid_m * BM, BM, M, N, (N - 1), C, syncopy_ctx)" in body
    assert body.index("notify_chunks(") > body.index("c_desc.store(")
    assert "a_desc.load" not in t.stages["probe"] and "desc_chunk_range" in t.stages["probe"]


def test_a_wait_before_a_read_in_a_one_line_if_gets_the_if_its_own_lines():
    # Rows from loaded data: the wait goes before the read, inside `if i < N:`; the one-line form
    # has no block to insert into (it crashed the pass with an AttributeError).
    src = textwrap.dedent('''
        import triton
        import triton.language as tl


        @triton.jit
        def k(X, IDX, Y, N, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for i in range(4):
                row = tl.load(IDX + pid * 4 + i)
                if i < N: acc += tl.load(X + row * BLOCK + tl.arange(0, BLOCK))
            tl.store(Y + pid * BLOCK + tl.arange(0, BLOCK), acc)
    ''')
    out = _rewrite(src, "k", "X")
    body = out[out.index("        if i < N:\n"):]
    lines = body.splitlines()
    assert lines[0] == "        if i < N:"
    assert lines[-3].strip().startswith("syncopy_device.wait_chunks(") and lines[-2].strip() == "acc += tl.load(X + row * BLOCK + tl.arange(0, BLOCK))", body
