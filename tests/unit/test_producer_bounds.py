"""Producer write bounds (issue 30, C): a store's rows are bounded before its statement only where
they are proven as a read's are (affine in the loop counters, every corner of the nest, a mask that
changes with the loop left out or counted exactly); elsewhere they are taken at the store itself,
in the probe (sliced to what the addresses use), and announced after the last store."""
from __future__ import annotations

from pathlib import Path

from syncopy.frontend.source import find_kernel
from syncopy.passes import link, names, producer_notify, transform
from syncopy.frontend import infer
from syncopy.schedule import Schedule

KERNELS = Path(__file__).parents[1] / "kernels" / "producer_bounds.py"


def _t(name: str, pattern: str = "reduce_scatter"):
    ks = find_kernel(KERNELS.read_text(), str(KERNELS), name)
    return transform(ks, Schedule(pattern=pattern, tensor="C", chunks_per_rank=2))


def test_wrapped_rows_in_a_loop_are_taken_at_each_store():
    t = _t("mod_rows_loop")
    fused, probe = t.stages["fused"], t.stages["probe"]
    assert "# syncopy: the rows of C stored at line" in fused
    assert "(the rows written are not affine in the loop counter): taken at the store, announced after the last store" in fused
    assert "if SYNCOPY_TABLE" not in fused  # nothing bounded before the loop
    tail = fused.rstrip().splitlines()[-4:]
    assert tail[1].strip() == "syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi"
    assert tail[3].strip() == "syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)"
    # The probe collects each store's range inside the loop, right before the store's statement, and
    # leaves out what the addresses do not use (the value's loads).
    lines = [line.strip() for line in probe.splitlines() if line.strip()]
    assert lines[0].startswith("@triton.jit") and lines[2] == "syncopy_lo, syncopy_hi = syncopy_device.empty_range(syncopy_ctx)"
    loop = next(i for i, line in enumerate(lines) if line.startswith("for i in range(T)"))
    assert any("chunk_range_masked(C + rows[:, None] * N" in line for line in lines[loop:])
    assert "_value(" not in probe and "tl.store" not in probe
    assert not t.fresh_probe


def test_rows_loaded_inside_the_loop_are_probed_at_every_launch():
    t = _t("loaded_rows_loop", "all_reduce")
    assert t.fresh_probe
    assert "tl.load(perm + at" in t.stages["probe"] and "_value(" not in t.stages["probe"]
    assert producer_notify.FRESH in t.stages["fused"]


def test_floordiv_and_while_rows_are_taken_at_each_store():
    for name in ("floordiv_rows_loop", "while_rows"):
        t = _t(name)
        assert "taken at the store, announced after the last store" in t.stages["fused"], name
        assert "empty_range(syncopy_ctx)" in t.stages["probe"], name


def test_a_loop_nest_is_bounded_at_every_corner():
    b = infer.infer(find_kernel(KERNELS.read_text(), str(KERNELS), "mixed_corner"), "C", 0, writes=True)
    assert len(b.groups) == 1 and not b.groups[0].nested
    assert len(b.groups[0].accesses) == 4  # the mixed corners hold the extreme rows
    masked = infer.infer(find_kernel(KERNELS.read_text(), str(KERNELS), "mixed_corner_masked"), "C", 0, writes=True)
    assert len(masked.groups[0].accesses) == 4 and all(a.clamped for a in masked.groups[0].accesses)
    assert producer_notify.CLAMPED in _t("mixed_corner_masked").stages["fused"]


def test_a_loop_whose_last_iterations_are_masked_off_counts_what_each_keeps():
    b = infer.infer(find_kernel(KERNELS.read_text(), str(KERNELS), "masked_tail_loop"), "C", 0, writes=True)
    assert [a.affine is not None for a in b.groups[0].accesses] == [True]
    assert "chunk_range_affine(" in _t("masked_tail_loop").stages["fused"]


def test_a_store_at_rows_that_need_no_loop_is_bounded_at_the_statement():
    t = _t("mod_rows")
    assert "if SYNCOPY_TABLE:" in t.stages["fused"] and "taken at the store" not in t.stages["fused"]


