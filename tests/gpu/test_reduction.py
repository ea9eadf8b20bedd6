"""Rung 4: the one-pass reduction compiled (runtime/transport/reduction.py): the bits of sum_in_rank_order, the
form every backend's reduction shares, bf16 included (the interpreter cannot run bf16)."""
import os

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs a CUDA device (and TRITON_INTERPRET unset)"),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n_parts", [2, 4, 8])
def test_one_pass_reduction_has_the_bits_of_the_rank_order_sum(dtype, n_parts):
    from syncopy.runtime.transport.reduction import sum_in_rank_order
    from syncopy.runtime.transport.reduction import reduce_into

    g = torch.Generator(device="cuda").manual_seed(n_parts)
    parts = [(torch.randn(1023, 517, generator=g, device="cuda") * 100).to(dtype) for _ in range(n_parts)]
    want = sum_in_rank_order(parts, dtype).to(dtype)
    got = torch.full_like(parts[0], float("nan"))
    reduce_into(got, parts)
    assert torch.equal(got, want)
    reduce_into(parts[1], parts)  # in place, the destination one of the parts (p2p and the thread world)
    assert torch.equal(parts[1], want)
