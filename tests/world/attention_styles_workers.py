"""Rank functions of test_attention_styles.py (spawned: module level): the attention kernels of
tests/kernels/attention_styles.py fused with `tensor: [K, V]`, launched as their repositories launch
them, each launch with new data and checked against torch on the gathered K and V."""
from __future__ import annotations

H, D = 2, 16
BLOCK_M = 16
GATHERED = 48   # FA2's gathered keys: 48 // world rows a rank; BLOCK_N 32 leaves a ragged last block, 16 does not
QUERIES = 32    # two query tiles of BLOCK_M
# FA2 launches: (BLOCK_N, IS_CAUSAL). EVEN_N (a heuristic, from BLOCK_N) flips between launches on the
# same tensors: the unmasked arm is live only in the second, and the third reuses the first's order.
FA2_LAUNCHES = ((32, False), (16, True), (32, True))
# Decode: requests of these many keys, split into these many parts (grid z = the most splits).
SEQ_LENS, SPLITS, PAGE_BLOCK = (7, 10), (2, 3), 4


def _link(hold: bool):
    from syncopy.runtime.transport.link import Link

    # hold: each remote chunk stays out of the buffer, its flag down, until a tile was seen waiting for
    # it (Link.hold_until_waited): what a tile saw at its start does not depend on this machine's speed.
    return Link(latency_s=0.002, hold_until_waited=True, hold_s=3.0) if hold else None


def _worst(got, want) -> float:
    import torch

    return float(torch.nan_to_num((got.float() - want.float()).abs(), nan=float("inf")).max())


def fa2_reference(q, k, v, causal: bool):
    """softmax(q k^T / sqrt(D), causal over local positions) v, per head: [Sq, H, D]."""
    import torch

    s = torch.einsum("mhd,nhd->hmn", q, k) / D ** 0.5
    if causal:
        s = s.masked_fill(torch.arange(k.shape[0])[None, None, :] > torch.arange(q.shape[0])[None, :, None], float("-inf"))
    return torch.einsum("hmn,nhd->mhd", torch.softmax(s, -1), v)


def launch_fa2(kernel, q, k, v, out, n: int, block_n: int, causal: bool, **extra):
    """As flash_attn_triton.py's _flash_attn_forward launches _fwd_kernel (one batch): [S, H, D] packed."""
    import triton

    grid = (triton.cdiv(q.shape[0], BLOCK_M), H)
    kernel[grid](q, k, v, out, 1.0 / D ** 0.5, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                 out.stride(0), out.stride(1), q.shape[0], n, D, IS_CAUSAL=causal, BLOCK_HEADDIM=D, BLOCK_M=BLOCK_M,
                 BLOCK_N=block_n, **extra)


