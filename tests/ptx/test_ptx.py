"""Rung 3: compile the fused GEMMs for sm_80 and sm_90 with triton.compile (no GPU needed) and check
that each wait is an acquire load at system scope inside a loop, bounded by a poll budget. Besides the grouped GEMM: the
persistent tensor-descriptor template (both branches of its tile-start wait, and its probe) and the
other persistent loop shapes (tutorial `tl.range(..., flatten=True)` with a second counter, a
while loop, a flat K x tiles loop). Triton 3.9 lowers tensor descriptors to TMA copies on sm_90 and
to ordinary loads on sm_80, so both targets are checked."""
import pytest

from tests.ptx import subprocess_compile


@pytest.fixture(scope="module", params=[80, 90], ids=["sm_80", "sm_90"])
def compiled(request, tmp_path_factory):
    return subprocess_compile.compiled("compile_fused", request.param, tmp_path_factory.mktemp("cache"))


def _kernels(compiled):
    return {label: info for label, info in compiled.items() if "probe" not in label and label != "traced"}


def test_wait_is_acquire_load_in_a_loop(compiled):
    for dtype, info in _kernels(compiled).items():
        assert info["polls"], f"{dtype}: no acquire load inside a loop"
        for op in info["polls"]:
            assert "acquire" in op and ".sys" in op, op
            assert op.startswith(("ld.", "@")) and ("ld.global" in op or "atom.global" in op), op


def test_waits_poll_block_wide_and_never_read_the_global_timer(compiled):
    # One acquire poll per block (a scalar atomic: one thread loads, the block shares the value) and
    # a poll budget: a per-thread spin bounded by %globaltimer was measured to slow the overlap (see
    # syncopy/device.py).
    for label, info in _kernels(compiled).items():
        assert not info["globaltimer"], f"{label}: a wait reads %globaltimer"


def test_a_traced_kernel_reads_the_global_timer_once_per_tile_outside_its_waits(compiled):
    traced = compiled["traced"]
    assert traced["globaltimer"] == 1, traced  # device.trace_clocks, once per tile start
    assert traced["polls"] and all("acquire" in op and ".sys" in op for op in traced["polls"])


def test_kernel_still_computes_with_tensor_cores(compiled):
    assert all(info["has_mma"] for label, info in _kernels(compiled).items() if not label.startswith("waits "))


def test_waits_of_issue_10_compile_as_bounded_acquire_polls(compiled):
    # Waits inside loops, bounds without a loop-dependent mask, every chunk, rows from an index tensor.
    labels = [label for label in compiled if label.startswith("waits ")]
    assert len(labels) == 5
    for label in labels:
        assert compiled[label]["polls"] and not compiled[label]["globaltimer"], label


def test_error_slot_publish_is_a_release(compiled):
    # On timeout the program publishes (rank, chunk, epoch) with a release exchange on the flag.
    for info in _kernels(compiled).values():
        assert any("release" in op for op in info["releases"])


def test_notify_order_check_rejects_a_notify_before_the_stores_or_without_a_barrier():
    from syncopy.emit.ptx import stores_then_barrier_then_notify

    good = "st.global.b32 [%rd1], %r1;\nbar.sync 0;\natom.global.sys.acq_rel.add.u32 %r2, [%rd2], 1;\n"
    assert stores_then_barrier_then_notify(good)
    assert not stores_then_barrier_then_notify(good.replace("bar.sync 0;\n", ""))
    early = "bar.sync 0;\natom.global.sys.acq_rel.add.u32 %r2, [%rd2], 1;\nst.global.b32 [%rd1], %r1;\n"
    assert not stores_then_barrier_then_notify(early)
    assert not stores_then_barrier_then_notify("st.global.b32 [%rd1], %r1;\n")


def test_persistent_kernels_compile_with_their_waits_inside_the_tile_loop(compiled):
    labels = {"persistent table=True", "persistent table=False", "persistent tutorial_ws", "persistent rolling_tiles",
              "persistent flat_k_desc"}
    assert labels <= set(compiled)
    for label in labels:
        assert compiled[label]["polls"], label


def test_persistent_probe_compiles_and_never_waits(compiled):
    probe = compiled["persistent probe"]
    assert probe["polls"] == [] and probe["releases"] == []


def test_descriptor_reads_are_tma_copies_on_sm_90_only(request, compiled):
    tma = request.node.callspec.params["compiled"] == 90
    for label in ("persistent table=True", "persistent tutorial_ws", "persistent flat_k_desc"):
        assert compiled[label]["tma"] is tma, label
    assert compiled["persistent rolling_tiles"]["tma"] is False  # pointer loads


def test_descriptor_reads_are_fenced_after_their_wait_on_sm_90_only(request, compiled):
    # Issue 12 item 9: TMA loads (async proxy) are ordered after the wait's acquire by a proxy fence.
    sm90 = request.node.callspec.params["compiled"] == 90
    for label in ("persistent table=True", "persistent table=False", "persistent tutorial_ws", "persistent flat_k_desc"):
        assert compiled[label]["tma_loads_fenced"], label
        assert (compiled[label]["proxy_fences"] > 0) is sm90, label
    assert compiled["persistent rolling_tiles"]["proxy_fences"] == 0  # pointer loads: no descriptor, no fence
