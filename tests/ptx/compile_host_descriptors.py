"""Run without TRITON_INTERPRET: compile attention fused with its keys and values passed as tensor
descriptors made on the host (tests/kernels/attention_host_descriptors.py), as the runtime launches
it, and print how its loads are fenced, as JSON (used by test_host_descriptors_ptx)."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import torch  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

import syncopy  # noqa: E402
from syncopy.device import has_async_proxy  # noqa: E402
from syncopy.emit.ptx import acquire_polls, compile_ptx, proxy_fences, signature_of, tma_loads, tma_loads_fenced  # noqa: E402
from tests.kernels import attention_host_descriptors as kernels  # noqa: E402

N, D, B = 256, 64, 64


def _args() -> dict:
    h = torch.empty(N, D, dtype=torch.float16)
    desc = {name: TensorDescriptor(h, [N, D], [D, 1], [B, D]) for name in ("desc_q", "desc_k", "desc_v", "desc_o")}
    i32 = torch.empty(1, dtype=torch.int32)
    return dict(sm_scale=0.125, M=torch.empty(N), Z=1, H=1, **desc, N_CTX=N, HEAD_DIM=D, BLOCK_M=B, BLOCK_N=B,
                syncopy_ctx=torch.empty(16, dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32,
                SYNCOPY_TRACE=False, SYNCOPY_TABLE=False)


def main(archs: list[int]) -> None:
    """One JSON line per target of `archs`: per kernel, its TMA loads, proxy fences, acquire polls, and whether
    every TMA load follows a fence after the acquire."""
    sched = {"pattern": "all_gather", "tensor": ["desc_k", "desc_v"], "chunks_per_rank": 2}
    for arch in archs:
        out = {}
        for name in ("attn_host_desc", "attn_host_desc_inline"):
            fused = syncopy.overlap(sched)(getattr(kernels, name)).kernel.build().fused
            sig, const = signature_of(fused, dict(_args(), SYNCOPY_ASYNC_PROXY=has_async_proxy(arch)))
            ptx = compile_ptx(fused, sig, const, arch)
            out[name] = {"tma_loads": len(tma_loads(ptx)), "fences": len(proxy_fences(ptx)), "acquires": len(acquire_polls(ptx)),
                         "loads_fenced": tma_loads_fenced(ptx)}
        print(json.dumps(out))


if __name__ == "__main__":
    main([int(target) for target in sys.argv[1:]])  # one JSON line per target
