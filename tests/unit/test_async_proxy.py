"""Issue 12 item 9: kernels that reach the communicated tensor through tensor descriptors (TMA on
sm_90, the async proxy) fence that proxy after each wait and before each notify, behind the
constexpr SYNCOPY_ASYNC_PROXY, which the runtime sets for compiled sm_90+ launches only. Which
kernels get it, and what the runtime passes (the PTX itself: tests/ptx/test_tma_fence.py)."""
from __future__ import annotations

import textwrap
from types import SimpleNamespace

import pytest
import torch

from syncopy.runtime.launch.kernel import Built, Kernel
from syncopy.runtime import where
from syncopy.device import has_async_proxy
from syncopy.frontend.source import find_kernel
from syncopy.passes import transform
from syncopy.passes.names import ASYNC_PROXY_FLAG
from syncopy.schedule import Schedule

FENCE_IN = "syncopy_device.async_proxy_acquire(SYNCOPY_ASYNC_PROXY)"
FENCE_OUT = "syncopy_device.async_proxy_release(SYNCOPY_ASYNC_PROXY)"
FLAG = "SYNCOPY_ASYNC_PROXY: tl.constexpr"

_HEAD = """
import triton
import triton.language as tl
from elsewhere import load_rows
"""

_HELPER_DESC = _HEAD + """
@triton.jit
def rows_of(X, row, M, NC: tl.constexpr, BR: tl.constexpr):
    d = tl.make_tensor_descriptor(X, shape=[M, NC], strides=[NC, 1], block_shape=[BR, NC])
    return d.load([row, 0])


@triton.jit
def kern(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    v = rows_of(X, pid * BR, M, NC, BR)
    tl.store(out + (pid * BR + tl.arange(0, BR))[:, None] * NC + tl.arange(0, NC)[None, :], v)
"""

_HELPER_PTR = _HELPER_DESC.replace(
    "    d = tl.make_tensor_descriptor(X, shape=[M, NC], strides=[NC, 1], block_shape=[BR, NC])\n    return d.load([row, 0])",
    "    return tl.load(X + (row + tl.arange(0, BR))[:, None] * NC + tl.arange(0, NC)[None, :])")

_IMPORTED_HELPER = _HEAD + """
@triton.jit
def kern(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    v = load_rows(X, pid * BR, M)
    tl.store(out + pid, tl.sum(v))
"""


def _fused(text: str, **schedule) -> str:
    t = transform(find_kernel(textwrap.dedent(text), "kern.py", "kern"), Schedule(**{"pattern": "all_gather", "tensor": "X", **schedule}))
    return t.stages["fused"]


def test_only_hopper_and_later_have_the_async_proxy():
    assert [has_async_proxy(a) for a in (70, 80, 86, 89, 90, 100, 120)] == [False] * 4 + [True] * 3


def test_a_helper_that_makes_its_own_descriptor_gets_the_fence_after_the_wait():
    body = _fused(_HELPER_DESC)
    assert FLAG in body
    lines = [line.strip() for line in body.splitlines()]
    wait = lines.index("syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)")
    assert lines[wait + 1] == FENCE_IN and lines.index("v = rows_of(X, pid * BR, M, NC, BR)") > wait + 1


def test_pointer_reads_through_a_helper_get_no_fence():
    body = _fused(_HELPER_PTR)
    assert "ASYNC_PROXY" not in body


def test_a_helper_from_another_file_may_use_descriptors_so_it_is_fenced():
    assert FENCE_IN in _fused(_IMPORTED_HELPER) and FLAG in _fused(_IMPORTED_HELPER)


def _fake_kernel(descriptors: bool) -> Kernel:
    op = SimpleNamespace(trace=False, link_args={})
    return Kernel(op, Built(SimpleNamespace(binding=SimpleNamespace(descriptors=descriptors)), None, None, None))


def _ctx(device="cpu"):
    return SimpleNamespace(ctx=SimpleNamespace(device=torch.device(device)), signals=None)


def test_launch_passes_the_flag_to_descriptor_kernels_only(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert ASYNC_PROXY_FLAG not in _fake_kernel(False).syncopy_args(_ctx(), None, None, table=True)
    assert _fake_kernel(True).syncopy_args(_ctx(), None, None, table=True)[ASYNC_PROXY_FLAG] is False


@pytest.mark.parametrize("interpret, capability, expected", [("1", (9, 0), False), ("0", (9, 0), True), ("0", (10, 0), True),
                                                             ("0", (8, 9), False), ("0", (8, 0), False)])
def test_the_flag_follows_the_gpu_and_is_off_in_the_interpreter(monkeypatch, interpret, capability, expected):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    where.cuda_async_proxy.cache_clear()
    try:
        assert where.has_async_proxy(torch.device("cuda", 0)) is expected
        assert where.has_async_proxy(torch.device("cpu")) is False
    finally:
        where.cuda_async_proxy.cache_clear()
