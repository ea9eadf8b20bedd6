"""Rung 3: compile the fused GEMMs for sm_80 and sm_90 with triton.compile (no GPU needed) and check
that each wait is an acquire load at system scope inside a loop, bounded by a poll budget. Besides the grouped GEMM: the
persistent tensor-descriptor template (both branches of its tile-start wait, and its probe) and the
other persistent loop shapes (tutorial `tl.range(..., flatten=True)` with a second counter, a
while loop, a flat K x tiles loop). Triton 3.9 lowers tensor descriptors to TMA copies on sm_90 and
to ordinary loads on sm_80, so both targets are checked."""
import pytest

from tests.ptx import subprocess_compile

subprocess_compile.register(__name__, "compile_fused")  # compiled with the other modules' kernels


@pytest.fixture(scope="module", params=[80, 90], ids=["sm_80", "sm_90"])
def compiled(request, tmp_path_factory):
    return subprocess_compile.compiled("compile_fused", request.param, tmp_path_factory.mktemp("cache"))


# What compile_fused compiles for each target (see there why some kernels compile for sm_90 only).
PERSISTENT = {"persistent table=True", "persistent table=False", "persistent tutorial_ws", "persistent rolling_tiles",
              "persistent flat_k_desc"}
SM_90_ONLY = {"persistent table=False", "persistent rolling_tiles"}
WAITS = {f"waits {name}" for name in ("masked_quad", "nested_steps", "ring_rows", "helper_wrapped", "gather_rows")}
LABELS = {
    80: {"torch.float16 table=True", "torch.float32 table=False", "traced", "persistent probe", *(PERSISTENT - SM_90_ONLY)},
    90: {"torch.float16 table=False", "torch.float32 table=True", "traced", "persistent probe", *PERSISTENT, *WAITS},
}


def _arch(request) -> int:
    return request.node.callspec.params["compiled"]


def _kernels(compiled):
    return {label: info for label, info in compiled.items() if "probe" not in label and label != "traced"}


def test_each_target_compiles_its_kernels(request, compiled):
    # Every (target, dtype), (target, table) and (dtype, table) pair of the grouped GEMM, both
    # branches of the persistent template's first wait on sm_90.
    assert set(compiled) == LABELS[_arch(request)]


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


def test_waits_of_issue_10_compile_as_bounded_acquire_polls(request, compiled):
    # Waits inside loops, bounds without a loop-dependent mask, every chunk, rows from an index tensor
    # (on sm_90: how a wait lowers per target is the GEMM's and the template's to show).
    labels = [label for label in compiled if label.startswith("waits ")]
    assert len(labels) == (5 if _arch(request) == 90 else 0)
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


def test_persistent_kernels_compile_with_their_waits_inside_the_tile_loop(request, compiled):
    labels = PERSISTENT if _arch(request) == 90 else PERSISTENT - SM_90_ONLY
    assert labels <= set(compiled)
    for label in labels:
        assert compiled[label]["polls"], label


def test_persistent_probe_compiles_and_never_waits(compiled):
    probe = compiled["persistent probe"]
    assert probe["polls"] == [] and probe["releases"] == []


def test_descriptor_reads_are_tma_copies_on_sm_90_only(request, compiled):
    tma = _arch(request) == 90
    for label in ("persistent table=True", "persistent tutorial_ws", "persistent flat_k_desc"):
        assert compiled[label]["tma"] is tma, label
    if tma:
        assert compiled["persistent rolling_tiles"]["tma"] is False  # pointer loads, on the target that has TMA


def test_descriptor_reads_are_fenced_after_their_wait_on_sm_90_only(request, compiled):
    # Issue 12 item 9: TMA loads (async proxy) are ordered after the wait's acquire by a proxy fence.
    sm90 = _arch(request) == 90
    for label in ("persistent table=True", "persistent table=False", "persistent tutorial_ws", "persistent flat_k_desc"):
        if label in compiled:
            assert compiled[label]["tma_loads_fenced"], label
            assert (compiled[label]["proxy_fences"] > 0) is sm90, label
    if sm90:
        assert compiled["persistent rolling_tiles"]["proxy_fences"] == 0  # pointer loads: no descriptor, no fence
