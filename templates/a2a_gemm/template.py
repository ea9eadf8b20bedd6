"""a2a_gemm: MoE dispatch + expert GEMM. Shape M,N,K: M the token rows a rank holds, K the hidden
size, N the expert width; E=2 experts per rank. Each rank's rows come sorted by destination rank,
then by that rank's expert (as after an MoE layer's permutation); `counts[d, e]` says how many go to
expert e of rank d. Routing:

- uniform (default): equal blocks of M/W rows (rounded down to whole tiles), M/(W E) per expert:
  equal splits, no split sizes at launch (every backend);
- random: every token to a random expert, with skewed weights and some experts left empty, drawn
  anew for every launch: the split sizes go with the launch (input_split_sizes, CPU worlds);
- skewed: most tokens to one expert of one rank, a few elsewhere, most experts empty.

The grouped GEMM reads a tile table built from the counts the rank receives; its tiles run this
rank's own rows first, then each peer's in the order they arrive (local_first)."""
import torch
import torch.distributed as dist
import triton

from syncopy.templates import rank_of, world_size

DEFAULT_SHAPE = (128, 32, 32)
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 6e-2}
EXPERTS = 2
META = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32)
ROUTINGS = ("uniform", "random", "skewed")


def _tokens_per_block(m, world, block_m):
    group = EXPERTS * block_m
    return max(group, (m // world) // group * group)


def route(rank: int, world: int, tokens: int, routing: str, seed: int = 0) -> torch.Tensor:
    """counts[d, e]: how many of this rank's `tokens` rows go to expert e of rank d (int64, sums to tokens)."""
    g = torch.Generator().manual_seed(seed * 1000 + 700 + rank)
    experts = world * EXPERTS
    if routing == "random":
        weights = torch.rand(experts, generator=g) ** 3  # skewed, and now and then an expert left out
        weights[torch.rand(experts, generator=g) < 0.25] = 0.0
        if weights.sum() == 0:
            weights[int(torch.randint(experts, (1,), generator=g))] = 1.0
    elif routing == "skewed":
        weights = torch.zeros(experts)
        weights[int(torch.randint(experts, (1,), generator=g))] = 1.0
        weights[int(torch.randint(experts, (1,), generator=g))] += 0.05
    else:
        raise ValueError(f"routing {routing!r} draws no counts; one of {', '.join(ROUTINGS[1:])}")
    choice = torch.multinomial(weights, tokens, replacement=True, generator=g) if tokens else torch.zeros(0, dtype=torch.int64)
    return torch.bincount(choice, minlength=experts).view(world, EXPERTS)


def inputs(rank, world, shape, dtype, seed=0, routing="uniform"):
    m, n, k = shape
    rows = world * _tokens_per_block(m, world, META["BLOCK_M"]) if routing == "uniform" else m
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed * 1000 + rank)).to(dtype)
    w = torch.randn(EXPERTS, k, n, generator=torch.Generator().manual_seed(seed * 1000 + 500 + rank)).to(dtype)
    if routing == "uniform":
        return {"x": x, "w": w}
    return {"x": x, "w": w, "counts": route(rank, world, m, routing, seed)}


def _uniform_counts(rows: int, world: int) -> torch.Tensor:
    return torch.full((world, EXPERTS), rows // world // EXPERTS, dtype=torch.int64)


def received_counts(counts: torch.Tensor, group=None) -> torch.Tensor:
    """What each rank sends this rank, per local expert: [src, e] (the counts' own all_to_all)."""
    if world_size(group) == 1:
        return counts.clone()
    out = torch.empty_like(counts)
    dist.all_to_all_single(out, counts.contiguous(), group=group)
    return out


def tile_table(received: torch.Tensor, block_m: int, rank: int, device) -> torch.Tensor:
    """(first row, end of its expert's run, expert) per tile over the receive buffer (blocks by
    source rank, each grouped by expert), this rank's block first, then rank-1, rank-2, ... (the
    order local_first lands them). At least one tile, empty if nothing arrives."""
    world = received.shape[0]
    starts = [0, *torch.cumsum(received.reshape(-1), 0).tolist()]
    tiles = []
    for d in range(world):
        src = (rank - d) % world
        for e in range(EXPERTS):
            lo, hi = starts[src * EXPERTS + e], starts[src * EXPERTS + e + 1]
            tiles += [(row, hi, e) for row in range(lo, hi, block_m)]
    tiles = tiles or [(0, 0, 0)]
    return torch.tensor(tiles, dtype=torch.int32, device=device).reshape(-1)


def launch(fused, x, w, counts=None, group=None, **meta):
    """Y = expert_gemm(all_to_all(x), w), fused: tiles of a peer's tokens start as those arrive.
    `counts` (routed): [world, E] rows of x per destination rank and expert; None: uniform."""
    meta = {**META, **meta}
    world = world_size(group)
    rank = rank_of(group) if world > 1 else 0
    (m, k), n = x.shape, w.shape[2]
    received = received_counts(counts, group) if counts is not None else _uniform_counts(m, world)
    tiles = tile_table(received, meta["BLOCK_M"], rank, x.device)
    y = torch.empty(int(received.sum()), n, dtype=x.dtype, device=x.device)
    grid = (tiles.numel() // 3, triton.cdiv(n, meta["BLOCK_N"]))
    splits = {}
    if counts is not None:  # routed: this launch's split sizes
        splits = dict(input_split_sizes=counts.sum(1).tolist(), output_split_sizes=received.sum(1).tolist())
    fused[grid](x, w, y, tiles, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
                y.stride(0), y.stride(1), **meta, **splits, group=group)
    return y


def reference(x, w, counts=None, group=None):
    """all_to_all_single with the same splits, then each expert's rows times its weight."""
    world = dist.get_world_size(group)
    if counts is None:
        counts = _uniform_counts(x.shape[0], world)
    got = received_counts(counts, group)
    received = x.new_empty(int(got.sum()), x.shape[1])
    dist.all_to_all_single(received, x.contiguous(), got.sum(1).tolist(), counts.sum(1).tolist(), group=group)
    expert = torch.arange(EXPERTS).repeat(world).repeat_interleave(got.reshape(-1))
    out = torch.empty(received.shape[0], w.shape[2], dtype=torch.float32)
    for e in range(EXPERTS):
        rows = expert == e
        out[rows] = received[rows].float() @ w[e].float()
    return out.to(x.dtype)


# Types for `syncopy compile a2a_gemm` (fp16 operands, row-major).
SIGNATURE = {"X": "*fp16", "Wt": "*fp16", "Y": "*fp16", "tiles": "*i32", "N": "i32", "K": "i32", "stride_xm": "i32",
             "stride_xk": "i32", "stride_we": "i32", "stride_wk": "i32", "stride_wn": "i32", "stride_ym": "i32", "stride_yn": "i32"}
CONSTEXPRS = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
