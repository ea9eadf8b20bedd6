"""Issue 30, part A, without ranks: a loop over the gathered rows runs in chunk-arrival order only
where passes/loop_order.py proves its whitelist; anything else keeps its written order with a comment
that says why, and `loop_order: arrival` on it is one located line. The kernels of
tests/kernels/loops.py run on CPU worlds in tests/world/test_loop_order.py; the goldens
loop_written_* show the transformed source of each numbered case.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import syncopy
from syncopy.errors import KernelError
from syncopy.frontend.source import find_kernel, from_file
from syncopy.passes import transform
from syncopy.schedule import loads
from tests.kernels import loops

KERNELS = Path(loops.__file__)
KEPT = "# syncopy: this loop keeps its written order (each iteration waits for its own chunks): it "
ARRIVAL = "for syncopy_t in range(0, syncopy_n):"


def _schedule(kernel: str, tensor: str = "X", extra: str = ""):
    return loads(f"pattern: all_gather\nkernel: {kernel}\ntensor: {tensor}\ndim: 0\nchunks_per_rank: 2\n{extra}")


def _code(text: str, name: str, tensor: str = "X", extra: str = "") -> str:
    return transform(find_kernel(text, "k.py", name), _schedule(name, tensor, extra)).code()


def _why(code: str) -> str | None:
    """The reason a kept loop gives, None where the loop runs in arrival order."""
    kept = [line.strip()[len(KEPT):] for line in code.splitlines() if line.strip().startswith(KEPT)]
    assert (ARRIVAL in code) != bool(kept)
    return kept[0] if kept else None


# --- the kernels of the world tests: the decision and its reason, then the forced order refused ---

WHY = {
    "decayed_sum_with_max": "carries 'acc' from iteration to iteration (rescaled by 0.5, which is not the online-softmax rescale",
    "decayed_sum_two_step_max": "carries 'acc' from iteration to iteration (rescaled by 0.5, which is not the online-softmax rescale",
    "rescaled_plain_sum": "carries 'acc' from iteration to iteration (rescaled, but its term tl.sum(x, 0) is not linear in the softmax weights",
    "sum_of_running_max": "carries 's' from iteration to iteration (its update reads 'top', which also changes",
    "count_new_records": "carries 'n' from iteration to iteration (its update reads 'top', which also changes",
    "sum_until_max_passes": "carries 's' from iteration to iteration (its update reads 'top', which also changes",
    "max_of_running_sum": "carries 's' from iteration to iteration (an accumulator read outside its own update)",
    "sum_above_running_min": "carries 'low' from iteration to iteration (a running max or min whose new value 'low_new' is read elsewhere",
    "max_history_helper": "calls the helper _record, which stores",
    "max_history_nested_helper": "calls the helper _record_twice_removed, which stores",
    "max_history_store": "calls tl.store (a side effect whose order may matter)",
    "sum_and_atomic_helper": "calls the helper _bump, which stores",
    "padded_attention": "carries 'acc' from iteration to iteration (rescaled by exp(max before - max after) without the first-block guard",
    "padded_attention_exp2": "carries 'acc' from iteration to iteration (rescaled by exp(max before - max after) without the first-block guard",
    "padded_attention_half_guard": "without the first-block guard: a block whose scores are all -inf, run first, makes exp(-inf - -inf) = NaN",
    "padded_attention_mask_tensor": "without the first-block guard",
    "guarded_padded_attention": None,
    "sum_max_count": None,
}


def _tensor(name: str) -> str:
    return "[K, V]" if "attention" in name else "X"


def _loop_line(name: str) -> int:
    ks = from_file(KERNELS, name)
    loop = next(s for s in ks.func.body.body if type(s).__name__ == "For")
    return ks.location(loop).line


def test_every_kernel_of_the_world_tests_is_listed():
    assert sorted(WHY) == sorted(n for n, f in vars(loops).items() if not n.startswith("_") and hasattr(f, "fn"))


@pytest.mark.parametrize("name", sorted(WHY))
def test_the_default_order_is_arrival_only_where_proven(name):
    why = _why(transform(from_file(KERNELS, name), _schedule(name, _tensor(name))).code())
    if WHY[name] is None:
        assert why is None
    else:
        assert why is not None and WHY[name] in why and "\n" not in why


@pytest.mark.parametrize("name", sorted(n for n, w in WHY.items() if w is not None))
def test_arrival_forced_where_not_proven_is_one_located_line(name):
    with pytest.raises(KernelError) as err:
        transform(from_file(KERNELS, name), _schedule(name, _tensor(name), "loop_order: arrival\n"))
    line = _loop_line(name)
    message = str(err.value)
    assert re.fullmatch(rf".*loops\.py:{line}:5: loop_order: arrival, but the loop at line {line} .+, so its iterations "
                        r"must keep their order; set loop_order: as_written \(or drop it\)", message)
    assert WHY[name] in message and "\n" not in message


@pytest.mark.parametrize("name", ["guarded_padded_attention", "sum_max_count"])
def test_arrival_forced_where_proven_is_applied(name):
    assert ARRIVAL in transform(from_file(KERNELS, name), _schedule(name, _tensor(name), "loop_order: arrival\n")).code()


def test_the_ag_attention_template_is_proven_both_ways_it_masks():
    t = syncopy.templates.get("ag_attention")
    ks = from_file(Path(syncopy.templates.__file__).parent / "ag_attention" / "kernel.py", "attention")
    assert ARRIVAL in transform(ks, t.schedule()).code()


# --- variants written inline: one change to a small kernel each --------------------------------

SUM = textwrap.dedent(
    '''\
    import triton
    import triton.language as tl


    @triton.jit
    def col(X, W, out, M, NC: tl.constexpr, BR: tl.constexpr):
        c = tl.arange(0, NC)
        s = tl.zeros([NC], dtype=tl.float32)
        top = tl.full([NC], float("-inf"), tl.float32)
        acc = tl.zeros([NC, NC], dtype=tl.float32)
        for r0 in range(0, M, BR):
            rows = r0 + tl.arange(0, BR)
            x = tl.load(X + rows[:, None] * NC + c[None, :])
            top = tl.maximum(top, tl.max(x, 0))
            s += tl.sum(x, 0)
        tl.store(out + c, s + top)
        tl.store(out + NC + c[:, None] * NC + c[None, :], acc)
    '''
)
BODY_END = "        s += tl.sum(x, 0)\n"


@pytest.mark.parametrize("lines, why", [
    ("", None),
    ("    acc = tl.dot(tl.trans(x), x, acc)\n", None),
    ("    acc = tl.dot(tl.trans(x), x, acc=acc)\n", None),
    ("    acc += tl.dot(tl.trans(x), tl.load(W + rows[:, None] * NC + c[None, :]))\n", None),
    ("    n_blocks = tl.sum(x, 0) * 0.0 + 1.0\n    acc -= n_blocks[:, None] * x[0][None, :]\n", None),
    ("    t = top * 2.0\n    acc += t[:, None] + x[0][None, :]\n",
     "carries 'acc' from iteration to iteration (its update reads 'top', which also changes"),
    ("    if r0 > 0:\n        acc += x[0][None, :]\n", "carries 'acc' from iteration to iteration (updated inside a nested statement)"),
    ("    acc += x[0][None, :]\n    acc += x[1][None, :]\n", "carries 'acc' from iteration to iteration (assigned more than once)"),
    ("    acc = acc - tl.zeros([NC, NC], dtype=tl.float32) + x[0][None, :]\n", "carries 'acc' from iteration to iteration (not a sum"),
    ("    acc = x[0][None, :] - acc\n", "carries 'acc' from iteration to iteration (not a sum into it)"),
    ("    tl.device_print(\"x\", x)\n", "calls tl.device_print (a side effect whose order may matter)"),
    ("    if tl.max(top, 0) > 10.0:\n        break\n", "leaves early (break, continue or return)"),
    ("    acc += other_file_helper(x)\n", "calls other_file_helper, which is not a @triton.jit function of this file"),
    ("    top2 = tl.maximum(top, 1.0)\n    acc += top2[:, None]\n",
     "carries 'acc' from iteration to iteration (its update reads 'top'"),
], ids=["sum-and-max", "dot-acc", "dot-acc-keyword", "sum-of-dots", "minus", "term-via-temporary", "nested-update",
        "two-updates", "not-a-sum", "subtracted-from", "print", "break", "helper-of-another-file", "max-read-by-a-sum"])
def test_a_variant_is_proven_or_kept_with_its_reason(lines, why):
    text = SUM.replace(BODY_END, BODY_END + textwrap.indent(textwrap.dedent(lines), "        "))
    assert (text != SUM) == bool(lines)
    assert _why(_code(text, "col")) == why if why is None else why in _why(_code(text, "col"))


SOFTMAX = textwrap.dedent(
    '''\
    import triton
    import triton.language as tl


    @triton.jit
    def attn(Q, K, V, Out, N, L, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        rm = tl.arange(0, BM)
        rd = tl.arange(0, D)
        q = tl.load(Q + rm[:, None] * D + rd[None, :])
        m_i = tl.full((BM,), float("-inf"), tl.float32)
        l_i = tl.zeros((BM,), tl.float32)
        acc = tl.zeros((BM, D), tl.float32)
        for start in range(0, N, BN):
            rn = start + tl.arange(0, BN)
            k = tl.load(K + rn[:, None] * D + rd[None, :])
            v = tl.load(V + rn[:, None] * D + rd[None, :])
            s = tl.where(rn[None, :] < L, tl.dot(q, tl.trans(k)), float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m_i = m_new
        tl.store(Out + rm[:, None] * D + rd[None, :], acc / l_i[:, None])
    '''
)


@pytest.mark.parametrize("change, why", [
    (None, None),
    (("m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)", "m_safe = tl.where(m_new != float(\"-inf\"), m_new, 0.0)"), None),
    (("m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)", "m_safe = tl.where(float(\"-inf\") == m_new, -1.5, m_new)"), None),
    (("tl.exp(", "tl.exp2("), None),
    (("acc = acc * alpha[:, None] + tl.dot(p, v)", "acc = tl.dot(p.to(v.dtype), v) + alpha[:, None] * acc"), None),
    (("m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)", "m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_i)"),
     "without the first-block guard"),
    (("m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)", "m_safe = tl.where(m_new == 0.0, 0.0, m_new)"),
     "without the first-block guard"),
    (("alpha = tl.exp(m_i - m_safe)", "alpha = tl.exp2(m_i - m_safe)"), "is not linear in the softmax weights"),
    (("p = tl.exp(s - m_safe[:, None])", "p = tl.exp((s - m_safe[:, None]) * 0.5)"), "is not linear in the softmax weights"),
    (("p = tl.exp(s - m_safe[:, None])", "p = tl.exp(s - m_safe[None, :])"), "is not linear in the softmax weights"),
    (("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i * alpha + tl.sum(p, 0)"), "is not linear in the softmax weights"),
    (("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i * alpha + tl.sum(p, 1) + 1.0"),
     "an online-softmax max whose 'alpha' is also read elsewhere in the loop"),
    (("acc = acc * alpha[:, None] + tl.dot(p, v)", "acc = acc * alpha[None, :] + tl.dot(p, v)"),
     "rescaled by alpha[None, :], which is not the online-softmax rescale"),
    (("m_new = tl.maximum(m_i, tl.max(s, 1))", "m_new = tl.maximum(m_i, tl.max(s, 1) + 1.0)"),
     "is not `tl.maximum(m_i, tl.max(scores, axis))`"),
    (("        m_i = m_new\n", "        m_i = m_new\n        l_i = l_i + 0.0\n"), "an online-softmax max whose 'alpha' is also read elsewhere in the loop"),
    (("        m_i = m_new\n", "        m_i = m_new\n        hits = tl.sum(tl.where(m_new > m_i, 1.0, 0.0))\n"),
     "an online-softmax max whose 'm_i' is also read elsewhere in the loop"),
    (("        acc = acc * alpha", "        seen = tl.sum(tl.where(m_new > m_i, 1.0, 0.0), 0)\n        acc = acc * alpha"),
     "an online-softmax max whose 'm_i' is also read elsewhere in the loop"),
    (("        m_i = m_new\n", "        m_i = m_new\n        acc = acc + m_safe[:, None] * 0.0\n"),
     "an online-softmax max whose 'm_safe' is also read elsewhere in the loop"),
    (("acc = acc * alpha[:, None] + tl.dot(p, v)", "acc = acc * alpha + tl.dot(p, v)"),
     "rescaled by alpha, which is not the online-softmax rescale"),
    (("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i * alpha[:, None] + tl.sum(p, 1)"),
     "rescaled by alpha[:, None], which is not the online-softmax rescale"),
    (("m_new = tl.maximum(m_i, tl.max(s, 1))", "m_new = tl.maximum(m_i, tl.max(s))"),
     "is not `tl.maximum(m_i, tl.max(scores, axis))`"),
], ids=["guarded", "guard-not-equal", "guard-reversed", "exp2", "operands-swapped", "guard-of-the-old-max",
        "guard-tests-zero", "factor-exp2-weights-exp", "scaled-weights", "weights-wrong-axis", "sum-wrong-axis",
        "term-plus-constant", "factor-wrong-axis", "max-of-shifted-scores", "l-twice", "max-read-after-it-moves",
        "max-read-by-a-counter", "acc-twice", "dot-factor-not-broadcast", "sum-factor-broadcast",
        "max-of-the-whole-block"])
def test_an_online_softmax_is_proven_only_in_its_exact_form(change, why):
    text = SOFTMAX if change is None else SOFTMAX.replace(*change)
    assert (text != SOFTMAX) == (change is not None)
    got = _why(_code(text, "attn", "[K, V]"))
    assert got is None if why is None else (got is not None and why in got), got


def test_the_factor_taken_after_the_max_moves_on_is_kept():
    text = SOFTMAX.replace("        alpha = tl.exp(m_i - m_safe)\n", "").replace("        m_i = m_new\n", "").replace(
        "        p = tl.exp(", "        m_i = m_new\n        alpha = tl.exp(m_i - m_safe)\n        p = tl.exp(")
    assert "not in its order" in _why(_code(text, "attn", "[K, V]"))


def test_a_helper_named_like_a_triton_function_is_not_taken_for_it():
    helper = "@triton.jit\ndef exp(x):\n    return x * 0.0 + 1.0\n\n\n"
    text = SOFTMAX.replace("@triton.jit\ndef attn", helper + "@triton.jit\ndef attn").replace("tl.exp(", "exp(")
    assert "is not the online-softmax rescale" in _why(_code(text, "attn", "[K, V]"))
    assert _why(_code(SOFTMAX.replace("tl.exp(", "tl.math.exp("), "attn", "[K, V]")) is None
