"""Issue 31 item 11 through a fused launch and its `.reference` (the unfused kernel after the
collective) on a CPU world: the interpreter's limits are one line naming the kernel's line
(tests/unit/test_interpreter_limits.py checks the text of each)."""
from __future__ import annotations

import inspect

import pytest

from tests.kernels import interpreter_limits as kernels
from tests.world.harness import INSTANT, spawn
from tests.world.interpreter_limit_workers import launch_both


@pytest.mark.world
def test_fused_and_reference_launches_name_the_line_the_interpreter_cannot_run():
    file = inspect.getsourcefile(kernels.scaled_rows.fn)
    lines = open(file).read().splitlines()
    (got,) = spawn(launch_both, 1, link=INSTANT, timeout_s=300)
    for name, text in (("scaled_rows", "x * eps.to(tl.float32)"), ("rsqrt_rows", "libdevice.rsqrt(")):
        row = next(i + 1 for i, line in enumerate(lines) if text in line)
        for how in ("fused", "reference"):
            kind, message = got[f"{name} {how}"]
            assert kind == "LaunchError" and "\n" not in message, (name, how, kind, message)
            assert message.startswith(f"{file}:{row}:5: '{name}' cannot run `"), (name, how, message)
            assert message.endswith("this is the interpreter's limit, not the kernel's nor syncopy's: the kernel runs as "
                                    "written on a GPU"), (name, how, message)
