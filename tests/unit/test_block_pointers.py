"""Advice that fits the Triton in use (issue 13, item 10): a read through `tl.make_block_ptr` is met
with a tensor descriptor, which inference follows. On Triton 3.9, which removed block pointers (the
kernel fails even unfused), no binding is offered and an explicit one is refused too, rather than
fusing a kernel that then fails inside Triton; on a Triton that still runs them, a binding works."""
from __future__ import annotations

import textwrap

import pytest
import triton

from syncopy.errors import InferenceError
from syncopy.frontend import infer
from syncopy.frontend.source import find_kernel
from syncopy.passes import transform
from syncopy.schedule import from_dict

KERNEL = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def rows_sum(X, out, n, m, BLOCK: tl.constexpr, BC: tl.constexpr):
        pid = tl.program_id(0)
        bp = tl.make_block_ptr(X, shape=(n, m), strides=(m, 1), offsets=(pid * BLOCK, 0), block_shape=(BLOCK, BC), order=(1, 0))
        x = tl.load(bp, boundary_check=(0, 1))
        tl.store(out + pid * BLOCK + tl.arange(0, BLOCK), tl.sum(x, axis=1), mask=pid * BLOCK + tl.arange(0, BLOCK) < n)
''')
SCHEDULE = {"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": 2}
BINDING = {"binding": {"rows": "pid * BLOCK + tl.arange(0, BLOCK)"}}
DESCRIPTOR = ("make it a tensor descriptor, desc = tl.make_tensor_descriptor(X, shape=[...], strides=[...], block_shape=[...]), "
              "and use desc.load([row, ...]), whose rows syncopy follows")


def _transform(schedule: dict):
    return transform(find_kernel(KERNEL, "k.py", "rows_sum"), from_dict(schedule))


def test_this_triton_has_removed_block_pointers():
    assert infer.block_pointers_removed()  # triton 3.9: tl.make_block_ptr raises NotImplementedError


@pytest.mark.parametrize("schedule", [SCHEDULE, {**SCHEDULE, **BINDING}], ids=["inferred", "explicit-binding"])
def test_removed_block_pointers_get_tensor_descriptor_advice(schedule):
    with pytest.raises(InferenceError) as info:
        _transform(schedule)
    assert str(info.value) == (f"k.py:8:10: 'X' is read through tl.make_block_ptr, but Triton {triton.__version__} has removed "
                               f"block pointers (the kernel cannot run even unfused); {DESCRIPTOR}")


def test_where_block_pointers_still_run_a_binding_is_offered_and_works(monkeypatch):
    monkeypatch.setattr(infer, "block_pointers_removed", lambda: False)
    with pytest.raises(InferenceError) as info:
        _transform(SCHEDULE)
    assert str(info.value).startswith(f"k.py:8:10: 'X' is read through tl.make_block_ptr, whose rows inference cannot follow; "
                                      f"{DESCRIPTOR}, or add `binding: {{rows: <expression>}}` to the schedule")
    assert "wait_chunks" in _transform({**SCHEDULE, **BINDING}).code()
