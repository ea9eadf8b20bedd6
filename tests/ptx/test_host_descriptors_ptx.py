"""Issue 31 item 2: attention fused with its keys and values passed as tensor descriptors made on the
host compiles for sm_80 and sm_90 as the runtime launches it (signature `tensordesc<fp16[64, 64]>`):
its waits poll with acquire loads, and on sm_90 every TMA load of a descriptor comes after a fence of
the async proxy that follows the acquire (device.desc_chunk_range builds only its host branch)."""
import pytest

from tests.ptx import subprocess_compile

subprocess_compile.register(__name__, "compile_host_descriptors")


@pytest.fixture(scope="module", params=[80, 90], ids=["sm_80", "sm_90"])
def compiled(request, tmp_path_factory):
    return request.param, subprocess_compile.compiled("compile_host_descriptors", request.param, tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("name", ["attn_host_desc", "attn_host_desc_inline"])
def test_host_descriptor_attention_waits_and_fences_its_tma_loads(compiled, name):
    arch, got = compiled
    info = got[name]
    assert info["acquires"] > 0, info
    if arch == 90:
        assert info["tma_loads"] > 0 and info["fences"] > 0 and info["loads_fenced"], info
    else:
        assert info["tma_loads"] == 0 and info["fences"] == 0, info
