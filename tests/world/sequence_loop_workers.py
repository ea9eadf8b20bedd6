"""Rank functions of test_sequence_loops.py (spawned: module level): the kernels of
tests/kernels/sequence_loops.py fused with their sequence gathered along dim 1, launched as their
repositories launch them, three launches with new data (ragged key lengths), poisoned receive
buffers, traced, each launch checked against torch on the gathered tensors."""
from __future__ import annotations

B, H, D = 2, 2, 16
CHUNKS_PER_RANK = 2
KEYS = 24          # keys and values a rank (FA2, guarded attention): 48 gathered on 2 ranks, 72 on 3
QUERIES, BLOCK_M = 32, 16
# (BLOCK_N, keys cut off the end) per launch: ragged lengths, EVEN_N where seqlen_k % BLOCK_N == 0.
FA2_LAUNCHES = ((32, 5), (16, 0), (32, 17))
SCAN_CHUNKS, SCAN_DIM, SCAN_BLOCK = 3, 24, 16   # Mamba: sequence chunks a rank, head dim (ragged over the block)
STEPS, STATE = 4, 16                            # linear attention: time steps a rank, K
NAMES = ("fa2_bshd", "guarded_attention_bshd", "state_passing", "linear_recurrence", "linear_recurrence_constexpr_steps")
TENSORS = {"fa2_bshd": ["K", "V"], "guarded_attention_bshd": ["K", "V"], "state_passing": "states_ptr",
           "linear_recurrence": ["k", "v"], "linear_recurrence_constexpr_steps": ["k", "v"]}
#: The grid each kernel launches: how many tile starts a launch records.
TILES = {"fa2_bshd": 8, "guarded_attention_bshd": 8, "state_passing": 8, "linear_recurrence": B * H,
         "linear_recurrence_constexpr_steps": B * H}


def _link(hold: bool):
    from syncopy.runtime.transport.link import Link

    # hold: each remote chunk stays out of the buffer, its flag down, until a tile was seen waiting for
    # it (Link.hold_until_waited): what a tile saw at its start does not depend on this machine's speed.
    return Link(latency_s=0.002, hold_until_waited=True, hold_s=3.0) if hold else None


def _worst(got, want) -> float:
    import torch

    return float(torch.nan_to_num((got.float() - want.float()).abs(), nan=float("inf")).max())


def _gathered(t, world: int):
    import torch
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, 1)


def _strides(shape) -> tuple:
    import torch

    return torch.empty(shape).stride()


def attention_reference(q, k, v, seqlen_k: int, scale: float):
    """softmax(q k^T * scale) v over the first seqlen_k keys, per batch and head: [B, Sq, H, D]."""
    import torch

    s = torch.einsum("bmhd,bnhd->bhmn", q, k[:, :seqlen_k]) * scale
    return torch.einsum("bhmn,bnhd->bmhd", torch.softmax(s, -1), v[:, :seqlen_k])


def _attention(name, fused, rank: int, world: int, launch: int):
    """One launch of FA2 (or the guarded attention) over K, V [B, S, H, D] gathered along S, and torch's answer."""
    out, q, k, v, seqlen_k = launch_attention(name, fused, rank, world, launch)
    return out, attention_reference(q, _gathered(k, world), _gathered(v, world), seqlen_k, D ** -0.5)


def launch_attention(name, fused, rank: int, world: int, launch: int):
    """Launch `fused` as flash_attn_triton.py launches _fwd_kernel: (out, q, k, v, seqlen_k)."""
    import torch
    import triton

    block_n, cut = FA2_LAUNCHES[launch]
    g = torch.Generator().manual_seed(7919 * launch + 31 * rank + world)
    q = torch.randn(B, QUERIES, H, D, generator=g)
    k, v = (torch.randn(B, KEYS, H, D, generator=g) for _ in range(2))
    full = (B, KEYS * world, H, D)
    seqlen_k = KEYS * world - cut
    out = torch.full_like(q, float("nan"))
    ks, vs = _strides(full), _strides(full)
    grid = (triton.cdiv(QUERIES, BLOCK_M), B * H)
    args = (q, k, v, out, D ** -0.5, q.stride(0), q.stride(2), q.stride(1), ks[0], ks[2], ks[1], vs[0], vs[2], vs[1],
            out.stride(0), out.stride(2), out.stride(1), H, QUERIES, seqlen_k)
    if name == "fa2_bshd":
        fused[grid](*args, BLOCK_HEADDIM=D, BLOCK_M=BLOCK_M, BLOCK_N=block_n)
    else:
        fused[grid](*args, D=D, BM=BLOCK_M, BN=block_n)
    return out, q, k, v, seqlen_k


def scan_reference(states, dA_cs):
    """Mamba's state passing: out[:, 0] = 0, s = exp(dA_cs[c]) s + states[:, c], out[:, c + 1] = s; final = s."""
    import torch

    s = torch.zeros_like(states[:, 0])
    outs = [s]
    for c in range(states.shape[1]):
        s = torch.exp(dA_cs[:, :, c])[..., None] * s + states[:, c]
        outs.append(s)
    return torch.stack(outs[:-1], 1), s


def _scan(fused, rank: int, world: int, launch: int):
    import torch

    out, final, states, dA_cs = launch_scan(fused, rank, world, launch)
    want_out, want_final = scan_reference(_gathered(states, world), dA_cs)
    return torch.cat([out.flatten(), final.flatten()]), torch.cat([want_out.flatten(), want_final.flatten()])


