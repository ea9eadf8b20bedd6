"""Binding inference: which rows of the communicated tensor each program reads.

Kernels are written in the styles of issue 2 item 3, with names that are not the tutorial's
(no a_ptr, no pid_m): inference follows the pointer arithmetic from the argument, never names.
A renaming test proves it: the same kernel under three naming schemes gives the same binding,
renamed. Failures give an `InferenceError` naming the key to add, located at file:line:col.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from syncopy.errors import InferenceError, KernelError
from syncopy.frontend.infer import BASE_NAME, infer
from syncopy.frontend.source import find_kernel, from_file

HEADER = "import triton\nimport triton.language as tl\n\n\n"
BINDING_KEY = "add `binding: {rows: <expression>}` to the schedule"


def _kernel(body: str, path: str = "user_kernel.py", name: str | None = None):
    return find_kernel(HEADER + textwrap.dedent(body), path, name)


def _accesses(binding):
    return [[(a.pointer, a.mask) for a in g.accesses] for g in binding.groups]


def _where(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """1-based (line, col) of the nth occurrence of `needle` in `text`."""
    at = -1
    for _ in range(nth + 1):
        at = text.index(needle, at + 1)
    line = text.count("\n", 0, at) + 1
    return line, at - (text.rfind("\n", 0, at) + 1) + 1


# --- the styles users write --------------------------------------------------------------------

GROUPED = '''
@triton.jit
def zeta(Lhs, Rhs, Dst, rows_total, cols_total, red, s0, s1, t0, t1, u0, u1,
         T1: tl.constexpr, T2: tl.constexpr, T3: tl.constexpr, G: tl.constexpr):
    w = tl.program_id(axis=0)
    across = tl.cdiv(rows_total, T1)
    down = tl.cdiv(cols_total, T2)
    per = G * down
    gid = w // per
    lead = gid * G
    gsz = min(across - lead, G)
    ti = lead + ((w % per) % gsz)
    tj = (w % per) // gsz
    ri = (ti * T1 + tl.arange(0, T1)) % rows_total
    rj = (tj * T2 + tl.arange(0, T2)) % cols_total
    rr = tl.arange(0, T3)
    cur = Lhs + (ri[:, None] * s0 + rr[None, :] * s1)
    oth = Rhs + (rr[:, None] * t0 + rj[None, :] * t1)
    agg = tl.zeros((T1, T2), dtype=tl.float32)
    for h in range(0, tl.cdiv(red, T3)):
        p = tl.load(cur, mask=rr[None, :] < red - h * T3, other=0.0)
        q = tl.load(oth, mask=rr[:, None] < red - h * T3, other=0.0)
        agg = tl.dot(p, q, agg)
        cur += T3 * s1
        oth += T3 * t0
    tl.store(Dst + ri[:, None] * u0 + rj[None, :] * u1, agg)
'''


def test_tutorial_grouped_1d_launch_with_pointer_advanced_in_the_loop():
    b = infer(_kernel(GROUPED), "Lhs", 0)
    assert (b.tensor, b.base, b.copy_base) == ("Lhs", "Lhs", False)
    assert len(b.groups) == 1
    # One wait before the K loop (statement 15) covers every iteration; `line` is the first read's.
    assert (b.groups[0].stmt_index, b.groups[0].line) == (15, 25)
    # The K mask changes with the loop: the first and last iterations' pointers and the mask term
    # as a difference (v < 0), so that each element counts at the iterations that keep it.
    assert [(a.pointer, a.mask, a.affine) for a in b.groups[0].accesses] == [(
        "cur", None, ("(cur + ((tl.cdiv(red, T3) - 1) * (T3 * s1)))", "(rr[None, :] - red)",
                      "(rr[None, :] - (red - (tl.cdiv(red, T3) - 1) * T3))", "tl.cdiv(red, T3) - 1"))]


def test_the_other_operand_of_the_same_kernel_waits_per_iteration_of_the_k_loop():
    # Rhs gathered along K: its pointer, stepped by T3 * t0, sweeps the rows that `rr[:, None] * t0`
    # spans (issue 31 item 6), so each iteration waits for its own chunks, at its read.
    b = infer(_kernel(GROUPED), "Rhs", 0)
    g = b.groups[0]
    assert (g.stmt_index, g.nested, g.why) == (15, (("body", 1),), "each iteration reads other rows of 'Rhs', so each waits "
                                                                 "for its own chunks")
    assert g.rows_at == ("oth", "(oth + (1 * (T3 * t0)))")
    assert [(a.pointer, a.mask) for a in g.accesses] == [("oth", "rr[:, None] < red - h * T3")]


def test_plain_2d_launch_with_tl_range_keywords_and_swapped_axes():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Lhs, Rhs, Dst, m, n, k, s0, s1, t0, t1, u0, u1, T1: tl.constexpr, T2: tl.constexpr, T3: tl.constexpr):
            ax = tl.program_id(1)
            ay = tl.program_id(0)
            ri = ax * T1 + tl.arange(0, T1)
            rj = ay * T2 + tl.arange(0, T2)
            agg = tl.zeros((T1, T2), dtype=tl.float32)
            for kk in tl.range(0, k, T3, num_stages=2):
                rk = kk + tl.arange(0, T3)
                agg += tl.dot(tl.load(Lhs + ri[:, None] * s0 + rk[None, :] * s1), tl.load(Rhs + rk[:, None] * t0 + rj[None, :] * t1))
            tl.store(Dst + ri[:, None] * u0 + rj[None, :] * u1, agg)
        '''), "Lhs", 0)
    assert _accesses(b) == [[
        ("Lhs + ri[:, None] * s0 + tl.arange(0, T3)[None, :] * s1", None),
        ("Lhs + ri[:, None] * s0 + ((((k - 1) // T3) * T3) + tl.arange(0, T3))[None, :] * s1", None),
    ]]


def test_pointer_built_inside_the_loop_from_the_loop_variable():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Xs, Ws, Ys, MM, KK, sx, sk, BM: tl.constexpr, BK: tl.constexpr):
            a = tl.program_id(0)
            om = a * BM + tl.arange(0, BM)
            acc = tl.zeros((BM,), dtype=tl.float32)
            for kb in range(tl.cdiv(KK, BK)):
                ok = kb * BK + tl.arange(0, BK)
                xp = Xs + om[:, None] * sx + ok[None, :] * sk
                acc += tl.sum(tl.load(xp, mask=(om[:, None] < MM) & (ok[None, :] < KK), other=0.0), axis=1)
            tl.store(Ys + om, acc)
        '''), "Xs", 0)
    assert _accesses(b) == [[
        ("(Xs + om[:, None] * sx + tl.arange(0, BK)[None, :] * sk)", "om[:, None] < MM"),
    ]]


def test_masked_load_of_a_block_of_rows_in_a_non_gemm_kernel():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Src, Scale, Dst, nrows, width, ld, R: tl.constexpr, C: tl.constexpr):
            blk = tl.program_id(0)
            rows = blk * R + tl.arange(0, R)
            cs = tl.arange(0, C)
            keep = (rows[:, None] < nrows) & (cs[None, :] < width)
            vals = tl.load(Src + rows[:, None] * ld + cs[None, :], mask=keep, other=0.0)
            tl.store(Dst + rows[:, None] * ld + cs[None, :], vals * tl.load(Scale + cs)[None, :], mask=keep)
        '''), "Src", 0)
    assert _accesses(b) == [[("Src + rows[:, None] * ld + cs[None, :]", "keep")]]
    assert b.groups[0].stmt_index == 4


def test_one_program_per_row_that_moves_the_argument_itself():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Inp, Gam, Out, ld, ncols, eps, C: tl.constexpr):
            r = tl.program_id(0)
            Inp += r * ld
            Out += r * ld
            total = tl.zeros([C], dtype=tl.float32)
            for c0 in range(0, ncols, C):
                cs = c0 + tl.arange(0, C)
                total += tl.load(Inp + cs, mask=cs < ncols, other=0.0)
            mean = tl.sum(total, axis=0) / ncols
            for c0 in range(0, ncols, C):
                cs = c0 + tl.arange(0, C)
                x = tl.load(Inp + cs, mask=cs < ncols, other=0.0)
                tl.store(Out + cs, x - mean + tl.load(Gam + cs, mask=cs < ncols), mask=cs < ncols)
        '''), "Inp", 0)
    # The argument moves, so chunks are measured against a copy taken at entry.
    assert (b.base, b.copy_base) == (BASE_NAME, True)
    # The second loop reads the very same rows: one wait covers both.
    assert len(b.groups) == 1
    assert _accesses(b)[0][0] == ("Inp + tl.arange(0, C)", None)


def test_argument_reassigned_with_plain_assignment():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Src, Dst, ld, ncols, C: tl.constexpr):
            r = tl.program_id(0)
            Src = Src + r * ld
            cs = tl.arange(0, C)
            v = tl.load(Src + cs, mask=cs < ncols)
            tl.store(Dst + r * ld + cs, v / tl.sum(v, axis=0), mask=cs < ncols)
        '''), "Src", 0)
    assert b.copy_base and _accesses(b) == [[("Src + cs", "cs < ncols")]]


def test_pointer_handed_to_a_helper_not_in_the_file_waits_for_every_chunk():
    # Issue 10 case 5: what the helper reads through the pointer cannot be seen (it used to be taken
    # as the handed block alone), so the read waits for every chunk.
    b = infer(_kernel('''
        @triton.jit
        def zeta(Src, Dst, n, B: tl.constexpr):
            r = tl.program_id(0)
            at = r * B + tl.arange(0, B)
            v = my_reader(Src + at, n)
            tl.store(Dst + at, v)
        '''), "Src", 0)
    assert [[a.every for a in g.accesses] for g in b.groups] == [[True]]


def test_a_helper_in_the_file_is_followed_into_its_own_row_arithmetic():
    # Issue 10 case 5: the helper gets the base pointer and the program id and computes the rows.
    b = infer(_kernel('''
        @triton.jit
        def load_block(P, which, n, B: tl.constexpr, D: tl.constexpr = 8):
            rows = which * B + tl.arange(0, B)
            return tl.load(P + rows[:, None] * D + tl.arange(0, D)[None, :], mask=rows[:, None] < n, other=0.0)


        @triton.jit
        def zeta(Src, Dst, n, B: tl.constexpr):
            r = tl.program_id(0)
            v = load_block(Src, r, n, B)
            tl.store(Dst + r, tl.sum(tl.sum(v, axis=1), axis=0))
        ''', name="zeta"), "Src", 0)
    assert _accesses(b) == [[("Src + (r * B + tl.arange(0, B))[:, None] * 8 + tl.arange(0, 8)[None, :]",
                              "(r * B + tl.arange(0, B))[:, None] < n")]]
    assert not b.no_remap


def test_a_helper_that_asks_for_the_program_id_keeps_tiles_in_order():
    # Issue 10 case 6: only the kernel body's program ids are remapped.
    b = infer(_kernel('''
        @triton.jit
        def my_rows(B: tl.constexpr):
            return tl.program_id(0) * B + tl.arange(0, B)


        @triton.jit
        def zeta(Src, Dst, n, B: tl.constexpr):
            r = tl.program_id(0)
            rows = my_rows(B)
            v = tl.load(Src + rows, mask=rows < n)
            tl.store(Dst + r, tl.sum(v, axis=0))
        ''', name="zeta"), "Src", 0)
    assert b.no_remap == "the helper my_rows calls tl.program_id itself"


@pytest.mark.parametrize(("loop", "rows"), [
    # Issue 10 case 2: a negative step; the last row is 0, not -2.
    ("for i in range(n - 1, -1, -1):\n        v += tl.load(Src + i * 4 + tl.arange(0, 4))",
     ["Src + (n - 1) * 4 + tl.arange(0, 4)", "Src + (n - 1 + (((n - 1) - (-1) - 1) * (-1))) * 4 + tl.arange(0, 4)"]),
    # A triangle: every corner of the two loops, the inner one's bounds taken at each outer end.
    ("for o in range(n):\n        for i in range(o, n):\n            v += tl.load(Src + (2 * o + i) * 4)",
     ["Src", "Src + (n - 1) * 4", "Src + (2 * (n - 1) + (n - 1)) * 4",
      "Src + (2 * (n - 1) + ((n - 1) + (n - (n - 1) - 1))) * 4"]),
])
def test_loop_bounds_are_the_first_and_last_iterations(loop, rows):
    text = ("@triton.jit\ndef zeta(Src, Dst, n):\n    v = tl.zeros([4], dtype=tl.float32)\n"
            f"    {loop}\n    tl.store(Dst + tl.arange(0, 4), v)\n")
    b = infer(_kernel(text), "Src", 0)
    assert [a.pointer for g in b.groups for a in g.accesses] == rows


@pytest.mark.parametrize(("body", "why"), [
    # Issue 10 case 3: a pointer stepped in an inner loop moves more than once per outer iteration.
    ("""p = Src
    for o in range(n):
        for i in range(4):
            v += tl.load(p + tl.arange(0, 4))
            p += 4""", "p changes inside the loop"),
    # An inner trip count that is no affine function of the outer counter: corners are no vertices.
    ("""for o in range(n):
        for i in range(o * o):
            v += tl.load(Src + (o + i) * 4 + tl.arange(0, 4))""", "cannot be bounded by its first and last iterations"),
    # Issue 10 case 4: rows in wrapped order; the first and last iterations bound nothing.
    ("""for i in range(n):
        r = (t + i) % n
        v += tl.load(Src + r * 4 + tl.arange(0, 4))""", "not affine in the loop counter"),
    # Issue 10 case 7 in a loop: rows taken from an index tensor.
    ("""for i in range(n):
        r = tl.load(Idx + i)
        v += tl.load(Src + r * 4 + tl.arange(0, 4))""", "not affine in the loop counter"),
])
def test_reads_no_corner_bounds_wait_inside_the_loop(body, why):
    text = ("@triton.jit\ndef zeta(Src, Idx, Dst, n):\n    t = tl.program_id(0)\n    v = tl.zeros([4], dtype=tl.float32)\n"
            f"    {body}\n    tl.store(Dst + t * 4 + tl.arange(0, 4), v)\n")
    b = infer(_kernel(text), "Src", 0)
    (g,) = b.groups
    assert g.nested and why in g.why, g.why


def test_a_loop_whose_last_iteration_is_masked_off_counts_each_element_where_it_is_kept():
    # Issue 10 case 1: the last iteration's rows are all masked off; the bound must not end there.
    b = infer(_kernel('''
        @triton.jit
        def zeta(Src, Dst, M, BM: tl.constexpr):
            t = tl.program_id(0)
            for i in tl.static_range(4):
                rows = (t * 4 + i) * BM + tl.arange(0, BM)
                mask = rows < M
                tl.store(Dst + rows, tl.load(Src + rows, mask=mask), mask=mask)
        '''), "Src", 0)
    assert [(a.pointer, a.mask, a.affine) for g in b.groups for a in g.accesses] == [(
        "Src + ((t * 4) * BM + tl.arange(0, BM))", None,
        ("Src + ((t * 4 + (4 - 1)) * BM + tl.arange(0, BM))", "(((t * 4) * BM + tl.arange(0, BM)) - M)",
         "(((t * 4 + (4 - 1)) * BM + tl.arange(0, BM)) - M)", "4 - 1"))]


def test_a_loop_dependent_mask_of_another_form_is_left_out_and_offsets_clamped():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Src, Dst, M, BM: tl.constexpr):
            t = tl.program_id(0)
            for i in tl.static_range(4):
                rows = (t * 4 + i) * BM + tl.arange(0, BM)
                tl.store(Dst + rows, tl.load(Src + rows, mask=rows != M + i), mask=rows < M)
        '''), "Src", 0)
    assert [(a.mask, a.clamped, a.affine) for g in b.groups for a in g.accesses] == [(None, True, None)] * 2


def test_rows_chosen_by_loaded_indices_never_come_from_the_probe_table():
    # Issue 10 case 7: the probe table is kept per launch shape, indices change per launch.
    b = infer(_kernel('''
        @triton.jit
        def zeta(Src, Idx, Dst, B: tl.constexpr):
            t = tl.program_id(0)
            row = tl.load(Idx + t)
            v = tl.load(Src + row * B + tl.arange(0, B))
            tl.store(Dst + t * B + tl.arange(0, B), v)
        '''), "Src", 0)
    assert b.groups[0].data and "loaded data" in b.no_remap


def test_explicit_rows_skip_inference_and_place_the_wait_at_the_first_read():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Src, Dst, n, B: tl.constexpr):
            r = tl.program_id(0)
            p = Src + r * B
            while p < Src + n:
                tl.store(Dst + r, tl.load(p))
                p += 1
        '''), "Src", 0, rows="r * B + tl.arange(0, B)")
    assert b.explicit_rows == "r * B + tl.arange(0, B)"
    assert [(g.stmt_index, g.accesses) for g in b.groups] == [(2, [])]


# --- names are the user's: inference never matches on them ------------------------------------

_SCHEMES = {
    "tutorial": {},
    "terse": {"Lhs": "q", "Rhs": "k", "Dst": "o", "w": "i", "ti": "m", "tj": "n", "cur": "qp", "oth": "kp", "T1": "X", "rr": "z"},
    "tutorial-names-on-the-other-operand": {
        "Lhs": "b_ptr", "Rhs": "a_ptr", "w": "pid", "ti": "pid_n", "tj": "pid_m", "ri": "offs_bn", "rj": "offs_am",
        "cur": "b_ptrs", "oth": "a_ptrs", "T1": "BLOCK_N", "T2": "BLOCK_M", "T3": "BLOCK_K",
    },
}


def _rename(text: str, mapping: dict[str, str]) -> str:
    if not mapping:
        return text
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, mapping), key=len, reverse=True)) + r")\b")
    return pattern.sub(lambda m: mapping[m.group(1)], text)


@pytest.mark.parametrize("scheme", list(_SCHEMES))
def test_renaming_every_user_name_renames_the_binding(scheme):
    mapping = _SCHEMES[scheme]
    reference = infer(_kernel(GROUPED), "Lhs", 0)
    renamed = infer(_kernel(_rename(GROUPED, mapping)), mapping.get("Lhs", "Lhs"), 0)
    assert _accesses(renamed) == [[(_rename(p, mapping), m and _rename(m, mapping)) for p, m in g] for g in _accesses(reference)]
    assert [g.line for g in renamed.groups] == [g.line for g in reference.groups]


def test_tutorial_names_do_not_decide_which_tensor_is_followed():
    # `a_ptr`/`pid_m` are present but the communicated tensor is b_ptr, indexed by program axis 1.
    b = infer(_kernel('''
        @triton.jit
        def zeta(a_ptr, b_ptr, c_ptr, M, N, stride_am, stride_bn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            pid_m = tl.program_id(0)
            pid_n = tl.program_id(1)
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            x = tl.load(a_ptr + offs_m * stride_am)
            y = tl.load(b_ptr + offs_n * stride_bn)
            tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], x[:, None] * y[None, :])
        '''), "b_ptr", 0)
    assert _accesses(b) == [[("b_ptr + offs_n * stride_bn", None)]]
    assert b.groups[0].stmt_index == 5


# --- where inference gives up: InferenceError with the key to add, at file:line:col -----------

FAILURES = [
    pytest.param(
        '''
        @triton.jit
        def zeta(Q, out, n, s0, s1, B: tl.constexpr):
            t = tl.program_id(0)
            blockp = tl.make_block_ptr(base=Q, shape=(n, n), strides=(s0, s1), offsets=(t * B, 0), block_shape=(B, B), order=(1, 0))
            tl.store(out + t, tl.sum(tl.sum(tl.load(blockp), axis=1), axis=0))
        ''',
        "tl.make_block_ptr(",
        "is read through tl.make_block_ptr",
        id="block-pointer",
    ),
    pytest.param(
        '''
        @triton.jit
        def zeta(Q, out, n, B: tl.constexpr):
            t = tl.program_id(0)
            tl.store(out + t, t)
        ''',
        "def zeta",
        "kernel 'zeta' never loads from 'Q'",
        id="tensor-never-read",
    ),
]


# --- reads no bound before the loop can cover: a wait right before the read (issue 10) ----------

FALLBACKS = [
    pytest.param(
        '''
        @triton.jit
        def zeta(Q, out, n, B: tl.constexpr):
            t = tl.program_id(0)
            walker = Q + t * B
            acc = 0.0
            while walker < Q + t * B + n:
                acc += tl.load(walker)
                walker += 1
            tl.store(out + t, acc)
        ''',
        "tl.load(walker)",
        "walker changes inside the loop",
        id="while-loop-moves-the-pointer",
    ),
    pytest.param(
        '''
        @triton.jit
        def zeta(Q, out, n, B: tl.constexpr):
            t = tl.program_id(0)
            o = t * B + tl.arange(0, B)
            for it in user_iterator(n):
                tl.store(out + o, tl.load(Q + o + it))
        ''',
        "tl.load(Q + o + it)",
        "the loop `for ... in user_iterator(n)` is not a range",
        id="loop-over-something-not-a-range",
    ),
    pytest.param(
        '''
        @triton.jit
        def zeta(Q, out, n, B: tl.constexpr):
            t = tl.program_id(0)
            hop = Q + t * B + tl.arange(0, B)
            for it in range(n):
                tl.store(out + it, tl.sum(tl.load(hop), axis=0))
                hop = hop * 2
        ''',
        "tl.load(hop)",
        "hop changes inside the loop",
        id="pointer-carried-around-the-loop-non-affinely",
    ),
]


@pytest.mark.parametrize(("body", "marker", "why"), FALLBACKS)
def test_a_read_no_bound_covers_waits_right_before_itself(body, marker, why):
    text = HEADER + textwrap.dedent(body)
    b = infer(_kernel(body), "Q", 0)
    (g,) = b.groups
    assert g.nested and why in g.why
    assert g.line == _where(text, marker)[0]
    assert b.no_remap  # its first read waits inside its loop (or a helper it cannot read)


@pytest.fixture
def old_triton(monkeypatch):
    """A Triton that still runs block pointers (before 3.9; tests/unit/test_block_pointers.py has 3.9's advice)."""
    from syncopy.frontend import infer as inference

    monkeypatch.setattr(inference, "block_pointers_removed", lambda: False)


@pytest.mark.parametrize(("body", "marker", "what"), FAILURES)
def test_inference_failure_names_the_key_and_the_place(body, marker, what, tmp_path, old_triton):
    path = tmp_path / "mine.py"
    text = HEADER + textwrap.dedent(body)
    path.write_text(text)
    with pytest.raises(InferenceError) as info:
        infer(from_file(path, "zeta"), "Q", 0)
    err = info.value
    line, col = _where(text, marker)
    assert (err.location.file, err.location.line, err.location.col) == (str(path), line, col)
    assert what in err.message
    assert BINDING_KEY in err.message
    assert str(err) == f"{path}:{line}:{col}: {err.message}"
    assert "\n" not in str(err)


def test_the_hint_names_the_tensor_and_dim(old_triton):
    with pytest.raises(InferenceError) as info:
        infer(_kernel(FAILURES[0].values[0]), "Q", 1)
    assert "indices along dim 1 of 'Q'" in info.value.message


def test_block_pointer_hint_names_the_schedules_dim(old_triton):
    with pytest.raises(InferenceError) as info:
        infer(_kernel(FAILURES[0].values[0]), "Q", 1)
    assert "along dim 1 of 'Q'" in info.value.message


def test_block_pointer_works_once_the_suggested_binding_is_given(old_triton):
    b = infer(_kernel(FAILURES[0].values[0]), "Q", 0, rows="t * B + tl.arange(0, B)")
    assert b.explicit_rows == "t * B + tl.arange(0, B)"


@pytest.mark.parametrize("body", [p.values[0] for p in FALLBACKS], ids=["while", "iterator", "non-affine"])
def test_the_suggested_binding_fixes_the_failure(body):
    b = infer(_kernel(body), "Q", 0, rows="t * B + tl.arange(0, B)")
    assert len(b.groups) == 1 and b.groups[0].accesses == []


# --- kernel errors ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("write", "call"),
    [("tl.store(Q + o, v * 2)", "tl.store"), ("tl.atomic_add(Q + o, v)", "tl.atomic_add"), ("tl.atomic_xchg(Q + o, v)", "tl.atomic_xchg")],
)
def test_writing_into_the_communicated_tensor_is_a_kernel_error(write, call, tmp_path):
    text = HEADER + textwrap.dedent(f'''
        @triton.jit
        def zeta(Q, out, n, B: tl.constexpr):
            t = tl.program_id(0)
            o = t * B + tl.arange(0, B)
            v = tl.load(Q + o)
            tl.store(out + o, v)
            {write}
        ''')
    path = tmp_path / "writer.py"
    path.write_text(text)
    with pytest.raises(KernelError) as info:
        infer(from_file(path, "zeta"), "Q", 0)
    err = info.value
    assert type(err) is KernelError  # not an inference problem: no binding key can fix it
    line, col = _where(text, write)
    assert str(err).startswith(f"{path}:{line}:{col}: the kernel writes into 'Q' ({call})")
    assert "write results to another argument" in err.message


