"""Rank functions for tests/templates (spawned, so module level and picklable).

The templates ship their own `reference`, and `syncopy run` judges a run with it: the tests do not
trust either. Each rank gathers every rank's inputs and computes what the template means with
plain torch, written here from the template's docstring, then measures the error itself.
"""
from __future__ import annotations

#: max |fused - torch| / max(1, max |torch|) per dtype, chosen here, not read from the product.
TOL = {"fp32": 1e-3, "fp16": 2e-2}
EXPERTS = 2  # a2a_gemm: rows of each received block split evenly between two experts


def _every_rank(t):
    """[t of rank 0, t of rank 1, ...] (gloo all_gather of equal-shape tensors)."""
    import torch
    import torch.distributed as dist

    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return out


def meaning(name: str, rank: int, world: int, inp: dict):
    """What template `name` computes on this rank, in float32, from every rank's inputs."""
    import torch

    if name in ("ag_gemm", "ag_gemm_persistent"):
        return torch.cat([a.float() for a in _every_rank(inp["a"])]) @ inp["b"].float()
    if name == "ag_rmsnorm":
        x = torch.cat([x.float() for x in _every_rank(inp["x"])])
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * inp["w"].float()
    if name in ("gemm_rs", "gemm_ar"):
        a_s, b_s = _every_rank(inp["a"]), _every_rank(inp["b"])
        total = sum(a.float() @ b.float() for a, b in zip(a_s, b_s))
        rows = total.shape[0] // world
        return total[rank * rows:(rank + 1) * rows] if name == "gemm_rs" else total
    if name == "a2a_gemm":
        # Block s of what this rank receives is block `rank` of rank s's x; within a block the first
        # half of the tokens goes to expert 0, the second half to expert 1 (this rank's weights).
        x_s = _every_rank(inp["x"])
        t = inp["x"].shape[0] // world
        received = torch.cat([x[rank * t:(rank + 1) * t].float() for x in x_s])
        per = t // EXPERTS
        out = torch.empty(received.shape[0], inp["w"].shape[2])
        for s in range(world):
            for e in range(EXPERTS):
                rows = slice(s * t + e * per, s * t + (e + 1) * per)
                out[rows] = received[rows] @ inp["w"][e].float()
        return out
    if name == "ag_attention":
        # Context parallelism: this rank's queries sit at global positions rank*M .. rank*M + M - 1 and
        # attend to every rank's keys and values (causal: to those at positions <= their own).
        keys, values = (torch.cat([t.float() for t in _every_rank(inp[n])]) for n in ("k", "v"))
        q = inp["q"].float()
        m, n = q.shape[0], keys.shape[0]
        scores = torch.einsum("mhd,nhd->hmn", q, keys) / q.shape[2] ** 0.5
        if inp["causal"]:
            seen = torch.arange(n)[None, :] <= rank * m + torch.arange(m)[:, None]
            scores = scores.masked_fill(~seen, float("-inf"))
        return torch.einsum("hmn,nhd->mhd", torch.softmax(scores, -1), values)
    raise KeyError(name)


def run_templates(rank: int, world: int, cases: list[dict]) -> list[tuple[str, float, float]]:
    """Each case {id, name, chunks, order, shape, dtype}: the template's fused operator launched twice
    with new inputs (as `syncopy run` does), each launch's error against `meaning`."""
    import torch

    from syncopy import templates

    out = []
    for case in cases:
        t = templates.get(case["name"])
        dtype = {"fp32": torch.float32, "fp16": torch.float16}[case["dtype"]]
        fused = t.fused(chunks_per_rank=case["chunks"], order=case["order"], poison_receive=True)
        for it in range(2):
            inp = t.module.inputs(rank, world, case["shape"] or t.module.DEFAULT_SHAPE, dtype, seed=it)
            got = t.module.launch(fused, **inp).float()
            want = meaning(case["name"], rank, world, inp)
            diff = torch.nan_to_num((got - want).abs(), nan=float("inf"))
            err = float(diff.max()) / max(1.0, float(want.abs().max())) if got.shape == want.shape else float("inf")
            out.append((f"{case['id']} launch {it + 1}", err, TOL[case["dtype"]]))
    return out
