"""The user's own tools (issue 14 item 5): launches in torch.profiler traces under their operator's
name, the templates as custom operators that a torch.compile'd module calls without a graph break,
and (item 6) the AG-GEMM / GEMM-RS pair differentiable, each one's backward running the other fused."""
from __future__ import annotations

import pytest

from tests.world import torch_workers as tw
from tests.world.harness import spawn
from tests.oracles import worst

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def world2():
    return spawn(tw.torch_tools, 2)


def test_profiler_sees_launches_and_a_compiled_module_calls_the_templates(world2):
    world = 2
    for rank, out in enumerate(r["compiled"] for r in world2):
        assert "syncopy::ag_gemm_kernel" in out["profiled"], out["profiled"]
        assert out["compiled_err"] < 1e-4, (rank, out)
        assert out["shape"] == (32, 16)  # this rank's rows of reduce_scatter over 2 x 32 gathered rows
        assert out["wrapper_shape"] == (32 * world, 24)
        assert out["fake_shape"] == (32, 16)


def test_the_sequence_parallel_mlp_is_differentiable_through_the_fused_templates(world2):
    # AG-GEMM's backward runs GEMM-RS fused and GEMM-RS's runs AG-GEMM fused (Megatron's sequence parallelism).
    for rank, out in enumerate(r["autograd"] for r in world2):
        for step, errs in enumerate(out["errors"]):
            assert worst(errs.values()) < 1e-4, (rank, step, errs)