def test_unknown_argument_lists_the_arguments():
    with pytest.raises(KernelError) as info:
        infer(_kernel(GROUPED, "g.py"), "lhs", 0)
    assert str(info.value) == (
        "g.py:7:1: kernel 'zeta' has no argument 'lhs'; its arguments are Lhs, Rhs, Dst, rows_total, cols_total, red, "
        "s0, s1, t0, t1, u0, u1, T1, T2, T3, G; set `tensor:` to the communicated one"
    )


_GATHER = '''
@triton.jit
def zeta(Ids, Table, out, n, ld, B: tl.constexpr, D: tl.constexpr):
    t = tl.program_id(0)
    o = t * B + tl.arange(0, B)
    ids = tl.load(Ids + o, mask=o < n, other=0)
    rows = tl.load(Table + ids[:, None] * ld + tl.arange(0, D)[None, :])
    tl.store(out + o[:, None] * D + tl.arange(0, D)[None, :], rows)
'''


def test_values_loaded_from_the_tensor_are_not_pointers_into_it():
    b = infer(_kernel(_GATHER), "Ids", 0)
    assert _accesses(b) == [[("Ids + o", "o < n")]]


def test_scatter_indexed_by_loaded_values_is_not_a_write_into_the_tensor():
    b = infer(_kernel('''
        @triton.jit
        def zeta(Ids, out, n, B: tl.constexpr):
            t = tl.program_id(0)
            o = t * B + tl.arange(0, B)
            ids = tl.load(Ids + o, mask=o < n, other=0)
            tl.store(out + ids, o, mask=o < n)
        '''), "Ids", 0)
    assert _accesses(b) == [[("Ids + o", "o < n")]]


