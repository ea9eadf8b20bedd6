"""Run without TRITON_INTERPRET: compile the producer kernels of tests/kernels/producer_bounds.py as
fused by syncopy, and their probes (which collect a store's range inside its loop), and print per
kernel its notify sites as JSON (used by test_producer_bounds_ptx)."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import torch  # noqa: E402

import syncopy  # noqa: E402
from syncopy.emit.ptx import compile_ptx, notifies, signature_of  # noqa: E402
from tests.kernels import producer_bounds  # noqa: E402

KERNELS = ("mod_rows_loop", "loaded_rows_loop", "mixed_corner_masked", "masked_tail_loop", "while_rows",
           "helper_wrapped_loop")


def main(archs: list[int]) -> None:
    """One JSON line per target of `archs`."""
    f32, i32 = torch.empty(4, dtype=torch.float32), torch.empty(1, dtype=torch.int32)
    args = dict(A=f32, C=f32, perm=i32, M=64, N=16, SHIFT=5, T=3, BM=16, BN=16, I=2, J=2, Q=16,
                syncopy_ctx=torch.empty(8, dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32,
                SYNCOPY_TRACE=False, SYNCOPY_TABLE=True)
    for arch in archs:
        out = {}
        for name in KERNELS:
            fk = syncopy.overlap({"pattern": "reduce_scatter", "tensor": "C", "chunks_per_rank": 2})(getattr(producer_bounds, name))
            built = fk.kernel.build()  # (transformed, fused, probe, path)
            sig, const = signature_of(built.fused, args)
            ptx = compile_ptx(built.fused, sig, const, arch)
            sig, const = signature_of(built.probe, {**args, "syncopy_probe_out": i32, "SYNCOPY_TABLE": False})
            probe = compile_ptx(built.probe, sig, const, arch)
            out[name] = {"counts": sum(".acq_rel.add" in op.text for op in notifies(ptx)),
                         "flags": sum(".release.exch" in op.text for op in notifies(ptx)), "probe": bool(probe)}
        print(json.dumps(out))


if __name__ == "__main__":
    main([int(target) for target in sys.argv[1:]])  # one JSON line per target
