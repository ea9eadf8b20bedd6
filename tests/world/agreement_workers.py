"""The usual mistakes of distributed programs, made by one rank of a group inside a larger world
(tests/world/test_agreement.py): what every rank of the group raises, and whether the group still
launches right afterwards. Each case runs on a process group of its own (dist.new_group, made by
every rank of the world in the same order), so that a case that breaks its group leaves the others
as they were; the ranks outside a case's group do nothing meanwhile, as a rank of another
tensor-parallel group would."""
from __future__ import annotations

import time

TIMEOUT_S = 3.0
ROWS, K, N = 8, 16, 16


def _mm():
    """The README's matmul kernel (examples/verify/mm.py), as a user's module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "verify" / "mm.py"
    spec = importlib.util.spec_from_file_location("syncopy_example_mm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fused(kernel, chunks: int = 2, tensor: str = "A"):
    import syncopy

    schedule = {"kernel": kernel.fn.__name__, "pattern": "all_gather", "tensor": tensor, "dim": 0, "chunks_per_rank": chunks}
    return syncopy.overlap(schedule, timeout_s=TIMEOUT_S, poison_receive=True)(kernel)


def _launch(fused, group, seed: int, rows: int = ROWS, contiguous: bool = True, out_rows: int | None = None,
            dtype=None) -> float:
    """One launch of C = all_gather(A) @ B on `group` with fresh data; |C - reference| (NaN-aware: NaN if any is NaN)."""
    import torch
    import torch.distributed as dist
    import triton

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(1000 * seed + rank)
    a = torch.randn(rows, K, generator=g).to(dtype)
    if not contiguous:
        a = torch.randn(K, rows, generator=g).to(dtype).t()
    b = torch.randn(K, N, generator=torch.Generator().manual_seed(seed)).to(dtype)
    m = rows * world
    c = torch.empty(out_rows if out_rows is not None else m, N, dtype=dtype)
    fused[(triton.cdiv(m, 16), triton.cdiv(N, 16))](a, b, c, m, N, K, BM=16, BN=16, BK=16, group=group)
    parts = [torch.empty_like(a.contiguous()) for _ in range(world)]
    dist.all_gather(parts, a.contiguous(), group=group)
    ref = torch.cat(parts).float() @ b.float()
    return float((c.float() - ref).abs().nan_to_num(float("inf")).max())


def _outcome(fn) -> dict:
    start = time.monotonic()
    try:
        return {"type": None, "err": fn()}
    except Exception as exc:
        return {"type": type(exc).__name__, "str": str(exc), "timeout": "waited" in str(exc),
                "before_timeout": time.monotonic() - start < TIMEOUT_S}


def run_mistakes(rank: int, world: int) -> dict:
    """Every case on its own group; each rank's outcomes by case (ranks outside a case's group: none)."""
    import torch
    import torch.distributed as dist

    from tests.world.workers import stay_until_reported

    mm = _mm()
    out: dict = {}

    def group_of(ranks):
        g = dist.new_group(ranks=ranks, backend="gloo")
        return g if rank in ranks else None

    # Shard rows that differ only from the second launch on (rank 1 of [0, 1]); then the right launch again.
    g = group_of([0, 1])
    if g is not None:
        f = _fused(mm.mm)
        out["rows_first"] = _outcome(lambda: _launch(f, g, 1))
        out["rows_second"] = _outcome(lambda: _launch(f, g, 2, rows=ROWS if rank == 0 else ROWS + 4))
        out["rows_after"] = [_outcome(lambda: _launch(f, g, s)) for s in (3, 4)]
    # dtype that differs from the second launch on.
    g = group_of([0, 1])
    if g is not None:
        f = _fused(mm.mm)
        out["dtype_first"] = _outcome(lambda: _launch(f, g, 1))
        out["dtype_second"] = _outcome(lambda: _launch(f, g, 2, dtype=torch.float16 if rank == 1 else torch.float32))
        out["dtype_after"] = _outcome(lambda: _launch(f, g, 3))
    # A non-contiguous shard on one rank of three, at its first launch: both others name it.
    g = group_of([0, 1, 2])
    f = _fused(mm.mm)
    out["noncontig"] = _outcome(lambda: _launch(f, g, 1, contiguous=rank != 2))
    out["noncontig_after"] = _outcome(lambda: _launch(f, g, 2))
    # One rank launches another operator (the same kernel, one chunk per rank) in between.
    g = group_of([1, 2])
    if g is not None:
        f, other = _fused(mm.mm), _fused(mm.mm, chunks=1)
        out["other_first"] = _outcome(lambda: _launch(f, g, 1))
        out["other_between"] = _outcome(lambda: _launch(other if rank == 2 else f, g, 2))
        out["other_after"] = _outcome(lambda: _launch(f, g, 3))
    # Another kernel altogether in between (rank 0's).
    g = group_of([0, 1])
    if g is not None:
        from syncopy import templates

        t, f = templates.get("ag_gemm"), _fused(mm.mm)
        if rank == 0:
            other = t.fused(chunks_per_rank=2, timeout_s=TIMEOUT_S)
            inputs = t.module.inputs(rank, 2, (ROWS, K, N), torch.float32)
            out["kernel_between"] = _outcome(lambda: t.module.launch(other, **inputs, group=g))
        else:
            out["kernel_between"] = _outcome(lambda: _launch(f, g, 1))
    # A rank that refuses after the exchange (its output is too short: its own extent check), launch 2.
    g = group_of([0, 1, 2])
    f = _fused(mm.mm)
    out["short_first"] = _outcome(lambda: _launch(f, g, 1))
    out["short_second"] = _outcome(lambda: _launch(f, g, 2, out_rows=ROWS if rank == 1 else None))
    # One rank launching fewer times: rank 1 makes one launch, rank 0 two (rank 1 stays up meanwhile).
    g = group_of([0, 1])
    if g is not None:
        f = _fused(mm.mm)
        out["fewer_first"] = _outcome(lambda: _launch(f, g, 1))
        if rank == 0:
            out["fewer_second"] = _outcome(lambda: _launch(f, g, 2))
        stay_until_reported(rank, [0], 60, tag="fewer")
        out["fewer_refused"] = _outcome(lambda: _launch(f, g, 3)) if rank == 0 else None
    # Warm CUDA launches do not wait for their exchange (they enqueue and return): the same exchange,
    # deferred, on CPU ranks. A disagreement is found by the timeout's explanation, or at the next launch.
    g = group_of([0, 1])
    if g is not None:
        out["deferred"] = _deferred(_fused(mm.mm), g, rank)
    dist.barrier()
    return out


def _deferred(fused, group, rank: int) -> dict:
    """agreement.meet with wait=False after a first launch: what cause() and the next launch say."""
    from syncopy.runtime.launch import agreement

    def words(rows: int) -> dict:
        return {"kernel": "mm", "schedule": fused.schedule.key(), "shard": [[rows, K], "torch.float32"], "listed": "()"}

    def completed(n: int) -> None:
        g = agreement._groups[agreement.control.group_token(group)]
        work = next(item[1] for item in g.pending if item[0] == n)
        work.wait()

    out = {"first": agreement.meet(fused, group, words(ROWS), wait=True)}
    n = agreement.meet(fused, group, words(ROWS if rank == 0 else ROWS + 4), wait=False)  # returns at once
    out["second_n"] = n
    completed(n)
    out["cause"] = agreement.cause(group, None)
    n = agreement.meet(fused, group, words(ROWS if rank == 0 else ROWS + 2), wait=False)
    completed(n)
    try:
        agreement.meet(fused, group, words(ROWS), wait=False)
        out["next"] = None
    except Exception as exc:
        out["next"] = f"{type(exc).__name__}: {exc}"
    return out

