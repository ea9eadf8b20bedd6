"""Producers whose stores' rows are taken at the store (issue 30, C) compile for sm_90, and so do
their probes, which carry the program's chunk range through the store loop: one count and one flag
release, after the last store."""
from tests.ptx import subprocess_compile

subprocess_compile.register(__name__, "compile_producer_bounds", (90,))


def test_stores_taken_at_the_store_compile_with_one_announcement(tmp_path):
    got = subprocess_compile.compiled("compile_producer_bounds", 90, tmp_path)
    assert got and all(v == {"counts": 1, "flags": 1, "probe": True} for v in got.values()), got
