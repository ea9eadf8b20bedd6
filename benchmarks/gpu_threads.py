"""Thread-world cases of the GPU benchmark (imported by gpu_bench.py): W ranks on one GPU in one
process (syncopy.runtime.worlds.threads), every rank computing its own operator at once on its own streams,
chunks moved between the ranks' buffers by device-to-device copies.

Baselines in the same run, each rank on its own stream, all ranks at once (a fork from the caller's
stream and a join back): sequential (the rank's all-gather, then its GEMM -- or its GEMM, then the
exchange and the reduction), stream-level (one GEMM per chunk on the compute stream, each chunk's copy
on a second stream: the AsyncTP way), and fused (one ThreadWorld launch); plus the copies alone and the
GEMMs alone. Times are per launch of the whole world, back to back.
"""
from __future__ import annotations

import torch
import triton

import syncopy
from syncopy.runtime.transport.reduction import reduce_into
from syncopy.runtime.worlds.threads import ThreadWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel


def _fork_join(streams, body) -> None:
    """`body(r)` on rank r's stream for every rank, after the caller's stream's work; the caller's
    stream then waits for all of them."""
    cur = torch.cuda.current_stream()
    for s in streams:
        s.wait_stream(cur)
    for r, s in enumerate(streams):
        with torch.cuda.stream(s):
            body(r)
    for s in streams:
        cur.wait_stream(s)


