"""Run without TRITON_INTERPRET: build fused kernels and print their waits as JSON (used by test_ptx)."""
import itertools
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import torch  # noqa: E402

import syncopy  # noqa: E402
from syncopy.emit.ptx import acquire_polls, compile_ptx, release_ops, signature_of  # noqa: E402


def gemm_args(fk, dtype, table):
    a = torch.empty(64, 64, dtype=dtype)
    i32 = torch.empty(1, dtype=torch.int32)
    args = dict(zip(["lhs", "rhs", "out"], [a, a, a]))
    args.update(M=128, N=64, K=64, s_lm=64, s_lk=1, s_rk=64, s_rn=1, s_om=64, s_on=1, TM=64, TN=64, TK=32, GROUP=4)
    args.update(syncopy_ctx=torch.empty(8, dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32, SYNCOPY_TRACE=False, SYNCOPY_TABLE=table)
    return args


def main(arch: int) -> None:
    from tests.kernels.grouped_gemm import matmul_grouped

    fk = syncopy.overlap(dict(pattern="all_gather", tensor="lhs", dim=0, chunks_per_rank=2))(matmul_grouped)
    assert fk.build().probe is not None  # so the runtime launches it with SYNCOPY_TABLE=True
    out = {}
    # Both branches of the first wait: the range read from the probe table (what the runtime
    # launches here) and the range computed in the kernel (a fused kernel without a probe).
    for dtype, table in itertools.product((torch.float16, torch.float32), (True, False)):
        sig, const = signature_of(fk.fused, gemm_args(fk, dtype, table))
        ptx = compile_ptx(fk.fused, sig, const, arch)
        out[f"{dtype} table={table}"] = {
            "polls": [op.text for op in acquire_polls(ptx)],
            "releases": [op.text for op in release_ops(ptx)],
            "has_mma": ("mma" in ptx) or ("wgmma" in ptx),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]))