def test_internal_paths_stay_out_of_messages():
    for body, *_ in (p.values for p in FAILURES):
        with pytest.raises(InferenceError) as info:
            infer(_kernel(body, "k.py"), "Q", 0)
        assert "syncopy/" not in str(info.value) and ".py" not in str(info.value).split(": ", 1)[1]


def test_location_of_a_file_path_is_kept_verbatim(tmp_path):
    path = tmp_path / "sub dir" / "kernel file.py"
    path.parent.mkdir()
    path.write_text(HEADER + textwrap.dedent(FAILURES[1].values[0]))
    with pytest.raises(InferenceError) as info:
        infer(from_file(path, "zeta"), "Q", 0)
    assert info.value.location.file == str(path) and Path(info.value.location.file).exists()


def test_a_read_in_a_while_test_is_refused_naming_the_read(tmp_path):
    # No wait can go before a test that runs again every iteration: one line, at the read.
    text = HEADER + textwrap.dedent('''
        @triton.jit
        def zeta(Q, out, n):
            i = 0
            while tl.load(Q + i) > 0:
                i += 1
            tl.store(out, i)
        ''')
    path = tmp_path / "w.py"
    path.write_text(text)
    with pytest.raises(InferenceError) as info:
        infer(from_file(path, "zeta"), "Q", 0)
    line, col = _where(text, "tl.load(Q + i)")
    assert str(info.value).startswith(f"{path}:{line}:{col}: 'Q' is read in the test of a while loop")
    assert "\n" not in str(info.value)


