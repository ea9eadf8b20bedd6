"""The user's own tools (issue 14 item 5): launches in torch.profiler traces under their operator's
name, and the templates as custom operators that a torch.compile'd module calls without a graph break."""
from __future__ import annotations

import pytest

from tests.world import torch_workers as tw
from tests.world.harness import spawn

pytestmark = pytest.mark.world


def test_profiler_sees_launches_and_a_compiled_module_calls_the_templates():
    world = 2
    for rank, out in enumerate(spawn(tw.profiled_and_compiled, world)):
        assert "syncopy::ag_gemm_kernel" in out["profiled"], out["profiled"]
        assert out["compiled_err"] < 1e-4, (rank, out)
        assert out["shape"] == (32, 16)  # this rank's rows of reduce_scatter over 2 x 32 gathered rows
        assert out["wrapper_shape"] == (32 * world, 24)
        assert out["fake_shape"] == (32, 16)
