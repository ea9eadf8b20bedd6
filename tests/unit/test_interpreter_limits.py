"""Issue 31 item 11: where Triton's interpreter cannot run what a GPU runs (a float argument stays a
Python float, a libdevice function returns None), a launch through syncopy says so in one line: the
kernel's line, that it is the interpreter's limit, and that the kernel runs on a GPU. Other failures
stay as they were raised."""
from __future__ import annotations

import inspect

import pytest
import torch

from syncopy.frontend.source import from_jit
from syncopy.runtime.launch.interpreter_limits import explain
from tests.kernels import interpreter_limits as kernels

FILE = inspect.getsourcefile(kernels.scaled_rows.fn)


def _line_of(text: str) -> tuple[int, int]:
    lines = open(FILE).read().splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip() == text)
    return i + 1, len(lines[i]) - len(lines[i].lstrip()) + 1


def _raised(kernel, *args):
    with pytest.raises(Exception) as info:
        kernel[(2,)](*args, N=8)
    return info.value


@pytest.mark.parametrize("kernel, line, reason", [
    ("scaled_rows", "tl.store(Y + pid * N + c, x * eps.to(tl.float32))",
     "a float argument stays a Python float there (compiled, it is a scalar tensor), so `.to` fails"),
    ("rsqrt_rows", "tl.store(Y + pid * N + c, x * libdevice.rsqrt(tl.sum(x * x, 0) + 1.0))",
     "its libdevice functions are not all implemented (this one returns None)"),
], ids=["float-argument", "libdevice"])
def test_an_interpreter_limit_is_one_line_naming_the_kernel_line(kernel, line, reason):
    fn = getattr(kernels, kernel)
    x = torch.randn(2, 8)
    args = (x, torch.empty_like(x), 1e-6) if kernel == "scaled_rows" else (x, torch.empty_like(x))
    err = explain(_raised(fn, *args), from_jit(fn))
    row, col = _line_of(line)
    assert str(err) == (f"{FILE}:{row}:{col}: '{kernel}' cannot run `{line}` under Triton's interpreter (TRITON_INTERPRET=1): "
                        f"{reason}; this is the interpreter's limit, not the kernel's nor syncopy's: the kernel runs as written "
                        "on a GPU")


def test_a_failure_of_the_kernel_itself_is_left_as_raised():
    x = torch.randn(2, 8)
    # A tensor where the kernel wants a float: `.to` exists, the failure is elsewhere and the kernel's own.
    exc = _raised(kernels.scaled_rows, x, torch.empty_like(x), "not a number")
    assert explain(exc, from_jit(kernels.scaled_rows)) is None


def test_compiled_kernels_are_not_explained(monkeypatch):
    x = torch.randn(2, 8)
    exc = _raised(kernels.scaled_rows, x, torch.empty_like(x), 1e-6)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert explain(exc, from_jit(kernels.scaled_rows)) is None
