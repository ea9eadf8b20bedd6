"""What Triton's interpreter (TRITON_INTERPRET=1, the CPU worlds) cannot run that a GPU can, said in
one line where a user meets it through syncopy (issue 31 item 11). Kernels from other projects run
into it unfused as much as fused:

- a float or int argument stays a Python number under the interpreter (compiled, it is a scalar
  tensor), so a tensor method on it (`eps.to(tl.float32)`) raises AttributeError;
- some libdevice functions have no interpreter implementation and return None (`libdevice.rsqrt`),
  so the arithmetic on their result fails.

Both are Triton's, not the kernel's nor syncopy's: the error names the kernel's line, says so, and
that the kernel runs on a GPU. Any other failure is left as it was raised.
"""
from __future__ import annotations

import re
import traceback

from syncopy.errors import LaunchError, SourceLocation

_SCALAR_METHOD = re.compile(r"'(float|int|bool)' object has no attribute '(\w+)'")


def _causes(exc: BaseException):
    """`exc` and the exceptions it was raised from (the interpreter wraps the kernel's own in InterpreterError)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _kernel_line(exc: BaseException, kernel: str) -> str | None:
    """The text of the innermost line of function `kernel` (the fused kernel keeps the user's name and
    lines) in the tracebacks of `exc` and its causes."""
    for e in _causes(exc):
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.name == kernel and f.line]
        if frames:
            return frames[-1].line.strip()
    return None


def _reason(exc: BaseException, line: str) -> str | None:
    """Why the interpreter cannot run `line`, or None where the failure is not one of its known limits."""
    for e in _causes(exc):
        text = str(e)
        found = _SCALAR_METHOD.search(text)
        if isinstance(e, AttributeError) and found:
            return (f"a {found.group(1)} argument stays a Python {found.group(1)} there (compiled, it is a scalar tensor), "
                    f"so `.{found.group(2)}` fails")
        if isinstance(e, (AttributeError, TypeError)) and "NoneType" in text and "libdevice." in line:
            return "its libdevice functions are not all implemented (this one returns None)"
    return None


def _where(source, line: str) -> SourceLocation | None:
    """Where `line` is in the user's kernel `source` (frontend.source.KernelSource): its first
    occurrence from the kernel's first line on."""
    first = source.location(source.func).line
    lines = source.module.code.splitlines()
    for i in range(max(first - 1 - source.line_offset, 0), len(lines)):
        if lines[i].strip() == line:
            return SourceLocation(source.path, i + 1 + source.line_offset, len(lines[i]) - len(lines[i].lstrip()) + 1)
    return None


def raise_interpreter_limit(exc: BaseException, source) -> None:
    """Raise `explain`'s one line in place of `exc` where there is one (the traceback left out)."""
    limit = explain(exc, source)
    if limit is not None:
        raise limit from None


def explain(exc: BaseException, source) -> LaunchError | None:
    """The one-line error for `exc`, raised running the kernel of `source` (frontend.source.KernelSource;
    unfused, or fused: the fused kernel keeps its name and lines) under the interpreter, where it is
    one of the interpreter's limits; else None."""
    from syncopy.runtime.where import interpreting

    if not interpreting():
        return None
    kernel = source.name
    line = _kernel_line(exc, kernel)
    reason = _reason(exc, line) if line is not None else None
    if reason is None:
        return None
    return LaunchError(f"'{kernel}' cannot run `{line}` under Triton's interpreter (TRITON_INTERPRET=1): {reason}; this is "
                       "the interpreter's limit, not the kernel's nor syncopy's: the kernel runs as written on a GPU",
                       _where(source, line))