def launch_scan(fused, rank: int, world: int, launch: int):
    """Launch `fused` as Mamba's _state_passing_fwd launches its kernel: (out, final, states, dA_cs)."""
    import torch
    import triton

    g = torch.Generator().manual_seed(104729 * launch + 31 * rank + world)
    chunks = SCAN_CHUNKS * world
    states = torch.randn(B, SCAN_CHUNKS, H, SCAN_DIM, generator=g)
    dA_cs = -torch.rand(B, H, chunks, generator=torch.Generator().manual_seed(1009 * launch + world))  # the same on every rank
    # Mamba's layout: out[:, c] is the state before chunk c; the store under `if c < nchunks - 1` ends
    # at the last chunk, which the launch's extent check proves (infer._guard_last_iteration).
    out = torch.full((B, chunks, H, SCAN_DIM), float("nan"))
    final = torch.full((B, H, SCAN_DIM), float("nan"))
    st = _strides((B, chunks, H, SCAN_DIM))
    grid = (triton.cdiv(SCAN_DIM, SCAN_BLOCK), B, H)
    fused[grid](states, out, final, dA_cs, SCAN_DIM, chunks, st[0], st[1], st[2], st[3], out.stride(0), out.stride(1),
                out.stride(2), out.stride(3), final.stride(0), final.stride(1), final.stride(2), dA_cs.stride(0),
                dA_cs.stride(2), dA_cs.stride(1), BLOCK_SIZE=SCAN_BLOCK)
    return out, final, states, dA_cs


def recurrence_reference(q, k, v):
    """h_t = h_{t-1} + k_t v_t^T, o_t = q_t h_t, per batch and head: [B, T, H, K]."""
    import torch

    h = torch.zeros(q.shape[0], q.shape[2], q.shape[3], q.shape[3])
    outs = []
    for t in range(q.shape[1]):
        h = h + k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], h))
    return torch.stack(outs, 1)


def _recurrence(fused, rank: int, world: int, launch: int):
    o, q, k, v = launch_recurrence(fused, rank, world, launch)
    return o, recurrence_reference(q, _gathered(k, world), _gathered(v, world))


def launch_recurrence(fused, rank: int, world: int, launch: int):
    """Launch `fused` one program per (batch, head): (o, q, k, v)."""
    import torch

    g = torch.Generator().manual_seed(15485863 * launch + 31 * rank + world)
    steps = STEPS * world
    q = torch.randn(B, steps, H, STATE, generator=g) * 0.5
    k, v = (torch.randn(B, STEPS, H, STATE, generator=g) * 0.5 for _ in range(2))
    o = torch.full_like(q, float("nan"))
    st = _strides(q.shape)
    fused[(B, H)](q, k, v, o, steps, q.stride(0), q.stride(1), q.stride(2), st[0], st[1], st[2], st[0], st[1], st[2],
                  o.stride(0), o.stride(1), o.stride(2), K=STATE)
    return o, q, k, v


def launch_recurrence_constexpr_steps(fused, rank: int, world: int, launch: int):
    """Launch `fused` as flash-linear-attention does, contiguous [B, T, H, K], no stride passed: (o, q, k, v)."""
    import torch

    g = torch.Generator().manual_seed(15485863 * launch + 31 * rank + world)
    steps = STEPS * world
    q = torch.randn(B, steps, H, STATE, generator=g) * 0.5
    k, v = (torch.randn(B, STEPS, H, STATE, generator=g) * 0.5 for _ in range(2))
    o = torch.full_like(q, float("nan"))
    fused[(B, H)](q, k, v, o, steps, H=H, K=STATE)
    return o, q, k, v


def run_sequence_loops(rank: int, world: int, hold: bool) -> dict:
    """Each kernel of NAMES fused along dim 1, traced, poisoned receive buffers: per launch its error
    against torch, its tile starts as chunks landed, in start order, and its total chunks; and whether
    its loop runs in arrival order or as written (read off the source the operator runs)."""
    import torch.distributed as dist

    import syncopy
    from tests.kernels import sequence_loops as kernels

    out = {}
    for name in NAMES:
        sched = {"version": 1, "pattern": "all_gather", "tensor": TENSORS[name], "dim": 1, "chunks_per_rank": CHUNKS_PER_RANK,
                 "order": "ring"}
        fused = syncopy.overlap(sched, trace=True, poison_receive=True, link=_link(hold))(getattr(kernels, name))
        source = fused.build().stages["fused"]
        decision = "arrival" if "for syncopy_t in range(0, syncopy_n):" in source else \
            "written" if "# syncopy: this loop keeps its written order" in source else \
            "before" if "# syncopy: one wait before the loop" in source else "?"
        launches = []
        for launch in range(3):
            dist.barrier()  # start together: a late rank would find its chunks already there
            if name in ("fa2_bshd", "guarded_attention_bshd"):
                got, want = _attention(name, fused, rank, world, launch)
            elif name == "state_passing":
                got, want = _scan(fused, rank, world, launch)
            elif name == "linear_recurrence":
                got, want = _recurrence(fused, rank, world, launch)
            else:
                o, q, k, v = launch_recurrence_constexpr_steps(fused, rank, world, launch)
                got, want = o, recurrence_reference(q, _gathered(k, world), _gathered(v, world))
            trace = fused.last_trace
            launches.append({"error": _worst(got, want), "starts": [a for _, _, a in trace.tile_starts],
                             "total": trace.total_chunks})
        out[name] = {"decision": decision, "launches": launches}
    return out
