"""Producer notify: every tile counts itself once on every path (a count before each early return),
and write ranges that depend on loaded data are marked for a probe at every launch. Noop cases
first: kernels without returns or loads in their addresses are rewritten as before."""
from __future__ import annotations

import textwrap

import pytest

from syncopy.frontend.source import find_kernel
from syncopy.passes import transform
from syncopy.passes.producer_notify import EARLY_END, FRESH
from syncopy.schedule import Schedule

EARLY = ("syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_table_lo, syncopy_table_hi)")
HEAD = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def helper_rows(pid, BLOCK: tl.constexpr):
        return pid * BLOCK + tl.arange(0, BLOCK)


    @triton.jit
    def helper_load(p, pid):
        return tl.load(p + pid)


''')


def _fused(body: str, pattern: str = "reduce_scatter"):
    text = HEAD + "@triton.jit\ndef k(X, Y, idx, n, BLOCK: tl.constexpr):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return transform(find_kernel(text, "kern.py", "k"), Schedule(pattern=pattern, tensor="Y"))


PLAIN = '''\
pid = tl.program_id(0)
offs = pid * BLOCK + tl.arange(0, BLOCK)
tl.store(Y + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)
'''


@pytest.mark.parametrize("body", [
    pytest.param(PLAIN, id="plain"),
    pytest.param(PLAIN.replace("offs = pid * BLOCK + tl.arange(0, BLOCK)", "offs = helper_rows(pid, BLOCK)"), id="pure-helper"),
    pytest.param(PLAIN + "if pid > 3:\n    return\n", id="return-after-the-announcement"),
])
def test_noop_no_early_count_and_no_fresh_probe(body):
    t = _fused(body)
    assert t.stages["fused"].count("notify_chunks(") == 1 and EARLY not in t.stages["fused"]
    assert not t.fresh_probe and FRESH not in t.stages["fused"]


def test_a_return_before_the_store_counts_the_tile_over_its_table_range_first():
    t = _fused('''\
        pid = tl.program_id(0)
        if pid % 2 == 1:
            return
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)
        ''')
    fused = t.stages["fused"]
    assert (f"    if pid % 2 == 1:\n        # syncopy: {EARLY_END}\n        {EARLY}\n        return\n") in fused
    assert fused.count("notify_chunks(") == 2
    # The probe still records every tile (the count covers the tiles that return).
    assert "return" not in t.stages["probe"] and not t.fresh_probe


def test_one_line_returns_and_returns_inside_the_store_statement_count_too():
    t = _fused('''\
        pid = tl.program_id(0)
        if pid > n: return
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        if pid % 3 == 0:
            tl.store(Y + offs, 1.0, mask=offs < n)
            return
        tl.store(Y + offs, 2.0, mask=offs < n)
        ''')
    fused = t.stages["fused"]
    assert f"    if pid > n: {EARLY}; return\n" in fused
    assert f"        tl.store(Y + offs, 1.0, mask=offs < n)\n        # syncopy: {EARLY_END}\n        {EARLY}\n        return\n" in fused
    assert fused.count("notify_chunks(") == 3


@pytest.mark.parametrize("rows", [
    pytest.param("tl.load(idx + pid) * BLOCK + tl.arange(0, BLOCK)", id="load"),
    pytest.param("helper_load(idx, pid) * BLOCK + tl.arange(0, BLOCK)", id="helper-that-loads"),
    pytest.param("imported_rows(idx, pid, BLOCK)", id="unknown-helper-handed-a-pointer"),
])
def test_write_rows_from_loaded_data_are_probed_at_every_launch(rows):
    t = _fused(f'''\
        pid = tl.program_id(0)
        offs = {rows}
        tl.store(Y + offs, 1.0, mask=offs < n)
        ''', pattern="all_reduce")
    assert t.fresh_probe
    assert f"# syncopy: the chunks of Y this program writes; {FRESH}\n" in t.stages["fused"]


def test_a_loaded_value_stored_at_computed_rows_is_no_data_dependence():
    t = _fused('''\
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(X + offs, mask=offs < n) + tl.load(Y + offs, mask=offs < n)
        tl.atomic_add(Y + offs, v, mask=offs < n)
        ''')
    assert not t.fresh_probe
