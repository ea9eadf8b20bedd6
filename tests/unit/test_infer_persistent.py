"""Inference for persistent loops, tensor descriptors and tile-coordinate helpers.

A persistent kernel's wait goes inside its loop, at the start of each tile (`ReadGroup.inner`), and
its rows are a function of the tile id (`tile_start`) so that the runtime can tabulate them per tile
and remap tile ids. Reads through `desc.load([row, col])` bind the row coordinate. Failures are
one-line InferenceErrors at file:line:col naming the schedule key to add.
"""
from __future__ import annotations

import textwrap

import pytest

from syncopy.errors import InferenceError, KernelError
from syncopy.frontend.infer import infer
from syncopy.frontend.source import find_kernel, from_file
from tests.unit.test_infer import BINDING_KEY, HEADER, _rename, _where

HELPER = '''
@triton.jit
def coords(t, nr, nc, G: tl.constexpr):
    per = G * nc
    top = (t // per) * G
    h = min(nr - top, G)
    return top + (t % h), (t % per) // h
'''

SWEEP = HELPER + '''

@triton.jit
def zeta(Q, Wt, Out, m, n, k, TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr, G: tl.constexpr, P: tl.constexpr):
    qd = tl.make_tensor_descriptor(Q, shape=[m, k], strides=[k, 1], block_shape=[TM, TK])
    wd = tl.make_tensor_descriptor(Wt, shape=[k, n], strides=[n, 1], block_shape=[TK, TN])
    od = tl.make_tensor_descriptor(Out, shape=[m, n], strides=[n, 1], block_shape=[TM, TN])
    me = tl.program_id(0)
    nr = tl.cdiv(m, TM)
    nc = tl.cdiv(n, TN)
    for t in range(me, nr * nc, P):
        bi, bj = coords(t, nr, nc, G)
        r0 = bi * TM
        acc = tl.zeros((TM, TN), dtype=tl.float32)
        for kk in range(0, tl.cdiv(k, TK)):
            acc = tl.dot(qd.load([r0, kk * TK]), wd.load([kk * TK, bj * TN]), acc)
        od.store([r0, bj * TN], acc)
'''


def _kernel(body: str, path: str = "user_kernel.py"):
    return find_kernel(HEADER + textwrap.dedent(body), path, "zeta")


def test_for_loop_over_tiles_waits_at_each_tile_start_with_descriptor_rows():
    b = infer(_kernel(SWEEP), "Q", 0)
    loop = b.persistent
    assert (loop.kind, loop.tile, loop.loop_var, loop.step, loop.counters) == ("for", "t", "t", "P", {})
    assert loop.tile_start and loop.remap and loop.index == 6
    (g,) = b.groups
    # Inside the loop, before the K loop (body statement 3), after the helper gave the coordinates.
    assert (g.stmt_index, g.inner, g.tile_start) == (6, (3,), True)
    (a,) = g.accesses
    assert (a.pointer, a.mask, a.desc) == ("r0", None, ("Q", "TM", "m", "k", "(k - 1)"))


def test_renaming_every_user_name_renames_the_persistent_binding():
    mapping = {"Q": "lhs", "t": "job", "coords": "cell", "bi": "row_blk", "r0": "first_row", "qd": "lhs_desc",
               "me": "sm", "P": "NUM_SMS", "TM": "BLOCK_M", "m": "M"}
    ref = infer(_kernel(SWEEP), "Q", 0)
    got = infer(_kernel(_rename(SWEEP, mapping)), "lhs", 0)
    assert (got.persistent.tile, got.persistent.step) == ("job", "NUM_SMS")
    assert [(g.inner, g.tile_start) for g in got.groups] == [(g.inner, g.tile_start) for g in ref.groups]
    (a,) = got.groups[0].accesses
    assert (a.pointer, a.desc) == ("first_row", ("lhs", "BLOCK_M", "M", "k", "(k - 1)"))


def test_function_form_of_the_descriptor_load():
    b = infer(_kernel(SWEEP.replace("qd.load([r0, kk * TK])", "tl.load_tensor_descriptor(qd, [r0, kk * TK])")), "Q", 0)
    assert b.groups[0].accesses[0].pointer == "r0" and b.persistent.remap


