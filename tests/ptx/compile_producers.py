"""Run without TRITON_INTERPRET: compile the producer kernels of tests/kernels/producer_cases.py as
fused by syncopy and print, per kernel, its notify sites as JSON (used by test_producer_returns)."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import torch  # noqa: E402

import syncopy  # noqa: E402
from syncopy.emit.ptx import compile_ptx, notifies, signature_of  # noqa: E402
from tests.kernels import producer_cases  # noqa: E402


def main(archs: list[int]) -> None:
    """One JSON line per target of `archs`."""
    f16, i32 = torch.empty(4, dtype=torch.float16), torch.empty(1, dtype=torch.int32)
    kernels = {}
    for name in ("lower_triangular", "skip_by_flag", "rows_by_index"):
        fk = syncopy.overlap({"pattern": "reduce_scatter", "tensor": "C", "chunks_per_rank": 2})(getattr(producer_cases, name))
        fk.build()
        kernels[name] = fk
    args = dict(A=f16, B=f16, C=f16, perm=i32, skip=i32, M=64, N=64, K=64, BM=64, BN=64, BK=32,
                syncopy_ctx=torch.empty(8, dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32,
                SYNCOPY_TRACE=False, SYNCOPY_TABLE=True)
    for arch in archs:
        out = {}
        for name, fk in kernels.items():
            sig, const = signature_of(fk.fused, args)
            ptx = compile_ptx(fk.fused, sig, const, arch)
            out[name] = {"counts": sum(".acq_rel.add" in op.text for op in notifies(ptx)),
                         "flags": sum(".release.exch" in op.text for op in notifies(ptx))}
        print(json.dumps(out))


if __name__ == "__main__":
    main([int(target) for target in sys.argv[1:]])  # one JSON line per target
