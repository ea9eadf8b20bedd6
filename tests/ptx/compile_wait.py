"""Run without TRITON_INTERPRET: print the PTX of a bare bounded wait (used by test_poll_budget)."""
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import triton  # noqa: E402

from syncopy import device as dev  # noqa: E402
from syncopy.emit.ptx import compile_ptx  # noqa: E402


@triton.jit
def bare_wait(signals, ctx):
    dev.wait_chunks(signals, ctx, 0, 0)


if __name__ == "__main__":
    print(compile_ptx(bare_wait, {"signals": "*i32", "ctx": "*i64"}, {}, int(sys.argv[1])))
