"""Run without TRITON_INTERPRET: compile tp_mlp's two linked kernels (passes/link.py, then each one's
own schedule) for a GPU target and print their spin-waits and notifies as JSON (used by
tests/pipeline/test_pipeline_ptx.py)."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import torch  # noqa: E402

from syncopy import templates  # noqa: E402
from syncopy.emit.ptx import acquire_polls, compile_ptx, notifies, signature_of  # noqa: E402


def main(archs: list[int]) -> None:
    """One JSON line per target of `archs`."""
    op = templates.get("tp_mlp").fused()
    f16, i32, i64 = torch.empty(64, dtype=torch.float16), torch.empty(1, dtype=torch.int32), torch.empty(8, dtype=torch.int64)
    own = dict(syncopy_ctx=i64, syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32, SYNCOPY_TRACE=False, SYNCOPY_TABLE=True)
    shape = dict(M=256, N=128, K=128, stride_am=128, stride_ak=1, stride_bk=128, stride_bn=1, stride_cm=128, stride_cn=1,
                 BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    variants = {"up": (op.up.linked(notify="C"), dict(GROUP_M=4, syncopy_out_ctx=i64, syncopy_out_signals=i32)),
                "down": (op.down.linked(wait="A"), dict(syncopy_in_ctx=i64, syncopy_in_signals=i32))}
    for variant, _ in variants.values():
        variant.build()
    for arch in archs:
        out = {}
        for name, (variant, extra) in variants.items():
            args = dict(A=f16, B=f16, C=f16, **shape, **own, **extra)
            sig, const = signature_of(variant.fused, args)
            ptx = compile_ptx(variant.fused, sig, const, arch)
            out[name] = {"polls": len(acquire_polls(ptx)), "counts": sum(".acq_rel.add" in o.text for o in notifies(ptx)),
                         "flags": sum(".release.exch" in o.text for o in notifies(ptx))}
        print(json.dumps(out))


if __name__ == "__main__":
    main([int(target) for target in sys.argv[1:]])  # one JSON line per target
