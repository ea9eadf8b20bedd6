"""Where a kernel sits in a file, so tests can say "every byte outside it is unchanged"."""
from __future__ import annotations

import ast

#: The one line `syncopy transform` may add outside the kernel.
DEVICE_IMPORT = "import syncopy.device as syncopy_device\n"


def kernel_lines(text: str, name: str) -> tuple[int, int]:
    """0-based [start, stop) line range of top-level function `name`, decorators included."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return first - 1, node.end_lineno
    raise AssertionError(f"no top-level function {name!r}")


def outside(text: str, name: str) -> tuple[str, str]:
    """(text before the kernel's first decorator, text after the kernel's last line)."""
    lines = text.splitlines(keepends=True)
    start, stop = kernel_lines(text, name)
    return "".join(lines[:start]), "".join(lines[stop:])


def inside(text: str, name: str) -> str:
    lines = text.splitlines(keepends=True)
    start, stop = kernel_lines(text, name)
    return "".join(lines[start:stop])


def assert_only_kernel_changed(before: str, after: str, name: str) -> None:
    """Everything but kernel `name` is byte-identical, except one added device import line."""
    head0, tail0 = outside(before, name)
    head1, tail1 = outside(after, name)
    assert tail1 == tail0, "text after the kernel changed"
    if DEVICE_IMPORT.strip() not in before:
        lines = head1.splitlines(keepends=True)
        added = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == DEVICE_IMPORT.strip()]
        assert len(added) == 1, "expected exactly one added device import"
        del lines[added[0]]
        head1 = "".join(lines)
    assert head1 == head0, "text before the kernel changed"
