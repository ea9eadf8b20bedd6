"""Issue 31, items 1, 3 and 9: helpers are followed wherever they are defined. A call resolves to a
@triton.jit function of the kernel's file or of a module it imports, to a Triton builtin under another
name, or to Python's own function; what syncopy cannot find is said, in one true line, to be unseen.
Kernels are written into a package of their own on sys.path, as a user's are."""
from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from syncopy.errors import KernelError
from syncopy.frontend import helpers
from syncopy.frontend.infer import infer
from syncopy.frontend.source import from_file
from syncopy.passes.pipeline import transform
from syncopy.schedule import Schedule

EXT = '''
import triton
from triton import language as tl


@triton.jit
def program_id(axis: int) -> tl.tensor:
    return tl.program_id(axis).to(tl.int64)


@triton.jit
def scaled_id(axis: int):
    """Does more than hand the id back: not inlined."""
    return tl.program_id(axis) * 2


@triton.jit
def exp(x):
    return tl.exp(x)


@triton.jit
def calls_unknown(x):
    return mystery(x)


triton_cast = tl.cast
my_load = tl.load
'''

HEAD = '''
import triton
import triton.language as tl

from hxmods import ext as tle
from hxmods.ext import calls_unknown, exp, my_load, triton_cast

local_cast = tl.cast
'''