def test_methods_on_the_kernels_own_values_are_not_helpers():
    # `v.sum(...)` is no helper that could hide tl.program_id or a load: tiles are still remapped.
    b = infer(_kernel('''
        @triton.jit
        def zeta(Src, Dst, B: tl.constexpr):
            r = tl.program_id(0)
            v = tl.load(Src + r * B + tl.arange(0, B))
            tl.store(Dst + r, v.sum(axis=0))
        '''), "Src", 0)
    assert not b.no_remap and not b.groups[0].data


@pytest.mark.parametrize("body, bases", [
    # The pointer a store starts from, not the sizes and strides that offset it (what `transform
    # --loadable` writes an extent probe for: tests/unit/test_load.py).
    ("def k(X, C, M, N, stride_cm, BM: tl.constexpr):\n"
     "    rm = tl.program_id(0) * BM + tl.arange(0, BM)\n"
     "    c_ptrs = C + rm[:, None] * stride_cm + tl.arange(0, 8)[None, :]\n"
     "    tl.store(c_ptrs, tl.load(X + rm), mask=rm[:, None] < M)\n", ["C"]),
    ("def k(X, Y, Z, N):\n"
     "    i = tl.arange(0, 8)\n"
     "    tl.store(Y + i * N, tl.load(X + i))\n"
     "    tl.atomic_add(Z + N + i, 1.0)\n", ["Y", "Z"]),
    ("def k(X, Out, M, N):\n"
     "    desc = tl.make_tensor_descriptor(Out, shape=[M, N], strides=[N, 1], block_shape=[8, 8])\n"
     "    desc.store([0, 0], tl.load(X + tl.arange(0, 8)[:, None] * N + tl.arange(0, 8)[None, :]))\n", []),
    # (a descriptor's stores stop at the shape it was made with: no extent to check)
])
def test_written_bases_are_the_pointers_stores_start_from(body, bases):
    from syncopy.frontend.infer import written_bases

    assert written_bases(_kernel("@triton.jit\n" + body, name="k")) == bases
