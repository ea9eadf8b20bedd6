"""Producers whose tiles return before their store compile for sm_90 with a count on both paths:
the early return (over the tile's table range) and the announcement after the stores."""
from tests.ptx import subprocess_compile

subprocess_compile.register(__name__, "compile_producers", (90,))  # compiled with the other modules' kernels


def test_tiles_that_return_early_count_themselves_in_compiled_code(tmp_path):
    got = subprocess_compile.compiled("compile_producers", 90, tmp_path)
    # Two call sites of notify_chunks (each a counter add and a flag release) where a tile may return early.
    assert got["lower_triangular"] == got["skip_by_flag"] == {"counts": 2, "flags": 2}, got
    assert got["rows_by_index"] == {"counts": 1, "flags": 1}, got
