"""Run without TRITON_INTERPRET: fuse each kernel of tests/kernels/listed.py with its list reversed
(the tensor it reads first listed last), compile it for sm_90, and print its waits as JSON (used by
test_listed_ptx)."""
import json
import os

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import torch  # noqa: E402

import syncopy  # noqa: E402
from syncopy.emit.ptx import acquire_polls, compile_ptx, proxy_fences, signature_of  # noqa: E402
from tests.kernels import listed  # noqa: E402
from tests.world.listed_workers import CASES, ONE_D  # noqa: E402


def example_args(kernel: str, fn) -> dict:
    tensors, n = CASES[kernel]
    f32 = torch.empty(64, n)
    i32 = torch.empty(16, dtype=torch.int32)
    args = {name: (torch.empty(64) if name in ONE_D else f32) for name in tensors}
    args.update(Y=f32, W=torch.empty(n), M=64, N=n, BR=4, BN=8, BLOCK=16, eps=1e-5,
                syncopy_ctx=torch.empty(8 * len(tensors), dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32,
                syncopy_trace=i32, SYNCOPY_TRACE=False, SYNCOPY_TABLE=True, SYNCOPY_ASYNC_PROXY=True)
    return {p.name: args[p.name] for p in fn.params}


def main() -> None:
    out = {}
    for kernel, (tensors, _) in CASES.items():
        for checked in (False, True):
            schedule = {"pattern": "all_gather", "tensor": list(reversed(tensors)), "dim": 0, "chunks_per_rank": 2}
            fused = syncopy.overlap(schedule, checked=checked)(getattr(listed, kernel)).fused
            sig, const = signature_of(fused, example_args(kernel, fused))
            ptx = compile_ptx(fused, sig, const, 90)
            out[f"{kernel} checked={checked}"] = {"polls": len(acquire_polls(ptx)), "fences": len(proxy_fences(ptx)),
                                                  "listed": len(tensors)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
