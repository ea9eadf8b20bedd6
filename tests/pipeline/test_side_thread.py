"""CPU ranks' side thread (runtime/pipeline/__init__.py, `_beside`) where a warm plan meets a context that is gone,
and the instruction graph of a pipeline that launches one operator twice."""
from __future__ import annotations

import pytest

from tests.pipeline import side_thread_workers as workers
from tests.world.harness import spawn
from tests.oracles import worst

pytestmark = pytest.mark.world


def test_a_warm_plan_whose_contexts_were_evicted_runs_in_order_and_one_operator_twice_runs_its_own_transfers():
    # The slow default link (tests/world/harness.py): chunks land while tiles wait.
    for r in spawn(workers.evicted_and_repeated, 2, timeout_s=240):
        assert worst(r["errs"]) < 1e-4 and worst(r["rs_errs"]) < 1e-4
        assert r["placed"][1].startswith("op 2 on a side thread") and r["placed"][3].startswith("op 2 on a side thread")
        assert r["placed"][4] == ("in order on the caller's stream: mlp_up_kernel makes its context for these shapes at this "
                                  "launch (it meets the peers)")
        assert all(r["sends"]) and r["ops"] == ["gemm_rs_kernel#1", "gemm_rs_kernel#2"]