def test_while_loop_with_a_counter_stepped_at_the_end():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Q, Out, m, ld, B: tl.constexpr, LANES: tl.constexpr):
            cur = tl.program_id(0)
            jobs = tl.cdiv(m, B)
            while cur < jobs:
                rows = cur * B + tl.arange(0, B)
                v = tl.load(Q + rows[:, None] * ld + tl.arange(0, 16)[None, :], mask=rows[:, None] < m)
                tl.store(Out + rows, tl.sum(v, axis=1), mask=rows < m)
                cur += LANES
        '''), "Q", 0)
    loop = b.persistent
    assert (loop.kind, loop.tile, loop.counters, loop.remap) == ("while", "cur", {"cur": "LANES"}, True)
    assert [(g.inner, g.tile_start) for g in b.groups] == [((1,), True)]


def test_while_test_on_a_counter_stepped_first_turns_the_remap_off():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Q, Out, m, B: tl.constexpr, LANES: tl.constexpr):
            cur = tl.program_id(0) - LANES
            while cur < tl.cdiv(m, B) - LANES:
                cur += LANES
                v = tl.load(Q + cur * B + tl.arange(0, B))
                tl.store(Out + cur * B + tl.arange(0, B), v)
        '''), "Q", 0)
    assert b.persistent.kind == "while" and b.persistent.tile_start and not b.persistent.remap
    assert b.persistent.why_not == "the while test `cur < tl.cdiv(m, B) - LANES` compares the tile id itself"


FLAT = '''
@triton.jit
def zeta(Q, Wt, Out, m, n, k, TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr, SMS: tl.constexpr):
    first = tl.program_id(0)
    gn = tl.cdiv(n, TN)
    kt = tl.cdiv(k, TK)
    mine = tl.cdiv(tl.cdiv(m, TM) * gn - first, SMS)
    qd = tl.make_tensor_descriptor(Q, shape=[m, k], strides=[k, 1], block_shape=[TM, TK])
    tile = first - SMS
    ki = -1
    om = 0
    for _ in range(0, kt * mine):
        ki = tl.where(ki == kt - 1, 0, ki + 1)
        if ki == 0:
            tile += SMS
            om = (tile // gn) * TM
        a = qd.load([om, ki * TK])
        tl.store(Out + om + tl.arange(0, TM), tl.sum(a, axis=1))
'''


def test_flat_loop_waits_at_the_end_of_the_block_that_starts_a_tile():
    b = infer(_kernel(FLAT), "Q", 0)
    loop = b.persistent
    assert (loop.kind, loop.tile, loop.tile_block, loop.remap) == ("flat", "tile", (1,), True)
    # `if ki == 0:` is loop statement 1; its body has 2 statements: the wait goes after them.
    assert [(g.inner, g.tile_start, g.accesses[0].pointer) for g in b.groups] == [((1, 2), True, "om")]


def test_flat_loop_whose_rows_move_every_step_waits_at_each_read():
    # A pointer read mixes rows and the K step: its rows are not a function of the tile alone.
    body = FLAT.replace("a = qd.load([om, ki * TK])", "a = tl.load(Q + (om + tl.arange(0, TM))[:, None] * k + ki * TK + tl.arange(0, TK)[None, :])")
    b = infer(_kernel(body), "Q", 0)
    assert b.persistent.kind == "flat" and not b.persistent.tile_start and not b.persistent.remap
    assert [(g.inner, g.tile_start) for g in b.groups] == [((2,), False)]


def test_second_counter_stepped_like_the_loop_is_remapped_with_it():
    b = infer(_kernel(SWEEP.replace("    for t in range(me, nr * nc, P):", "    tc = me - P\n    for t in range(me, nr * nc, P):")
                      .replace("        od.store([r0, bj * TN], acc)", "        tc += P\n        ci, cj = coords(tc, nr, nc, G)\n        od.store([ci * TM, cj * TN], acc)")), "Q", 0)
    assert b.persistent.counters == {"tc": "P"} and b.persistent.remap


