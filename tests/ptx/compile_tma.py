"""Run without TRITON_INTERPRET: compile the kernels that reach the communicated tensor through
tensor descriptors (the persistent AG-GEMM template, consumer; a descriptor-store GEMM as
reduce_scatter, producer) and print how their TMA copies are fenced, as JSON (used by test_tma_fence).

`fence=False` compiles the sm_90 kernel as if the runtime had not set SYNCOPY_ASYNC_PROXY: the
order the issue found (acquire straight to TMA), which the checks must reject."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import torch  # noqa: E402

import syncopy  # noqa: E402
from syncopy import templates  # noqa: E402
from syncopy.device import has_async_proxy  # noqa: E402
from syncopy.emit.ptx import (compile_ptx, notifies, proxy_fences, signature_of, tma_loads, tma_loads_fenced,  # noqa: E402
                              tma_stores, tma_stores_fenced)
from tests.kernels.desc_out import mm_desc_out  # noqa: E402


def _extra(table: bool, fence: bool) -> dict:
    i32 = torch.empty(1, dtype=torch.int32)
    return dict(syncopy_ctx=torch.empty(8, dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32,
                SYNCOPY_TRACE=False, SYNCOPY_TABLE=table, SYNCOPY_ASYNC_PROXY=fence)


def _summary(ptx: str) -> dict:
    return {"fences": len(proxy_fences(ptx)), "tma_loads": len(tma_loads(ptx)), "tma_stores": len(tma_stores(ptx)),
            "notifies": len(notifies(ptx)), "loads_fenced": tma_loads_fenced(ptx), "stores_fenced": tma_stores_fenced(ptx)}


def main(archs: list[int]) -> None:
    """One JSON line per target of `archs`."""
    h = torch.empty(64, 64, dtype=torch.float16)
    consumer = templates.get("ag_gemm_persistent").fused()
    producer = syncopy.overlap({"pattern": "reduce_scatter", "tensor": "C", "chunks_per_rank": 2})(mm_desc_out)
    gemm = dict(A=h, B=h, C=h, M=256, N=256, K=128)
    cases = {
        "consumer table=True": (consumer, dict(gemm, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, NUM_SMS=132), True),
        "consumer table=False": (consumer, dict(gemm, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, NUM_SMS=132), False),
        "producer": (producer, dict(gemm, BM=128, BN=128, BK=64), True),
    }
    for arch in archs:
        # As the runtime launches them; on sm_90 also without the flag (the order the issue found).
        runs = [("", has_async_proxy(arch))] + ([(" fence=False", False)] if has_async_proxy(arch) else [])
        out = {}
        for label, (fk, args, table) in cases.items():
            for suffix, fence in runs:
                sig, const = signature_of(fk.fused, dict(args, **_extra(table, fence)))
                out[label + suffix] = _summary(compile_ptx(fk.fused, sig, const, arch))
        print(json.dumps(out))


if __name__ == "__main__":
    main([int(target) for target in sys.argv[1:]])  # one JSON line per target
