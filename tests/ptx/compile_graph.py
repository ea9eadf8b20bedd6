"""Run without TRITON_INTERPRET: print the PTX of the device-epoch advance (runtime/streams/graph_epochs.py) as
JSON, one line per target (used by test_graph_ptx)."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

from syncopy.emit.ptx import compile_ptx  # noqa: E402
from syncopy.runtime.streams.graph_epochs import advance_epoch  # noqa: E402


def main(archs: list[int]) -> None:
    for arch in archs:
        ptx = compile_ptx(advance_epoch, {"ctx": "*i64", "signals": "*i32", "words": "*i32", "own_lo": "i32"},
                          {"OWN": 3, "OWN_POW2": 4}, arch)
        print(json.dumps({"ptx": ptx}))


if __name__ == "__main__":
    main([int(target) for target in sys.argv[1:]])