def test_split_k_style_loop_from_a_program_id_keeps_one_wait_before_the_loop():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Q, Out, m, k, B: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
            pm = tl.program_id(0)
            pk = tl.program_id(1)
            rows = pm * B + tl.arange(0, B)
            acc = tl.zeros((B,), dtype=tl.float32)
            for kk in range(pk * BK, k, SPLIT * BK):
                acc += tl.sum(tl.load(Q + rows[:, None] * k + kk + tl.arange(0, BK)[None, :]), axis=1)
            tl.atomic_add(Out + rows, acc)
        '''), "Q", 0)
    assert b.persistent is None
    assert [(g.stmt_index, g.inner) for g in b.groups] == [(4, ())]


def test_state_carried_from_tile_to_tile_turns_the_remap_off():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Q, Out, m, B: tl.constexpr, P: tl.constexpr):
            me = tl.program_id(0)
            dst = Out + me * B
            for t in range(me, tl.cdiv(m, B), P):
                v = tl.load(Q + t * B + tl.arange(0, B))
                tl.store(dst + tl.arange(0, B), v)
                dst += P * B
        '''), "Q", 0)
    assert b.persistent.tile_start and not b.persistent.remap
    assert "dst carried from tile to tile" in b.persistent.why_not


def test_rows_no_function_of_the_tile_alone_wait_before_each_read_when_they_cannot_be_hoisted():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Q, Out, m, B: tl.constexpr, P: tl.constexpr):
            me = tl.program_id(0)
            hop = me * B
            for t in range(me, tl.cdiv(m, B), P):
                v = tl.load(Q + hop + tl.arange(0, B), mask=hop + tl.arange(0, B) < m)
                tl.store(Out + t * B + tl.arange(0, B), v)
                hop = (hop * 3) % m
        '''), "Q", 0)
    assert b.persistent is not None and not b.persistent.tile_start and not b.persistent.remap
    assert [(g.inner, g.tile_start) for g in b.groups] == [((0,), False)]


def test_explicit_rows_go_to_the_tile_start_inside_the_loop():
    b = infer(_kernel(SWEEP), "Q", 0, rows="r0 + tl.arange(0, TM)")
    assert [(g.inner, g.tile_start, g.accesses) for g in b.groups] == [((3,), True, [])]


# --- descriptors inference cannot follow: one-line errors with the key to add ---------------------

DESC_FAILURES = [
    pytest.param(SWEEP.replace("shape=[m, k], strides=[k, 1]", "shape=dims, strides=[k, 1]").replace("G: tl.constexpr, P", "G: tl.constexpr, dims, P"),
                 "tl.make_tensor_descriptor(Q", "needs literal shape=[...], strides=[...] and block_shape=[...]", id="shape-not-a-literal-list"),
    pytest.param(SWEEP.replace("qd.load([r0, kk * TK])", "qd.gather(r0 + tl.arange(0, TM), kk * TK)"),
                 "qd.gather(", "is read through qd.gather", id="gather"),
    pytest.param(SWEEP.replace("qd.load([r0, kk * TK])", "qd.load(where)").replace("        r0 = bi * TM\n", "        r0 = bi * TM\n        where = [r0, 0]\n"),
                 "qd.load(where)", "only desc.load([row, ...]) with a literal coordinate list", id="coordinates-not-a-list"),
    pytest.param(SWEEP.replace("acc = tl.dot(qd.load([r0, kk * TK]), wd.load([kk * TK, bj * TN]), acc)",
                               "acc = tl.dot(my_tile(qd, r0, kk), wd.load([kk * TK, bj * TN]), acc)"),
                 "my_tile(qd", "descriptor 'qd' handed to my_tile", id="descriptor-handed-to-a-helper"),
    pytest.param(SWEEP.replace("    me = tl.program_id(0)\n", "    me = tl.program_id(0)\n    m = m - 1\n"),
                 "tl.make_tensor_descriptor(Q", "depends on m, which the kernel assigns more than once", id="descriptor-argument-reassigned"),
]


@pytest.mark.parametrize(("body", "marker", "what"), DESC_FAILURES)
def test_descriptor_failures_name_the_key_and_the_place(body, marker, what, tmp_path):
    path = tmp_path / "mine.py"
    text = HEADER + textwrap.dedent(body)
    path.write_text(text)
    with pytest.raises(InferenceError) as info:
        infer(from_file(path, "zeta"), "Q", 0)
    err = info.value
    line, col = _where(text, marker)
    assert (err.location.line, err.location.col) == (line, col), str(err)
    assert what in err.message and BINDING_KEY in err.message
    assert str(err) == f"{path}:{line}:{col}: {err.message}" and "\n" not in str(err)


def test_descriptor_reads_bind_dim_0_only():
    with pytest.raises(InferenceError) as info:
        infer(_kernel(SWEEP), "Q", 1)
    assert "shards dim 1" in info.value.message and "along dim 1 of 'Q'" in info.value.message


def test_the_suggested_binding_fixes_descriptor_failures():
    b = infer(_kernel(DESC_FAILURES[1].values[0]), "Q", 0, rows="r0 + tl.arange(0, TM)")
    assert b.groups[0].accesses == [] and b.groups[0].inner == (3,)


def test_writing_through_a_descriptor_of_the_communicated_tensor_is_a_kernel_error(tmp_path):
    text = HEADER + textwrap.dedent(SWEEP.replace("od.store([r0, bj * TN], acc)", "qd.store([r0, 0], acc)"))
    path = tmp_path / "w.py"
    path.write_text(text)
    with pytest.raises(KernelError) as info:
        infer(from_file(path, "zeta"), "Q", 0)
    assert type(info.value) is KernelError
    line, col = _where(text, "qd.store(")
    assert str(info.value).startswith(f"{path}:{line}:{col}: the kernel writes into 'Q' through its tensor descriptor 'qd'")


def test_a_descriptor_made_on_the_host_waits_per_tile_from_its_own_geometry(tmp_path):
    # Issue 31 item 2: a descriptor parameter (TensorDescriptor made on the host) is read as one; the
    # launch remakes it over the gathered tensor, and its waits read its shape, row stride and block.
    text = HEADER + textwrap.dedent('''
        @triton.jit
        def zeta(qd, Out, m, TM: tl.constexpr, P: tl.constexpr):
            me = tl.program_id(0)
            for t in range(me, tl.cdiv(m, TM), P):
                tl.store(Out + t, tl.sum(tl.sum(qd.load([t * TM, 0]), axis=1), axis=0))
        ''')
    path = tmp_path / "host.py"
    path.write_text(text)
    b = infer(from_file(path, "zeta"), "qd", 0)
    assert b.persistent is not None and b.descriptors
    assert [(a.pointer, a.desc) for a in b.groups[0].accesses] == [
        ("t * TM", ("qd", "qd.block_shape[0]", "qd.shape[0]", "qd.strides[0]", "qd.strides[0] - 1"))]


# --- issue 10 case 8: persistent loops the tile remap does not fit --------------------------------

def _waits_kernel(name: str):
    from syncopy.frontend.source import from_file
    from tests.kernels import waits

    return from_file(waits.__file__, name)


@pytest.mark.parametrize(("name", "why"), [
    ("while_own_end", "the while test `tile < end` compares the tile id with a bound of this program's own"),
    ("prefetch_next", "nxt carried from tile to tile"),
    ("stream_k", "acc carried from tile to tile"),
    ("persistent_blocks", "the rows of its first read depend on loaded data, which changes from launch to launch"),
])
def test_a_loop_the_remap_does_not_fit_keeps_its_order(name, why):
    b = infer(_waits_kernel(name), "X", 0)
    assert b.persistent is not None and not b.persistent.remap
    assert b.persistent.why_not == why


def test_a_loop_over_tiles_with_an_inline_swizzle_waits_before_each_read():
    b = infer(_waits_kernel("swizzled_tiles"), "X", 0)
    (g,) = b.groups
    assert g.nested and g.why == "the rows read are not affine in the loop counter"
