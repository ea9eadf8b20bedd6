"""The verifier on the kernels of the "Proven or as written" issue (30): each was silently wrong before
its rewrite was proven, and is right now. Under the mutants that undo those proofs (tests/mutants.py:
loops reordered unproven, a listed tensor's waits dropped, store bounds taken at corners without
affinity, autotune picking from the unpruned configs) the verifier must report a difference: these tests kill them, in one
shared world of 2 (the golden job of tests/world/test_verify.py leaves these cases to this file).

    A. arrival-order loops: a decayed sum beside a running max, a sum that reads the running max, the
       online softmax over padded keys without its first-block guard (golden loop_written_*)
    B. several communicated tensors in an order other than the kernel reads them (tests/kernels/listed.py)
    C. producer stores whose rows wrap (`%`) or peak at a mixed corner (golden producer_store_*)
    D. an autotuner whose prune_configs_by drops the config the kernel cannot run: the verifier's
       reference is the user's autotuner itself (plain Triton prunes), not syncopy's choice
"""
from __future__ import annotations

import pytest

from tests.world import shared
from tests.world import verify_workers as vw
from tests.world.test_verify import _check

GOLDEN = ["loop_written_decayed_sum", "loop_written_max_reader", "loop_written_unguarded_softmax",
          "producer_store_mixed_corner", "producer_store_wrapped_rows"]
LISTED = [("swiglu_fwd", ("B", "A")), ("dequant_rows", ("Q", "S")), ("layernorm_scaled", ("X", "RESIDUAL", "ROWSCALE"))]

shared.register(__name__, 2, {"golden": (f"{vw.__name__}:run_golden", (GOLDEN,)),
                              "listed": (f"{vw.__name__}:run_listed", (LISTED,)),
                              "autotune": (f"{vw.__name__}:run_pruned_autotune", ()),
                              "reference past rows": (f"{vw.__name__}:run_reference_past_rows", ())})


@pytest.mark.world
def test_the_kernels_once_silently_wrong_agree_under_every_condition():
    _check(shared.results(__name__, 2, "golden"), GOLDEN, lambda name: name.startswith("producer"))
    _check(shared.results(__name__, 2, "listed"), [f"{k} [{', '.join(o)}]" for k, o in LISTED])
    _check(shared.results(__name__, 2, "autotune"), ["row_sums_whole_blocks"])


@pytest.mark.world
def test_the_reference_refuses_a_grid_writing_past_the_result_as_the_fused_launch_does():
    """Before, `fused.reference` ran the user's kernel into a buffer the grid overruns (memory corruption:
    a segfault on 3 ranks); now both refuse in the same line, naming the tensor and the rows."""
    for rank, (fused, reference) in enumerate(shared.results(__name__, 2, "reference past rows")):
        assert fused == "'y' receives 15 rows per rank, but the kernel writes 32 rows = 16 per rank x 2; give 'y' 16 rows", (rank, fused)
        assert reference == fused, rank
