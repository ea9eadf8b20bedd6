"""Signature rewriting keeps the user's layout (issue 13, item 7; passes/signature.py): syncopy's
parameters follow the user's, one per line where the user's are on lines of their own and on the
line where the user's are on one line; the user's comments stay on their parameter's line, the
closing paren where it was, a trailing comma where there was one. Each case: the signature before
and after, exactly (Triton's tutorial matmul first: a trailing `#` after its last parameter)."""
from __future__ import annotations

import pytest

from syncopy.frontend.source import find_kernel
from syncopy.passes import signature

CASES = [
    pytest.param(
'''\
def matmul_kernel(
        # Pointers to matrices
        a_ptr, b_ptr, c_ptr,
        # Meta-parameters
        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,  #
        GROUP_SIZE_M: tl.constexpr,  #
        ACTIVATION: tl.constexpr  #
):
''',
'''\
def matmul_kernel(
        # Pointers to matrices
        a_ptr, b_ptr, c_ptr,
        # Meta-parameters
        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,  #
        GROUP_SIZE_M: tl.constexpr,  #
        ACTIVATION: tl.constexpr,  #
        syncopy_ctx,
        syncopy_signals,
        syncopy_order,
        syncopy_trace,
        SYNCOPY_TRACE: tl.constexpr,
        SYNCOPY_TABLE: tl.constexpr
):
''',
        id='tutorial-trailing-comment-on-last-parameter'),
    pytest.param(
'''\
def k(
    A,
    B: tl.constexpr
):
''',
'''\
def k(
    A,
    B: tl.constexpr,
    syncopy_ctx,
    syncopy_signals,
    syncopy_order,
    syncopy_trace,
    SYNCOPY_TRACE: tl.constexpr,
    SYNCOPY_TABLE: tl.constexpr
):
''',
        id='closing-paren-on-its-own-line'),
    pytest.param(
'''\
def k(
    A,  # the rows
    B: tl.constexpr,  # block
):
''',
'''\
def k(
    A,  # the rows
    B: tl.constexpr,  # block
    syncopy_ctx,
    syncopy_signals,
    syncopy_order,
    syncopy_trace,
    SYNCOPY_TRACE: tl.constexpr,
    SYNCOPY_TABLE: tl.constexpr,
):
''',
        id='trailing-comma-and-comments'),
    pytest.param(
'''\
def k(
    A
):
''',
'''\
def k(
    A,
    syncopy_ctx,
    syncopy_signals,
    syncopy_order,
    syncopy_trace,
    SYNCOPY_TRACE: tl.constexpr,
    SYNCOPY_TABLE: tl.constexpr
):
''',
        id='one-parameter-on-its-own-line'),
    pytest.param(
'''\
def k(A, B, BLOCK: tl.constexpr):
''',
'''\
def k(A, B, BLOCK: tl.constexpr, syncopy_ctx, syncopy_signals, syncopy_order, syncopy_trace, SYNCOPY_TRACE: tl.constexpr, SYNCOPY_TABLE: tl.constexpr):
''',
        id='one-line'),
    pytest.param(
'''\
def k(A, n,  # rows
      B: tl.constexpr = 16):
''',
'''\
def k(A, n,  # rows
      syncopy_ctx,
      syncopy_signals,
      syncopy_order,
      syncopy_trace,
      SYNCOPY_TRACE: tl.constexpr,
      SYNCOPY_TABLE: tl.constexpr,
      B: tl.constexpr = 16):
''',
        id='before-a-default-after-a-commented-line'),
]


def _signature(text: str) -> str:
    source = "import triton\nimport triton.language as tl\n\n\n@triton.jit\n" + text + "    pass\n"
    ks = find_kernel(source, "k.py", None)
    out = ks.module.code_for_node(signature.add_params(ks.func))
    compile(out, "k.py", "exec")
    return out[out.index("def "):out.index("    pass\n")]


@pytest.mark.parametrize(("before", "after"), CASES)
def test_signature_keeps_the_users_layout(before, after):
    assert _signature(before) == after
