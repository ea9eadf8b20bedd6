"""The one-pass reduction (runtime/transport/reduction.py) gives the bits of sum_in_rank_order, the form every
backend's reduction shares: run here by the Triton interpreter, on a GPU compiled (tests/gpu)."""
from __future__ import annotations

import pytest
import torch

from syncopy.runtime.transport.reduction import sum_in_rank_order
from syncopy.runtime.transport.reduction import launch_sum, one_pass, reduce_into


def _parts(n_parts: int, shape, dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    parts = [(torch.randn(shape, generator=g) * 10 ** torch.randint(-6, 5, shape, generator=g)).to(dtype) for _ in range(n_parts)]
    flat = parts[0].view(-1)
    flat[:4] = torch.tensor([float("inf"), float("nan"), 6e-8, -0.0]).to(dtype)  # inf, nan, a half denormal, -0
    if n_parts > 1:
        parts[1].view(-1)[:2] = torch.tensor([float("-inf"), 1.0]).to(dtype)
    return parts


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit where a value is a number (-0 and +0 apart); NaN where the other is NaN."""
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a[~nan].view(bits), b[~nan].view(bits))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("n_parts", [1, 3, 4, 8])
def test_one_pass_sum_has_the_bits_of_the_rank_order_sum(dtype, n_parts):
    parts = _parts(n_parts, (37, 129), dtype, seed=n_parts)  # not a multiple of the kernel's block
    want = sum_in_rank_order(parts, dtype).to(dtype)
    got = torch.full_like(parts[0], 7.0)
    launch_sum(got, parts)
    assert _same_bits(got, want)


def test_the_own_part_may_be_the_destination():
    # p2p and the thread world reduce a rank's rows in place: the first part is dst itself.
    parts = _parts(4, (8, 300), torch.float16, seed=9)
    want = sum_in_rank_order(parts, torch.float16).to(torch.float16)
    launch_sum(parts[0], parts)
    assert _same_bits(parts[0], want)


def test_what_the_kernel_cannot_take_goes_through_torch():
    parts = _parts(3, (16, 16), torch.float16, seed=3)
    assert one_pass(parts[0], parts)
    assert not one_pass(parts[0], [parts[0], parts[1].float(), parts[2]])  # mixed dtypes
    assert not one_pass(parts[0], [p.t() for p in parts])  # not contiguous
    assert not one_pass(parts[0], parts * 3)  # more parts than the kernel takes
    assert not one_pass(torch.zeros(16, 16, dtype=torch.int32), [p.int() for p in parts])  # integers
    dst = torch.empty(16, 16, dtype=torch.float16)
    reduce_into(dst, (p for p in parts))  # CPU tensors: torch's form, same values
    # Against plain torch, not against sum_in_rank_order itself: fp32 adds in rank order, one rounding.
    want = ((parts[0].float() + parts[1].float()) + parts[2].float()).half()
    assert _same_bits(dst, want)
