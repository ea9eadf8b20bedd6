"""The device-epoch advance (runtime/streams/graph_epochs.py) compiles for sm_80 and sm_90 (no GPU needed): one
program that steps the epoch, stashes and clears the error words and raises the own flags."""
import pytest

from tests.ptx import subprocess_compile

subprocess_compile.register(__name__, "compile_graph")  # compiled with the other modules' kernels


@pytest.mark.parametrize("arch", [80, 90])
def test_advance_epoch_compiles_to_plain_loads_and_stores(arch, tmp_path):
    ptx = subprocess_compile.compiled("compile_graph", arch, tmp_path)["ptx"]
    assert "st.global.b64" in ptx  # the epoch word
    assert "ld.global.acquire" not in ptx and "atom." not in ptx  # ordered by its stream, not by the memory model
