"""Rank functions for tests/world/test_moe.py: the a2a_gemm template with split sizes that change
every launch (ragged, empty, skewed), against torch's all_to_all_single with the same splits and the
per-expert GEMM; and the one-line errors of split sizes that do not fit."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def scale_rows(X, Y, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Y = 2 X + 1 by tiles of BLOCK_M rows: a tile's rows may cross from one sender's block to the next."""
    pid = tl.program_id(0)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(X + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    tl.store(Y + rm[:, None] * N + rn[None, :], x * 2.0 + 1.0, mask=mask)


def routed_launches(rank: int, world: int, cases: list[dict], link=None) -> list[dict]:
    """Each case: chunks per rank and `launches`, each every rank's counts [d][e] (rows this rank
    sends to expert e of rank d); `exchange`: launch with input_split_sizes only (the runtime
    exchanges the counts). NaN-poisoned receive buffers; `link` (None: the process's default link).
    Returns, per case, each launch's max error, the rows received and the kernel's verdict."""
    import torch
    import triton

    from syncopy import templates

    t = templates.get("a2a_gemm")
    mod = t.module
    out = []
    for ci, case in enumerate(cases):
        fused = t.fused(chunks_per_rank=case["chunks"], poison_receive=True, timeout_s=30.0, **_link(link))
        errs, rows = [], []
        for li, per_rank in enumerate(case["launches"]):
            counts = torch.tensor(per_rank[rank], dtype=torch.int64)
            inp = mod.inputs(rank, world, (int(counts.sum()), 32, 24), torch.float32, seed=100 * ci + li, routing="uniform")
            x = torch.randn(int(counts.sum()), 24, generator=torch.Generator().manual_seed(7 * li + rank))
            w = inp["w"]
            if case.get("exchange"):
                y = _launch_without_output_splits(fused, mod, x, w, counts, rank, triton)
            else:
                y = mod.launch(fused, x, w, counts)
            # Both torch's all_to_all_single with the same splits (the template's reference) and the
            # meaning recomputed here from every rank's inputs: the product's reference is not trusted alone.
            for ref in (mod.reference(x, w, counts), _meaning(rank, world, x, counts, w)):
                assert ref.shape == y.shape, (ref.shape, y.shape)
                errs.append(float((y - ref).abs().max()) if ref.numel() else 0.0)
            rows.append(int(y.shape[0]))
        out.append({"errs": errs, "rows": rows})
    return out


def _meaning(rank: int, world: int, x, counts, w):
    """Rank s's rows for this rank are its block `rank` (after the rows it sends ranks 0..rank-1),
    counts[rank][e] of them for expert e in expert order; this rank's output is those blocks in rank
    order, each row times its expert's weight."""
    import torch
    import torch.distributed as dist

    every = [None] * world
    dist.all_gather_object(every, (x, counts))
    out = []
    for xs, cs in every:
        at = int(cs[:rank].sum())
        for e in range(cs.shape[1]):
            n = int(cs[rank][e])
            out.append(xs[at:at + n] @ w[e])
            at += n
    return torch.cat(out) if out else torch.empty(0, w.shape[2])


def _launch_without_output_splits(fused, mod, x, w, counts, rank, triton):
    """mod.launch, but the launch names input_split_sizes only."""
    import torch

    received = mod.received_counts(counts)
    tiles = mod.tile_table(received, mod.META["BLOCK_M"], rank, x.device)
    y = torch.empty(int(received.sum()), w.shape[2])
    grid = (tiles.numel() // 3, triton.cdiv(w.shape[2], mod.META["BLOCK_N"]))
    fused[grid](x, w, y, tiles, w.shape[2], x.shape[1], x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
                y.stride(0), y.stride(1), **mod.META, input_split_sizes=counts.sum(1))
    return y


def split_errors(rank: int, world: int, link=None) -> dict:
    """The one-line errors of split sizes that do not fit, each raised on every rank; then a good
    launch still runs on the same operator."""
    import torch

    from syncopy import templates
    from syncopy.errors import LaunchError

    t = templates.get("a2a_gemm")
    mod = t.module
    fused = t.fused(chunks_per_rank=2, poison_receive=True, timeout_s=30.0, **_link(link))
    counts = torch.tensor([[3, 1]] * world, dtype=torch.int64)
    x = torch.randn(4 * world, 24)
    w = torch.randn(2, 24, 32)
    got = {}

    def attempt(name, **splits):
        received = mod.received_counts(counts)
        tiles = mod.tile_table(received, mod.META["BLOCK_M"], rank, x.device)
        y = torch.empty(int(received.sum()), 32)
        try:
            fused[(tiles.numel() // 3, 1)](x, w, y, tiles, 32, 24, x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
                                           y.stride(0), y.stride(1), **mod.META, **splits)
            got[name] = "ran"
        except LaunchError as exc:
            got[name] = str(exc)
        return y

    attempt("short", input_split_sizes=[4] * (world - 1) + [3])
    attempt("length", input_split_sizes=[4 * world])
    attempt("negative", input_split_sizes=[4 * world + 1, -1] + [0] * (world - 2))
    attempt("output", input_split_sizes=[4] * world, output_split_sizes=[5] + [4] * (world - 2) + [3])
    # A mistake on one rank only is an error on every rank (the exchange carries each rank's verdict).
    attempt("one_rank_sum", input_split_sizes=[4] * world if rank == 0 else [5] * world)
    attempt("one_rank_output", input_split_sizes=[4] * world, **({"output_split_sizes": [3, 5]} if rank == 0 else {}))
    y = attempt("good", input_split_sizes=[4] * world, output_split_sizes=[4] * world)
    got["good_err"] = float((y - mod.reference(x, w, counts)).abs().max())
    return got


def tiles_across_blocks(rank: int, world: int, received: list[list[int]], link=None) -> list[dict]:
    """A kernel whose tiles (BLOCK_M 4) cross senders' blocks, its tile order probed from program ids:
    every rank receives `received[l][s]` rows from rank s at launch l (the same grid and arguments at
    every launch, only the splits change), some blocks empty between two others. Against
    all_to_all_single with the same splits, and against `fused.reference`."""
    import torch
    import torch.distributed as dist

    import syncopy

    schedule = dict(pattern="all_to_all", tensor="X", dim=0, chunks_per_rank=2, order="local_first")
    fused = syncopy.overlap(schedule, poison_receive=True, timeout_s=30.0, **_link(link))(scale_rows)
    n = 8
    out = []
    for li, per_src in enumerate(received):
        send = [per_src[rank]] * world
        x = torch.randn(sum(send), n, generator=torch.Generator().manual_seed(11 * li + rank))
        m = sum(per_src)
        grid = (triton.cdiv(m, 4),)
        y = torch.full((m, n), float("nan"))
        fused[grid](x, y, m, n, BLOCK_M=4, BLOCK_N=n, input_split_sizes=send)
        got = x.new_empty(m, n)
        dist.all_to_all_single(got, x, list(per_src), send)
        ref = torch.full((m, n), float("nan"))
        fused.reference[grid](x, ref, m, n, BLOCK_M=4, BLOCK_N=n, input_split_sizes=send)
        out.append({"err": float((y - (2 * got + 1)).abs().max()), "ref_err": float((ref - (2 * got + 1)).abs().max())})
    return out


def _link(link) -> dict:
    return {} if link is None else {"link": link}


def moe_world(rank: int, world: int, cases: list[dict], across: list[list[int]] | None, errors: bool, link=None) -> dict:
    """Every check of tests/world/test_moe.py in one job of the shared world of its size (a world costs
    seconds to start): the routed template launches, then the tiles across blocks (`across`), then the
    split errors; every operator on `link` (None: the process's default link)."""
    return {"routed": routed_launches(rank, world, cases, link),
            "across": tiles_across_blocks(rank, world, across, link) if across else None,
            "errors": split_errors(rank, world, link) if errors else None}