def ag_gemm_threads_case(bench, m, n, k, world=4, chunks=4, reps=5):
    """AG-GEMM on every rank: C_r = all_gather(A) @ B, A's shards in the ranks' own memory."""
    meta, args_of = bench.META, bench._args
    print(f"  ag_gemm {m}x{n}x{k} thread world {world} chunks {chunks}", flush=True)
    rows = m // world
    # A short bound: a chunk that never lands costs seconds, not a minute per launch.
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=chunks), timeout_s=5.0)(ag_gemm_kernel)
    tw = ThreadWorld(fk, world)
    shards = [torch.randn(rows, k, dtype=torch.float16, device="cuda") for _ in range(world)]
    b = torch.randn(k, n, dtype=torch.float16, device="cuda")
    cs = [torch.empty(m, n, dtype=torch.float16, device="cuda") for _ in range(world)]
    gathered = [torch.empty(m, k, dtype=torch.float16, device="cuda") for _ in range(world)]
    grid = (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
    streams = [torch.cuda.Stream(priority=-1) for _ in range(world)]
    sides = [torch.cuda.Stream(priority=-1) for _ in range(world)]
    # Rank r's remote chunks in ring order (the next rank's first): (rows lo, hi) of the gathered A.
    remote = [[(s * rows + i * rows // chunks, s * rows + (i + 1) * rows // chunks) for d in range(1, world) for s in [(r + d) % world]
               for i in range(chunks)] for r in range(world)]

    def gemm(r, a, c, rows_):
        g = (triton.cdiv(rows_, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
        ag_gemm_kernel[g](*args_of(a, b, c, rows_, n, k), **meta)

    def gather(r):
        for s in range(world):
            gathered[r][s * rows:(s + 1) * rows].copy_(shards[s])

    def sequential():
        _fork_join(streams, lambda r: (gather(r), gemm(r, gathered[r], cs[r], m)))

    def stream_level():
        def rank(r):
            side, cur = sides[r], streams[r]
            side.wait_stream(cur)
            gathered[r][r * rows:(r + 1) * rows].copy_(shards[r])
            gemm(r, gathered[r][r * rows:(r + 1) * rows], cs[r][r * rows:(r + 1) * rows], rows)
            for lo, hi in remote[r]:
                s = lo // rows
                with torch.cuda.stream(side):
                    gathered[r][lo:hi].copy_(shards[s][lo - s * rows:hi - s * rows])
                    ev = torch.cuda.Event()
                    ev.record(side)
                cur.wait_event(ev)
                gemm(r, gathered[r][lo:hi], cs[r][lo:hi], hi - lo)

        _fork_join(streams, rank)

    calls = [args_of(shards[r], b, cs[r], m, n, k) for r in range(world)]

    def fused():
        tw.launch(grid, calls, dict(meta))

    res = dict(pattern="ag_gemm", world_kind="threads", world=world, m=m, n=n, k=k, chunks=chunks)
    res["comm_ms"] = bench._pipelined(lambda: _fork_join(streams, gather))
    res["compute_ms"] = bench._pipelined(lambda: _fork_join(streams, lambda r: gemm(r, gathered[r], cs[r], m)))
    print(f"    comm {res['comm_ms']:.3f} ms, compute {res['compute_ms']:.3f} ms (all {world} ranks at once)", flush=True)
    for name, fn in (("sequential", sequential), ("stream_overlap", stream_level), ("fused", fused)):
        bench._record(res, name, fn, reps)
    tw.synchronize()
    res["pushes"] = tw.pushes
    for c in cs:
        c.fill_(float("nan"))
    tw.launch(grid, calls, dict(meta), timeline=True, sync=True)
    res["fused_timeline_ms"] = _timeline(tw.timeline_ms())
    ref = torch.cat(shards).float() @ b.float()
    res["fused_max_rel_err"] = max(((c.float() - ref).abs().max() / ref.abs().max()).item() for c in cs)
    return bench._finish(res)


def gemm_rs_threads_case(bench, m, n, k, world=4, chunks=2, reps=5):
    """GEMM-RS on every rank: rank r's rows of sum_s(A_s @ B_s); chunks go straight to their owner."""
    meta, args_of = bench.META, bench._args
    print(f"  gemm_rs {m}x{n}x{k} thread world {world} chunks {chunks}", flush=True)
    rows = m // world
    fk = syncopy.overlap(dict(pattern="reduce_scatter", tensor="C", dim=0, chunks_per_rank=chunks, order="local_first"),
                         timeout_s=5.0)(ag_gemm_kernel)
    tw = ThreadWorld(fk, world)
    a = [torch.randn(m, k, dtype=torch.float16, device="cuda") for _ in range(world)]
    b = [torch.randn(k, n, dtype=torch.float16, device="cuda") / 16 for _ in range(world)]
    outs = [torch.empty(rows, n, dtype=torch.float16, device="cuda") for _ in range(world)]
    partial = [torch.empty(m, n, dtype=torch.float16, device="cuda") for _ in range(world)]
    inbox = [torch.empty(world, rows, n, dtype=torch.float16, device="cuda") for _ in range(world)]
    grid = (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
    streams = [torch.cuda.Stream(priority=-1) for _ in range(world)]
    sides = [torch.cuda.Stream(priority=-1) for _ in range(world)]
    # Rank r's chunks in send order: the next ranks' first, its own last (direct, local_first).
    order = [[(d, d * rows + i * rows // chunks, d * rows + (i + 1) * rows // chunks) for j in range(1, world + 1) for d in [(r + j) % world]
              for i in range(chunks)] for r in range(world)]

    def gemm(r, lo, hi):
        g = (triton.cdiv(hi - lo, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
        ag_gemm_kernel[g](*args_of(a[r][lo:hi], b[r], partial[r][lo:hi], hi - lo, n, k), **meta)

    def send(r, d, lo, hi):
        inbox[d][r, lo - d * rows:hi - d * rows].copy_(partial[r][lo:hi])

    def exchange(r):
        for d, lo, hi in order[r]:
            if d != r:
                send(r, d, lo, hi)

    def reduce(r):  # the fused launch's own reduction (one pass, rank order), so that only the overlap differs
        reduce_into(outs[r], [partial[r][r * rows:(r + 1) * rows] if s == r else inbox[r][s] for s in range(world)])

    def sequential():
        _fork_join(streams, lambda r: gemm(r, 0, m))
        _fork_join(streams, exchange)
        _fork_join(streams, reduce)

    def stream_level():
        def rank(r):
            side, cur = sides[r], streams[r]
            side.wait_stream(cur)
            for d, lo, hi in order[r]:
                gemm(r, lo, hi)
                if d != r:
                    ev = torch.cuda.Event()
                    ev.record(cur)
                    with torch.cuda.stream(side):
                        side.wait_event(ev)
                        send(r, d, lo, hi)

        _fork_join(streams, rank)
        _fork_join(sides, lambda r: None)  # every send is done before any reduction
        _fork_join(streams, reduce)

    calls = [args_of(a[r], b[r], outs[r], m, n, k) for r in range(world)]

    def fused():
        tw.launch(grid, calls, dict(meta))

    res = dict(pattern="gemm_rs", world_kind="threads", world=world, m=m, n=n, k=k, chunks=chunks)
    res["comm_ms"] = bench._pipelined(lambda: _fork_join(streams, exchange))
    res["compute_ms"] = bench._pipelined(lambda: _fork_join(streams, lambda r: gemm(r, 0, m)))
    res["reduce_ms"] = bench._pipelined(lambda: _fork_join(streams, reduce))  # the reduction alone: what follows the last receive
    print(f"    comm {res['comm_ms']:.3f} ms, compute {res['compute_ms']:.3f} ms (all {world} ranks at once)", flush=True)
    for name, fn in (("sequential", sequential), ("stream_overlap", stream_level), ("fused", fused)):
        bench._record(res, name, fn, reps)
    tw.synchronize()
    tw.launch(grid, calls, dict(meta), timeline=True, sync=True)
    res["fused_timeline_ms"] = _timeline(tw.timeline_ms())
    total = sum(x.float() @ y.float() for x, y in zip(a, b))
    res["fused_max_rel_err"] = max(((outs[r].float() - total[r * rows:(r + 1) * rows]).abs().max() / total.abs().max()).item()
                                   for r in range(world))
    return bench._finish(res)


def _timeline(per_rank: list[dict]) -> dict:
    """Rank by rank: kernel launch point and end, first and last chunk landed (or sent), ms from the launch start."""
    out = {}
    for r, t in enumerate(per_rank):
        moved = [v for name, v in t.items() if isinstance(name, (int, tuple))]
        out[r] = dict(kernel=t.get("kernel"), end=t.get("end"), first_chunk=min(moved, default=None), last_chunk=max(moved, default=None),
                      reduced=t.get("reduced"))
    return out
