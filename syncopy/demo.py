"""`make demo`: an all-gather GEMM on a CPU world (gloo + Triton interpreter), fused, against the
torch reference (`all_gather_into_tensor` + `matmul`), with a per-chunk arrival/compute summary."""
from __future__ import annotations

import time
from importlib import resources


def _rank_main(rank: int, world: int, chunks: int, latency_ms: float, rows: int, n: int, k: int):
    import torch
    import triton

    import syncopy
    from syncopy.runtime.transport.link import Link
    from syncopy.templates import all_gather_rows
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    schedule = syncopy.load_schedule(str(resources.files("syncopy.templates") / "ag_gemm" / "schedule.yaml"))
    fused = syncopy.overlap(schedule, chunks_per_rank=chunks, trace=True, poison_receive=True, link=Link(latency_s=latency_ms / 1e3))(ag_gemm_kernel)
    torch.manual_seed(1234 + rank)
    a = torch.randn(rows, k)
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(7))
    m = rows * world
    c = torch.empty(m, n)
    meta = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=2)
    grid = (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
    t = time.perf_counter()
    fused[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **meta)
    elapsed = time.perf_counter() - t
    full = all_gather_rows(a)
    err = (c - full @ b).abs().max().item()
    return err, elapsed, fused.last_trace.summary(), fused.last_trace.overlapped_tiles()


#: Rows of each rank's shard of A.
ROWS = 45


def check_arguments(world: int, chunks: int, latency_ms: float, rows: int = ROWS) -> None:
    """Raise a one-line SyncopyError, naming the `syncopy demo` option, before any rank starts."""
    from syncopy.errors import SyncopyError

    if world < 1:
        raise SyncopyError(f"--world {world}: a world has at least one rank; pass --world N with N >= 1")
    if not 1 <= chunks <= rows:
        raise SyncopyError(f"--chunks {chunks}: each rank's shard has {rows} rows; give a chunk count from 1 to {rows}")
    if not latency_ms >= 0:
        raise SyncopyError(f"--latency-ms {latency_ms:g}: a link latency cannot be negative; give 0 or more")


def main(world: int = 4, chunks: int = 2, latency_ms: float = 20.0, rows: int = ROWS, n: int = 64, k: int = 64) -> int:
    from syncopy.runtime.worlds.processes import spawn

    check_arguments(world, chunks, latency_ms, rows)
    print(f"syncopy demo: all-gather GEMM on {world} CPU ranks (gloo, Triton interpreter), "
          f"A shard {rows}x{k} per rank, B {k}x{n}, {chunks} chunks per rank, ring order, "
          f"emulated link latency {latency_ms:g} ms per chunk")
    results = spawn(_rank_main, world, chunks, latency_ms, rows, n, k)
    ok = True
    for rank, (err, elapsed, summary, overlapped) in enumerate(results):
        good = err < 1e-3
        ok &= good
        print(f"rank {rank}: max |fused - all_gather+matmul| = {err:.2e} {'OK' if good else 'WRONG'}; launch {elapsed * 1e3:.0f} ms")
        print(summary)
    print("all ranks correct" if ok else "SOME RANKS WRONG")
    return 0 if ok else 1