def fa2_inputs(rank: int, world: int, launch: int):
    import torch

    g = torch.Generator().manual_seed(7919 * launch + 31 * rank + world)
    q = torch.randn(QUERIES, H, D, generator=g)
    k, v = (torch.randn(GATHERED // world, H, D, generator=g) for _ in range(2))
    return q, k, v


def decode_inputs(rank: int, world: int, launch: int, pool: int):
    """q [B, H, D]; this rank's K and V slots [pool, H, D]; the requests' pages: distinct slots of the
    gathered pool (world * pool), drawn anew each launch, the same on every rank."""
    import torch

    g = torch.Generator().manual_seed(104729 * launch + 31 * rank + world)
    q = torch.randn(len(SEQ_LENS), H, D, generator=g)
    k, v = (torch.randn(pool, H, D, generator=g) for _ in range(2))
    shared = torch.Generator().manual_seed(1009 * launch + world)
    slots = torch.randperm(world * pool, generator=shared)[:sum(SEQ_LENS)].to(torch.int32)
    indptr = torch.tensor([0, *torch.tensor(SEQ_LENS).cumsum(0).tolist()], dtype=torch.int32)
    return q, k, v, indptr, slots


def launch_decode(kernel, q, k, v, indptr, slots, **extra):
    """As SGLang's decode_attention_fwd_normal launches _fwd_kernel_stage1; returns (Att_Out, Att_Lse),
    NaN where a split has no keys (the kernel writes nothing there)."""
    import torch

    splits = torch.tensor(SPLITS, dtype=torch.int32)
    b, most = len(SEQ_LENS), max(SPLITS)
    att_out = torch.full((b, H, most, D), float("nan"))
    att_lse = torch.full((b, H, most), float("nan"))
    kernel[(b, H, most)](q, k, v, 1.0 / D ** 0.5, indptr, slots, att_out, att_lse, splits, q.stride(0), q.stride(1),
                         k.stride(0), k.stride(1), v.stride(0), v.stride(1), att_out.stride(0), att_out.stride(1),
                         att_out.stride(2), kv_group_num=1, BLOCK_DMODEL=D, BLOCK_DV=D, BLOCK_N=PAGE_BLOCK,
                         MIN_BLOCK_KV=PAGE_BLOCK, Lk=D, Lv=D, **extra)
    return att_out, att_lse


def decode_merge(att_out, att_lse):
    """Stage 2 (SGLang's _fwd_kernel_stage2), in torch: the splits' outputs weighted by exp(lse)."""
    import torch

    live = ~torch.isnan(att_lse)
    lse = torch.where(live, att_lse, torch.tensor(float("-inf")))
    w = torch.softmax(lse, -1)
    return torch.einsum("bhs,bhsd->bhd", w, torch.where(live[..., None], att_out, torch.tensor(0.0)))


def decode_reference(q, keys, values, indptr, slots):
    import torch

    out = []
    for b in range(len(SEQ_LENS)):
        rows = slots[int(indptr[b]):int(indptr[b + 1])].long()
        s = torch.einsum("hd,nhd->hn", q[b], keys[rows]) / D ** 0.5
        out.append(torch.einsum("hn,nhd->hd", torch.softmax(s, -1), values[rows]))
    return torch.stack(out)


def _gathered(t, world: int):
    import torch
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def run_styles(rank: int, world: int, hold: bool) -> dict:
    """FA2 (three launches, EVEN_N flipping) and split-KV decode (three launches, new pages each),
    fused with `tensor: [K, V]`, traced, poisoned receive buffers. Returns each launch's error against
    torch, its tile starts in start order as (tile, chunks landed), and its total chunks."""
    import syncopy
    from tests.kernels import attention_styles as ks

    sched = {"version": 1, "pattern": "all_gather", "tensor": ["K", "V"], "dim": 0, "chunks_per_rank": 2, "order": "ring"}
    fa2 = syncopy.overlap(sched, trace=True, poison_receive=True, link=_link(hold))(ks.fa2_forward)
    out = {"fa2": [], "decode": []}
    for launch, (block_n, causal) in enumerate(FA2_LAUNCHES):
        q, k, v = fa2_inputs(rank, world, launch)
        o = torch_full_nan(q)
        launch_fa2(fa2, q, k, v, o, GATHERED, block_n, causal)
        want = fa2_reference(q, _gathered(k, world), _gathered(v, world), causal)
        trace = fa2.last_trace
        out["fa2"].append({"error": _worst(o, want), "starts": [(t, a) for t, _, a in trace.tile_starts], "total": trace.total_chunks})
    sched = {**sched, "tensor": ["K_Buffer", "V_Buffer"]}
    dec = syncopy.overlap(sched, trace=True, poison_receive=True, link=_link(hold))(ks.decode_split_kv)
    for launch in range(3):
        q, k, v, indptr, slots = decode_inputs(rank, world, launch, pool=12)
        got = decode_merge(*launch_decode(dec, q, k, v, indptr, slots))
        want = decode_reference(q, _gathered(k, world), _gathered(v, world), indptr, slots)
        trace = dec.last_trace
        out["decode"].append({"error": _worst(got, want), "starts": [(t, a) for t, _, a in trace.tile_starts],
                              "total": trace.total_chunks})
    return out


def torch_full_nan(like):
    import torch

    return torch.full_like(like, float("nan"))