ROWS = '''
@triton.jit
def kern(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    pid = {pid}
    rows = pid * BR + tl.arange(0, BR)
    c = tl.arange(0, NC)
    v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
    tl.store(out + rows[:, None] * NC + c[None, :], {value}, mask=rows[:, None] < M)
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    """hxmods/ext.py (the helper module) on sys.path; returns a writer of hxmods/kern.py."""
    pkg = tmp_path / "hxmods"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ext.py").write_text(textwrap.dedent(EXT))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "hxmods" or m.startswith("hxmods.")]:
        monkeypatch.delitem(sys.modules, name)  # finding hxmods.ext imports hxmods: this test's, not an earlier one's
    importlib.invalidate_caches()

    def write(text: str, head: str = HEAD):
        (pkg / "kern.py").write_text(textwrap.dedent(head) + textwrap.dedent(text))
        return from_file(pkg / "kern.py", "kern")
    return write


def _fused(ks, pattern="all_gather", tensor="X", **keys):
    return transform(ks, Schedule(pattern=pattern, kernel=ks.name, tensor=tensor, **keys))


def _notes(t) -> list[str]:
    return [line.strip() for line in t.code().splitlines() if line.strip().startswith("# syncopy: tiles keep")]


def test_a_program_id_handed_back_by_a_helper_of_another_module_is_remapped(package):
    t = _fused(package(ROWS.format(pid="tle.program_id(0)", value="v")))
    assert t.remapped and _notes(t) == []
    assert "    pid = syncopy_pid0.to(tl.int64)\n" in t.code()


@pytest.mark.parametrize("pattern", ["reduce_scatter", "all_reduce"])
def test_a_producer_takes_its_program_id_from_a_helper_of_another_module(package, pattern):
    t = _fused(package(ROWS.format(pid="tle.program_id(0)", value="v * 2")), pattern, "out")
    assert t.remapped and "    pid = syncopy_pid0.to(tl.int64)\n" in t.code()


def test_a_producer_whose_only_program_id_a_helper_changes_is_refused_in_one_true_line(package):
    with pytest.raises(KernelError) as info:
        _fused(package(ROWS.format(pid="tle.scaled_id(0)", value="v")), "reduce_scatter", "out")
    assert info.value.message == (
        "kernel 'kern' takes its program id only from a helper (the helper tle.scaled_id calls tl.program_id itself), "
        "which the tile remap cannot reach; call tl.program_id(axis) in the kernel itself")


@pytest.mark.parametrize("value", ["exp(v)", "triton_cast(v, tl.float16)", "local_cast(v, tl.float16)", "tle.exp(v)",
                                   "isinstance(v, tl.tensor) * v"],
                         ids=["imported-helper", "imported-alias", "local-alias", "module-helper", "python-builtin"])
def test_helpers_of_other_modules_and_aliases_of_builtins_leave_the_tiles_reordered(package, value):
    t = _fused(package(ROWS.format(pid="tl.program_id(0)", value=value)))
    assert t.remapped and _notes(t) == [] and t.binding.no_remap == ""


@pytest.mark.parametrize("pid, value, why", [
    ("tle.scaled_id(0)", "v", "the helper tle.scaled_id calls tl.program_id itself"),
    ("tl.program_id(0)", "nowhere(v)", "the helper nowhere is not a @triton.jit function of this file or of a module it "
                                       "imports, so syncopy cannot see whether it calls tl.program_id"),
    ("tl.program_id(0)", "calls_unknown(v)", "the helper calls_unknown calls mystery, which is not a @triton.jit function "
                                             "of this file or of a module it imports, so syncopy cannot see whether it calls "
                                             "tl.program_id"),
], ids=["calls-program-id", "not-found", "calls-what-is-not-found"])
def test_tiles_keep_their_order_where_a_helper_reads_the_program_id_or_cannot_be_seen(package, pid, value, why):
    t = _fused(package(ROWS.format(pid=pid, value=value)))
    assert not t.remapped and _notes(t) == [f"# syncopy: tiles keep their launch order: {why}"]


def test_a_program_id_helper_is_inlined_only_where_its_names_mean_the_same_in_the_kernels_file(package):
    head = HEAD.replace("import triton.language as tl\n", "import triton.language as tl\nfrom hxmods import ext as tle\n")
    head = head.replace("import triton.language as tl\n", "import triton.language as lang\ntl = None\n", 1)
    ks = package(ROWS.format(pid="tle.program_id(0)", value="v").replace("tl.", "lang."), head)
    assert helpers.inline_program_ids(ks) is ks
    assert infer(ks, "X", 0).no_remap == "the helper tle.program_id calls tl.program_id itself"


def test_a_helper_of_the_kernels_file_named_program_id_is_not_taken_for_tritons(package):
    text = textwrap.dedent('''
        @triton.jit
        def program_id(axis):
            return tl.program_id(axis) * 2 + 1
        ''') + ROWS.format(pid="program_id(0)", value="v")
    t = _fused(package(text))
    assert not t.remapped and "    pid = program_id(0)\n" in t.code()
    assert _notes(t) == ["# syncopy: tiles keep their launch order: the helper program_id calls tl.program_id itself"]


_BOUNDED = ("        syncopy_lo, syncopy_hi = syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], "
            "rows[:, None] < M, X, syncopy_ctx, True)\n")


def test_a_read_through_a_builtin_another_module_renames_is_that_builtin(package):
    text = ROWS.format(pid="tl.program_id(0)", value="v").replace("v = tl.load(", "v = my_load(")
    t = _fused(package(text))
    assert _BOUNDED in t.code() and "every chunk" not in t.code(), t.code()
    assert "    v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)\n" in t.code()


_NO_TL = ROWS.replace("tl.program_id", "program_id").replace("tl.arange", "arange").replace("tl.store", "store") \
    .replace("tl.constexpr", "triton.language.constexpr")


@pytest.mark.parametrize("head, text, spelled", [
    (HEAD + "\nown_load = tl.load\n", ROWS, "tl.load"),
    ("import triton\nimport triton.language as tl\nfrom triton.language import load as own_load\n", ROWS, "tl.load"),
    ("import triton\nfrom triton.language import load as own_load, program_id, arange, store\n", _NO_TL, "triton.language.load"),
], ids=["assigned", "imported", "imported-without-tl"])
def test_a_read_through_a_builtin_this_file_renames_is_that_builtin(package, head, text, spelled):
    pid = "program_id(0)" if text is _NO_TL else "tl.program_id(0)"
    t = _fused(package(text.format(pid=pid, value="v").replace("v = tl.load(", "v = own_load("), head))
    assert _BOUNDED.replace("tl.arange", "arange") in t.code().replace("tl.arange", "arange"), t.code()
    assert "every chunk" not in t.code()
    assert f"    v = {spelled}(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)\n" in t.code()


def test_a_read_through_a_renamed_builtin_in_a_helper_is_followed(package):
    text = ROWS.format(pid="tl.program_id(0)", value="v").replace(
        "    v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)\n",
        "    v = rows_of(X, rows, c, M, NC)\n") + textwrap.dedent('''

        @triton.jit
        def rows_of(P, rows, c, M, NC: tl.constexpr):
            return own_load(P + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
        ''')
    t = _fused(package(text, HEAD + "\nown_load = tl.load\n"))
    assert "every chunk" not in t.code(), t.code()
    assert "syncopy_device.chunk_range_masked(X + rows[:, None] * NC + c[None, :], rows[:, None] < M, X, syncopy_ctx, True)" in t.code()


# --- the attention tutorial's descriptor helper ---------------------------------------------------

def _attention(name: str):
    path = importlib.import_module("tests.kernels.attention_descriptors").__file__
    ks = from_file(path, name)
    tensors = {"attn_desc_in_kernel": ["K", "V"]}.get(name, ["desc_k", "desc_v"])
    return ks, transform(ks, Schedule(pattern="all_gather", kernel=name, tensor=tensors, chunks_per_rank=2))


def test_isinstance_in_the_tutorials_descriptor_helper_is_no_helper_that_reads_the_program_id():
    ks, t = _attention("attn_desc_by_helper")
    assert helpers.program_id_helper(ks) == "" and t.remapped


@pytest.mark.parametrize("name", ["attn_desc_by_helper", "attn_desc_imported", "attn_desc_in_kernel"])
def test_descriptors_made_by_a_helper_or_in_the_kernel_are_followed_into_the_key_value_helper(name):
    _, t = _attention(name)
    k = "syncopy_base_desc_k" if name != "attn_desc_in_kernel" else "K"
    off_band = ["(offset_y + 0)", "((offset_y + 0) + ((((start_m * BLOCK_M) - 0 - 1) // BLOCK_N) * BLOCK_N))"]
    band = ["(offset_y + (start_m * BLOCK_M))",
            "((offset_y + (start_m * BLOCK_M)) + (((((start_m + 1) * BLOCK_M) - (start_m * BLOCK_M) - 1) // BLOCK_N) * BLOCK_N))"]
    for b in (t.binding, *t.others):
        assert [[a.pointer for a in g.accesses] for g in b.groups] == [off_band, band]
        assert {a.desc for g in b.groups for a in g.accesses} == {(b.base if k != "K" else b.tensor, "BLOCK_N", "y_dim", "HEAD_DIM", "(HEAD_DIM - 1)")}
    assert (f"syncopy_device.desc_chunk_range({k}, (offset_y + 0), BLOCK_N, y_dim, HEAD_DIM, (HEAD_DIM - 1), {k}, "
            "syncopy_ctx)") in t.code()


def test_the_tutorials_stage_branches_inside_the_helper_are_resolved_at_each_call():
    # `_attend_stage(..., 4 - STAGE, ...)` under `if STAGE & 1:`, then `_attend_stage(..., 2, ...)` under
    # `if STAGE & 2:`: the first call's wait holds the helper's three arms under its tests in the kernel's
    # names; at the second, `2 == 1` and `2 == 2` are decided now, and only the band is left.
    _, t = _attention("attn_stage_branches")
    off_band = ["(offset_y + 0)", "((offset_y + 0) + ((((start_m * BLOCK_M) - 0 - 1) // BLOCK_N) * BLOCK_N))"]
    band = ["(offset_y + (start_m * BLOCK_M))",
            "((offset_y + (start_m * BLOCK_M)) + (((((start_m + 1) * BLOCK_M) - (start_m * BLOCK_M) - 1) // BLOCK_N) * BLOCK_N))"]
    whole = ["(offset_y + 0)", "((offset_y + 0) + (((N_CTX - 0 - 1) // BLOCK_N) * BLOCK_N))"]
    first, second = ("STAGE & 1", True), ("STAGE & 2", True)
    one, two = ("(4 - STAGE) == 1", True), ("(4 - STAGE) == 2", True)
    not_one, not_two = ("(4 - STAGE) == 1", False), ("(4 - STAGE) == 2", False)
    for b in (t.binding, *t.others):
        assert [[(a.pointer, a.guard) for a in g.accesses] for g in b.groups] == [
            [(p, (first, one)) for p in off_band] + [(p, (first, not_one, two)) for p in band]
            + [(p, (first, not_one, not_two)) for p in whole],
            [(p, (second,)) for p in band]]
    assert "# syncopy: wait for every chunk" not in t.code()


def test_checked_mode_calls_the_key_value_helper_as_written_and_says_it_does_not_look_inside():
    # (it refused the kernel before: "a call of _attend_stage handed pointers into two listed tensors")
    from syncopy.passes import read_check

    _, t = _attention("attn_stage_branches")
    checked = read_check.apply(t)
    code = checked.stages["fused"]
    # ... and says it once, located, where the user looks: a warning at the build (the CLI's stderr).
    lines = read_check.unchecked_lines(checked)
    assert len(lines) == 1 and lines[0].endswith(
        "'attn_stage_branches': checked mode cannot look inside _attend_stage (it is handed the tensor descriptors desc_k and "
        "desc_v, and checked mode checks reads through a descriptor only in the kernel itself): what it reads or stores of "
        "the communicated tensor is not checked"), lines
    assert ".py:" in lines[0].split("'")[0], lines
    note = ("        # syncopy: checked mode cannot look inside _attend_stage (it is handed the tensor descriptors desc_k and "
            "desc_v, and checked mode checks reads through a descriptor only in the kernel itself): its accesses of this "
            "tensor are not checked\n        acc, l_i, m_i = _attend_stage(")
    assert code.count(note) == 2, code
    assert "syncopy_checked__attend" not in code


def test_a_descriptor_helper_handed_a_descriptor_makes_none_and_waits_for_every_chunk(package):
    text = '''
    @triton.jit
    def mk(desc_or_ptr, shape, strides, block_shape):
        if isinstance(desc_or_ptr, tl.tensor_descriptor):
            return desc_or_ptr
        else:
            return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)


    @triton.jit
    def kern(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
        pid = tl.program_id(0)
        d = tl.make_tensor_descriptor(X, shape=[M, NC], strides=[NC, 1], block_shape=[BR, NC])
        e = mk(d, shape=[M, NC], strides=[NC, 1], block_shape=[BR, NC])
        tl.store(out + (pid * BR + tl.arange(0, BR))[:, None] * NC + tl.arange(0, NC)[None, :], e.load([pid * BR, 0]))
    '''
    b = infer(package(text), "X", 0)
    assert [[(a.every, a.why) for a in g.accesses] for g in b.groups] == [
        [(True, "'e' is a tensor descriptor syncopy did not see made")]]


def test_a_store_into_the_gathered_input_in_a_helper_of_another_module_is_refused_at_the_store(package, tmp_path):
    (tmp_path / "hxmods" / "ext.py").write_text(textwrap.dedent(EXT) + textwrap.dedent('''

        @triton.jit
        def bump(P, rows, NC: tl.constexpr):
            tl.store(P + rows[:, None] * NC + tl.arange(0, NC)[None, :], 0.0)
        '''))
    text = ROWS.format(pid="tl.program_id(0)", value="v").replace("    tl.store(out", "    tle.bump(X, rows, NC)\n    tl.store(out")
    with pytest.raises(KernelError) as info:
        infer(package(text), "X", 0)
    ext = tmp_path / "hxmods" / "ext.py"
    line = ext.read_text().splitlines().index("    tl.store(P + rows[:, None] * NC + tl.arange(0, NC)[None, :], 0.0)") + 1
    assert str(info.value) == (f"{ext}:{line}:5: the kernel writes into 'X' (tl.store in helper 'bump', handed it as 'P'); an "
                               "all-gathered input is read-only, so write results to another argument")


def test_a_checked_build_warns_once_for_each_helper_it_cannot_look_inside():
    # The decorator's build (runtime/launch/kernel.py) says it as a warning, not only as a comment of
    # the rewritten source nobody reads: no warning means every access is checked.
    import warnings

    import syncopy
    from syncopy.errors import SyncopyUncheckedWarning
    from tests.kernels import attention_descriptors

    schedule = Schedule(pattern="all_gather", kernel="attn_stage_branches", tensor=["desc_k", "desc_v"], chunks_per_rank=2)
    fused = syncopy.overlap(schedule, timeout_s=5.0, checked=True)(attention_descriptors.attn_stage_branches)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert fused.build().checked
    said = [str(w.message) for w in seen if issubclass(w.category, SyncopyUncheckedWarning)]
    assert len(said) == 1 and "checked mode cannot look inside _attend_stage" in said[0], said
