"""Issue 12 item 9: TMA copies are made by the async proxy, which a generic acquire or release does
not order. Compiled for sm_90, a kernel that reads the communicated tensor through tensor
descriptors fences the async proxy between its wait's acquire and its first TMA load, and one that
stores through them completes its TMA stores and fences them before the release that announces
the chunk. sm_80 has no TMA and no such fence, and compiles without it."""
import pytest

from tests.ptx import subprocess_compile

subprocess_compile.register(__name__, "compile_tma")  # compiled with the other modules' kernels


@pytest.fixture(scope="module", params=[80, 90], ids=["sm_80", "sm_90"])
def compiled(request, tmp_path_factory):
    return request.param, subprocess_compile.compiled("compile_tma", request.param, tmp_path_factory.mktemp("cache"))


def test_consumer_fences_between_the_acquire_and_the_first_tma_load(compiled):
    arch, got = compiled
    for label in ("consumer table=True", "consumer table=False"):
        info = got[label]
        if arch == 90:
            assert info["tma_loads"] and info["fences"] == 1 and info["loads_fenced"], (label, info)
        else:
            assert info["tma_loads"] == 0 and info["fences"] == 0, (label, info)


def test_producer_completes_and_fences_its_tma_stores_before_the_release(compiled):
    arch, got = compiled
    info = got["producer"]
    assert info["notifies"] == 2, info  # the tile's count (acq_rel) and the flag (release)
    if arch == 90:
        assert info["tma_stores"] and info["fences"] == 1 and info["stores_fenced"], info
    else:
        assert info["tma_stores"] == 0 and info["fences"] == 0, info


def test_without_the_flag_the_checks_see_the_missing_fence(compiled):
    # The order the issue found: what the checks above would reject if the fence went missing.
    arch, got = compiled
    if arch != 90:
        pytest.skip("only sm_90 has the async proxy")
    assert not got["consumer table=True fence=False"]["loads_fenced"]
    assert not got["producer fence=False"]["stores_fenced"]


def test_fence_checks_read_the_ptx_order():
    from syncopy.emit.ptx import tma_loads_fenced, tma_stores_fenced

    acquire = "ld.global.sys.acquire.b32 %r1, [%rd1];\n"
    load = "cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes [%r2], [%rd2, {%r3, %r4}], [%r5];\n"
    fence = "fence.proxy.async.global;\n"
    assert tma_loads_fenced(acquire + fence + load) and not tma_loads_fenced(acquire + load)
    assert not tma_loads_fenced(fence + acquire + load)
    store = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r1, %r2}], [%r3];\n"
    notify = "atom.global.sys.acq_rel.add.u32 %r4, [%rd2], 1;\n"
    full, read = "cp.async.bulk.wait_group 0;\n", "cp.async.bulk.wait_group.read 0;\n"
    assert tma_stores_fenced(store + full + fence + notify)
    assert not tma_stores_fenced(store + notify)
    assert not tma_stores_fenced(store + read + fence + notify)  # the stores may not have landed yet
