"""Run without TRITON_INTERPRET: build fused kernels and print their waits as JSON (used by test_ptx)."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1"

import torch  # noqa: E402

import syncopy  # noqa: E402
from syncopy.device import has_async_proxy  # noqa: E402
from syncopy.emit.ptx import acquire_polls, compile_ptx, proxy_fences, release_ops, signature_of, tma_loads_fenced  # noqa: E402


def gemm_args(fk, dtype, table):
    a = torch.empty(64, 64, dtype=dtype)
    i32 = torch.empty(1, dtype=torch.int32)
    args = dict(zip(["lhs", "rhs", "out"], [a, a, a]))
    args.update(M=128, N=64, K=64, s_lm=64, s_lk=1, s_rk=64, s_rn=1, s_om=64, s_on=1, TM=64, TN=64, TK=32, GROUP=4)
    args.update(syncopy_ctx=torch.empty(8, dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32, SYNCOPY_TRACE=False, SYNCOPY_TABLE=table)
    return args


def persistent_kernels():
    """(label, fused JIT function, example args) for persistent loops: the template (table and
    computed branches, and its probe) and the other loop shapes of tests/kernels/persistent.py.
    The args lack SYNCOPY_ASYNC_PROXY, which depends on the target (main adds it)."""
    from syncopy import templates
    from tests.kernels import persistent as pk

    i32 = torch.empty(1, dtype=torch.int32)
    extra = dict(syncopy_ctx=torch.empty(8, dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32,
                 SYNCOPY_TRACE=False)
    h = torch.empty(64, 64, dtype=torch.float16)
    fk = templates.get("ag_gemm_persistent").fused()
    t = fk.build()
    assert t.persistent is not None and t.persistent.remap and fk.kernel.built[2] is not None
    args = dict(A=h, B=h, C=h, M=256, N=256, K=128, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, NUM_SMS=132, **extra)
    out = [(f"persistent table={table}", fk.fused, dict(args, SYNCOPY_TABLE=table)) for table in (True, False)]
    out.append(("persistent probe", fk.kernel.built[2], dict(args, SYNCOPY_TABLE=False, syncopy_probe_out=i32)))
    shapes = {
        "tutorial_ws": ("a_ptr", dict(a_ptr=h, b_ptr=h, c_ptr=h, M=256, N=256, K=128, BLOCK_SIZE_M=128, BLOCK_SIZE_N=128,
                                      BLOCK_SIZE_K=64, GROUP_SIZE_M=8, NUM_SMS=132)),
        "rolling_tiles": ("P", dict(P=h, Q=h, R=h, m=256, n=256, k=128, sp0=64, sp1=1, sq0=64, sq1=1, sr0=64, sr1=1,
                                    BM=128, BN=128, BK=64, LANES=132)),
        "flat_k_desc": ("A", dict(A=h, B=h, C=h, M=256, N=256, K=128, BM=128, BN=128, BK=64, SMS=132)),
    }
    for name, (tensor, a) in shapes.items():
        f = syncopy.overlap(dict(pattern="all_gather", tensor=tensor, dim=0, chunks_per_rank=2))(getattr(pk, name))
        out.append((f"persistent {name}", f.fused, dict(a, **extra, SYNCOPY_TABLE=True)))
    return out


def wait_kernels():
    """(label, fused JIT function, example args) for the kernels of issue 10 part A: waits bounded
    without a loop-dependent mask (chunk_range_clamped), waits before each read inside a loop, a
    wait for every chunk, and rows taken from an index tensor."""
    from tests.kernels import waits

    f32 = torch.empty(64, 8, dtype=torch.float32)
    i32 = torch.empty(16, dtype=torch.int32)
    extra = dict(syncopy_ctx=torch.empty(8, dtype=torch.int64), syncopy_signals=i32, syncopy_order=i32, syncopy_trace=i32,
                 SYNCOPY_TRACE=False, SYNCOPY_TABLE=False)
    shapes = {
        "masked_quad": dict(X=f32, out=f32, M=60, NC=8, BM=16),
        "nested_steps": dict(X=f32, out=f32, NC=8, OUTER=2, INNER=4),
        "ring_rows": dict(X=f32, out=f32, M=60, NC=8, BR=16, NB=4),
        "helper_wrapped": dict(X=f32, out=f32, M=60, NC=8, BR=16),
        "gather_rows": dict(X=f32, idx=i32, out=f32, NC=8),
    }
    out = []
    for name, a in shapes.items():
        f = syncopy.overlap(dict(pattern="all_gather", tensor="X", dim=0, chunks_per_rank=2))(getattr(waits, name))
        out.append((f"waits {name}", f.fused, dict(a, **extra)))
    return out


# Which targets each group of kernels compiles for. The grouped GEMM's (dtype, table) variants run a
# half fraction: every (target, dtype), (target, table) and (dtype, table) pair once. Kernels whose
# PTX does not depend on the target beyond the wait's lowering (which the GEMM and the persistent
# template check on both) compile for sm_90 only: the waits of issue 10, the pointer-load persistent
# loop (no TMA on either target), the template's computed branch (sm_80 has no TMA whatever the branch).
GEMM_VARIANTS = {80: ((torch.float16, True), (torch.float32, False)), 90: ((torch.float16, False), (torch.float32, True))}
SM_90_ONLY = ("persistent table=False", "persistent rolling_tiles")


def _summary(ptx: str) -> dict:
    return {
        "polls": [op.text for op in acquire_polls(ptx)],
        "globaltimer": "%globaltimer" in ptx,
        "releases": [op.text for op in release_ops(ptx)],
        "has_mma": ("mma" in ptx) or ("wgmma" in ptx),
        "tma": "cp.async.bulk.tensor" in ptx,
        "proxy_fences": len(proxy_fences(ptx)),
        "tma_loads_fenced": tma_loads_fenced(ptx),
    }


def main(archs: list[int]) -> None:
    """One JSON line per target of `archs`; the kernels are fused once for all of them."""
    from tests.kernels.grouped_gemm import matmul_grouped

    fk = syncopy.overlap(dict(pattern="all_gather", tensor="lhs", dim=0, chunks_per_rank=2))(matmul_grouped)
    assert fk.build().probe is not None  # so the runtime launches it with SYNCOPY_TABLE=True
    persistent, waits = persistent_kernels(), wait_kernels()
    for arch in archs:
        out = {}
        # Both branches of the first wait: the range read from the probe table (what the runtime
        # launches here) and the range computed in the kernel (a fused kernel without a probe).
        for dtype, table in GEMM_VARIANTS[arch]:
            sig, const = signature_of(fk.fused, gemm_args(fk, dtype, table))
            out[f"{dtype} table={table}"] = _summary(compile_ptx(fk.fused, sig, const, arch))
        # A traced launch: each tile stamps its start with %globaltimer (device.trace_clocks), a clock read
        # outside every wait; the waits themselves stay the same bounded acquire polls.
        sig, const = signature_of(fk.fused, dict(gemm_args(fk, torch.float16, True), SYNCOPY_TRACE=True))
        ptx = compile_ptx(fk.fused, sig, const, arch)
        out["traced"] = {"polls": [op.text for op in acquire_polls(ptx)], "globaltimer": ptx.count("%globaltimer")}
        # Descriptor kernels take SYNCOPY_ASYNC_PROXY, set as the runtime sets it for the target; others ignore it.
        persistent_here = [(label, fn, dict(args, SYNCOPY_ASYNC_PROXY=has_async_proxy(arch))) for label, fn, args in persistent]
        for label, fn, args in [*persistent_here, *(waits if arch == 90 else ())]:
            if arch == 90 or label not in SM_90_ONLY:
                sig, const = signature_of(fn, args)
                out[label] = _summary(compile_ptx(fn, sig, const, arch))
        print(json.dumps(out))


if __name__ == "__main__":
    main([int(target) for target in sys.argv[1:]])  # one JSON line per target
