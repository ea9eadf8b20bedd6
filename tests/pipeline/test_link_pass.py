"""The link pass (passes/link.py): what a pipeline adds to the kernels that share a tensor, as exact
source, and the one-line refusals. Noop first: a kernel without links is transformed as before."""
from __future__ import annotations

import textwrap

import pytest

from syncopy.errors import KernelError
from syncopy.frontend.source import find_kernel
from syncopy.passes import link, transform
from syncopy.schedule import Schedule

KERNEL = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def k(X, Y, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < n)
        tl.store(Y + offs, x * 2, mask=offs < n)
''')


def _ks(text: str = KERNEL):
    return find_kernel(text, "kern.py", "k")


def _body(ks) -> str:
    return ks.code(ks.func).split(":\n", 1)[1]


def test_noop_without_roles_the_kernel_is_untouched():
    ks = _ks()
    assert _body(link.apply(ks)) == _body(ks)


def test_the_writer_announces_the_chunks_of_rows_it_stored_on_its_link_pad():
    ks = link.apply(_ks(), notify="Y")
    assert next(x for x in ks.code(ks.func).splitlines() if x.startswith("def")) == "def k(X, Y, n, BLOCK: tl.constexpr, syncopy_out_ctx, syncopy_out_signals):"
    assert _body(ks) == textwrap.indent(textwrap.dedent('''\
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < n)
        # syncopy: the chunks of Y this program writes
        syncopy_out_lo, syncopy_out_hi = syncopy_device.chunk_range_masked(Y + offs, offs < n, Y, syncopy_out_ctx, True)
        tl.store(Y + offs, x * 2, mask=offs < n)
        # syncopy: 'Y' feeds the next operator of the pipeline: announce its finished chunks
        syncopy_device.notify_chunks(syncopy_out_signals, syncopy_out_ctx, syncopy_out_lo, syncopy_out_hi)
        '''), "    ")


def test_the_reader_waits_for_the_chunks_it_reads_and_starts_its_tile_after():
    ks = link.apply(_ks(), wait="X")
    assert _body(ks) == textwrap.indent(textwrap.dedent('''\
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        # syncopy: 'X' comes from the operator before it in the pipeline
        # syncopy: wait for the chunks of X this program reads
        syncopy_in_lo, syncopy_in_hi = syncopy_device.chunk_range_masked(X + offs, offs < n, X, syncopy_in_ctx, True)
        syncopy_device.wait_chunks(syncopy_in_signals, syncopy_in_ctx, syncopy_in_lo, syncopy_in_hi)
        syncopy_device.trace_tile_start(syncopy_signals, syncopy_trace, syncopy_ctx, SYNCOPY_TRACE)
        x = tl.load(X + offs, mask=offs < n)
        tl.store(Y + offs, x * 2, mask=offs < n)
        '''), "    ")


def test_a_linked_kernel_goes_through_its_own_schedules_passes():
    t = transform(link.apply(_ks(), wait="X"), Schedule(pattern="reduce_scatter", tensor="Y"))
    fused = t.stages["fused"]
    assert "syncopy_in_ctx, syncopy_in_signals, syncopy_ctx, syncopy_signals" in fused
    assert fused.count("wait_chunks(syncopy_in_signals") == 1 and fused.count("notify_chunks(syncopy_signals") == 1
    assert "syncopy_in_" not in t.stages["probe"].split("syncopy_probe_out")[1]  # the probe slices the link's waits away


def test_a_user_name_in_the_links_namespace_is_still_refused():
    with pytest.raises(KernelError, match="uses the name 'syncopy_in_x'"):
        link.apply(_ks(KERNEL.replace("x = tl.load", "syncopy_in_x = 1\n    x = tl.load")), notify="Y")


def test_a_writer_that_may_return_before_its_store_is_refused_in_one_line():
    text = KERNEL.replace("    x = tl.load", "    if pid > 3:\n        return\n    x = tl.load")
    with pytest.raises(KernelError) as err:
        link.apply(_ks(text), notify="Y")
    assert str(err.value) == ("kern.py:6:1: kernel 'k' may return before its last store into 'Y', which a pipeline links to "
                              "the next operator; a linked kernel must reach its stores on every path (mask them instead of "
                              "returning)")


def test_a_writer_that_never_stores_into_the_shared_tensor_is_refused():
    with pytest.raises(KernelError, match="'X'"):
        link.apply(_ks(), notify="X")
