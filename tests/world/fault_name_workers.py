"""Rank functions for tests/world/test_fault_names.py (spawned, so module level and picklable).

Launch options the ranks must agree on (verify_chunks, the injected faults) and faults that name a
send no rank makes: each is one LaunchError on every rank at the first launch. A producer's delay
fault delays its send (it was ignored), and the result is still torch's."""
from __future__ import annotations

from tests.world.workers import Problem, TOL, _exc_info, _kernel, _producer_fused, schedule

ROWS = 6  # per rank, rms kernel: two chunks of three rows
RS_SHAPE = (48, 16, 16)  # gemm_rs: the result's rows, N, K; 2 chunks per rank on 3 ranks
RS_META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
DELAY = (1, 4)  # gemm_rs ring on 3 ranks, 2 chunks: rank 1 passes on the sum of chunk 4 (rank 2's rows) to rank 2
DELAY_S = 0.4


def _rms(rank: int, world: int, seed: int = 1, **options) -> dict:
    """One launch of the rms kernel, gathered in 2 chunks per rank; its error against torch, or what it raised."""
    import syncopy

    fused = syncopy.overlap(schedule("rms", 2, "ring"), poison_receive=True, timeout_s=20, **options)(_kernel("rms"))
    p = Problem("rms", rank, world, ROWS, "float32", seed=seed)
    try:
        p.launch(fused)
    except Exception as exc:
        return _exc_info(exc)
    return {"type": None, "err": p.error()}


def _gemm_rs(rank: int, world: int, faults, seeds=(1,), trace: bool = False) -> dict:
    """Launches of gemm_rs (ring, 2 chunks per rank) with `faults`, fresh inputs each: their errors, or what it raised."""
    import torch

    from syncopy import templates

    mod = templates.get("gemm_rs").module
    fused = _producer_fused({"template": "gemm_rs", "chunks": 2, "order": "ring"}, faults=faults, timeout_s=20, trace=trace)
    out: dict = {"type": None, "errs": [], "sends": []}
    for seed in seeds:
        inp = mod.inputs(rank, world, RS_SHAPE, torch.float32, seed=seed)
        try:
            c = mod.launch(fused, **inp, **RS_META)
        except Exception as exc:
            return _exc_info(exc)
        ref = mod.reference(**inp)
        out["errs"].append(float((c - ref).abs().max() / max(1.0, ref.abs().max().item())))
        if trace:
            out["sends"].append({k: v for k, v in fused.last_trace.sends.items()})
    return out


def run_fault_names(rank: int, world: int) -> dict:
    from syncopy.runtime.transport.link import Faults

    return {
        "verify_differs": _rms(rank, world, verify_chunks=rank == 0),
        "verify_agrees": [_rms(rank, world, seed=s, verify_chunks=True) for s in (2, 3)],
        "faults_differ": _rms(rank, world, faults=Faults.of(delay={(0, 0): 0.1}) if rank == 0 else None),
        "chunk_past_shard": _rms(rank, world, faults=Faults.of(drop=[(1, 2)])),
        "rank_past_group": _rms(rank, world, faults=Faults.of(kill=(world, 0))),
        "producer_own_chunk": _gemm_rs(rank, world, Faults.of(corrupt=[(1, 2)])),
        "producer_delay": _gemm_rs(rank, world, Faults.of(delay={DELAY: DELAY_S}), seeds=(1, 2), trace=True),
        "tol": TOL["float32"],
    }
