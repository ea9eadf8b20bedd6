"""Run without TRITON_INTERPRET: print the PTX of a bare bounded wait as JSON, one line per target
(used by test_poll_budget and test_wait_backoff)."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import triton  # noqa: E402

from syncopy import device as dev  # noqa: E402
from syncopy.emit.ptx import compile_ptx  # noqa: E402


@triton.jit
def bare_wait(signals, ctx):
    dev.wait_chunks(signals, ctx, 0, 0)


def main(archs: list[int]) -> None:
    for arch in archs:
        print(json.dumps({"ptx": compile_ptx(bare_wait, {"signals": "*i32", "ctx": "*i64"}, {}, arch)}))


if __name__ == "__main__":
    main([int(target) for target in sys.argv[1:]])