def test_a_return_inside_the_loop_records_what_the_probe_collected():
    lines = [line.strip() for line in _t("early_return_loop").stages["probe"].splitlines()]
    at = lines.index("return")
    assert lines[at - 1] == f"syncopy_device.probe_store({names.PROBE_OUT}, syncopy_lo, syncopy_hi)"
    fused = [line.strip() for line in _t("early_return_loop").stages["fused"].splitlines()]
    at = fused.index("return")
    assert fused[at - 1] == "syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_table_lo, syncopy_table_hi)"


def test_without_a_table_the_kernel_collects_the_range_at_each_store():
    ks = find_kernel(KERNELS.read_text(), str(KERNELS), "mod_rows_loop")
    b = infer.infer(ks, "C", 0, writes=True)
    body = producer_notify.insert_notifies(list(ks.func.body.body), b, table=False)
    code = "\n".join(ks.module.code_for_node(s) for s in body)
    assert "syncopy_lo, syncopy_hi = syncopy_device.empty_range(syncopy_ctx)" in code
    loop = code.index("for i in range(T)")
    assert code.index("chunk_range_masked(", loop) < code.index("tl.store(", loop) < code.index("notify_chunks(")
    assert "syncopy_table_lo" not in code
    assert link is not None  # passes/link.py announces a linked producer's chunks this way (table=False)


def test_a_helper_handed_the_output_is_followed_into_its_stores():
    b = infer.infer(find_kernel(KERNELS.read_text(), str(KERNELS), "helper_rows"), "C", 0, writes=True)
    assert [a.pointer for a in b.groups[0].accesses] == ["C + rows[:, None] * N + cols[None, :]"]
    # A helper whose store is not bounded before its statement: the program counts on every chunk.
    b = infer.infer(find_kernel(KERNELS.read_text(), str(KERNELS), "helper_wrapped_loop"), "C", 0, writes=True)
    assert [a.every for a in b.groups[0].accesses] == [True]
    fused = _t("helper_wrapped_loop").stages["fused"]
    assert "syncopy_device.all_chunks(syncopy_ctx)" in fused and producer_notify.EVERY in fused


DESC = '''\
import triton
import triton.language as tl


@triton.jit
def desc_wrapped(X, C, M, N, SHIFT, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    for i in range(T):
        row = (pid * T * BM + i * BM + SHIFT) % M
        x = tl.load(X + row * N + tl.arange(0, BN))
        c_desc.store([row, 0], x[None, :] + tl.zeros([BM, BN], dtype=tl.float32))
'''


def test_a_descriptor_store_at_wrapped_rows_is_taken_at_the_store():
    t = transform(find_kernel(DESC, "desc.py", "desc_wrapped"), Schedule(pattern="reduce_scatter", tensor="C"))
    assert "taken at the store, announced after the last store" in t.stages["fused"]
    probe = t.stages["probe"]
    loop = probe.index("for i in range(T)")
    assert probe.index("syncopy_device.desc_chunk_range(", loop) > loop and "tl.load(X" not in probe


KEPT_RETURN = '''\
import triton
import triton.language as tl


@triton.jit
def two_halves(X, C, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    x = tl.load(X + rows[:, None] * N + cols[None, :])
    tl.store(C + rows[:, None] * N + cols[None, :], x)
    if pid == 0:
        rows = rows + M // 2
        return
    tl.store(C + (rows + M // 2)[:, None] * N + cols[None, :], x)
'''


def test_a_return_the_probe_keeps_records_the_stores_before_it():
    # The `if` is kept in the probe (it assigns rows, which the second store's address uses); the
    # program that returns there has stored its first half, and the probe records that range.
    probe = transform(find_kernel(KEPT_RETURN, "k.py", "two_halves"), Schedule(pattern="reduce_scatter", tensor="C")).stages["probe"]
    lines = [line.strip() for line in probe.splitlines() if line.strip()]
    assert lines[2] == "syncopy_lo, syncopy_hi = syncopy_device.empty_range(syncopy_ctx)"
    at = lines.index("return")
    assert lines[at - 1] == "syncopy_device.probe_store(syncopy_probe_out, syncopy_lo, syncopy_hi)"
