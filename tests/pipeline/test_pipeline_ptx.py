"""tp_mlp's linked kernels compile for GPUs: the up projection's spin-waits (its gathered rows) and
its link's notifies (count with acq_rel, flag with release, system scope); the down projection's
spin-waits (the link's rows of H) and its own reduce_scatter notifies."""
from tests.ptx import subprocess_compile

subprocess_compile.register(__name__, "compile_pipeline", (90,))  # compiled with tests/ptx's kernels, in one process


def test_linked_kernels_compile_with_their_waits_and_notifies(tmp_path):
    out = subprocess_compile.compiled("compile_pipeline", 90, tmp_path)
    # An all-gather kernel counts nothing and a reduce_scatter one polls nothing of its own: the
    # up kernel's counts and the down kernel's polls are the link's. Each kernel has both sides.
    assert out["up"]["polls"] >= 1 and out["up"]["counts"] >= 1 and out["up"]["flags"] >= 1
    assert out["down"]["polls"] >= 1 and out["down"]["counts"] >= 1 and out["down"]["flags"] >= 1
