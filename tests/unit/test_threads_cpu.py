"""The thread world on CPU tensors under the Triton interpreter: W ranks in one process, their pushes
(or sends) on worker-thread streams, each rank's kernel waiting for the peers' chunks while they land.
Every template, launch after launch with new inputs, against torch; a paced link whose chunks land
while the kernels run; a withheld chunk; several operators interleaved. (On a GPU,
tests/gpu/test_threads.py runs the same class with streams and the copy engine.)"""
from __future__ import annotations

import pytest
import torch
import triton

import syncopy
from syncopy import templates
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.worlds.threads import RankGroup, ThreadWorld
from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

META = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)


def reference(name: str, inputs: list[dict], world: int) -> list[torch.Tensor]:
    """Each rank's expected output, from the ranks' inputs with torch alone."""
    if name in ("ag_gemm", "ag_gemm_persistent"):
        return [torch.cat([i["a"] for i in inputs]).float() @ inputs[0]["b"].float()] * world
    if name == "ag_rmsnorm":
        f = torch.cat([i["x"] for i in inputs]).float()
        return [f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6) * inputs[0]["w"].float()] * world
    if name in ("gemm_rs", "gemm_ar"):
        total = sum(i["a"].float() @ i["b"].float() for i in inputs)
        if name == "gemm_ar":
            return [total] * world
        rows = total.shape[0] // world
        return [total[r * rows:(r + 1) * rows] for r in range(world)]
    if name == "a2a_gemm":
        experts = templates.get(name).module.EXPERTS
        t = inputs[0]["x"].shape[0] // world
        outs = []
        for r in range(world):
            received = torch.cat([inputs[s]["x"][r * t:(r + 1) * t] for s in range(world)]).float()
            expert = (torch.arange(received.shape[0]) % t) // (t // experts)
            out = torch.empty(received.shape[0], inputs[r]["w"].shape[2])
            for e in range(experts):
                out[expert == e] = received[expert == e] @ inputs[r]["w"][e].float()
            outs.append(out)
        return outs
    if name == "ag_attention":  # softmax(q k^T / sqrt(d)) v over every rank's keys; causal: keys up to the query's global row
        keys, values = (torch.cat([i[t] for i in inputs]).float() for t in ("k", "v"))
        outs = []
        for r, i in enumerate(inputs):
            q = i["q"].float()
            m, d = q.shape[0], q.shape[2]
            scores = torch.einsum("mhd,nhd->hmn", q, keys) / d ** 0.5
            if i["causal"]:
                seen = torch.arange(keys.shape[0])[None, :] <= r * m + torch.arange(m)[:, None]
                scores = scores.masked_fill(~seen, float("-inf"))
            outs.append(torch.einsum("hmn,nhd->mhd", scores.softmax(-1), values))
        return outs
    if name == "tp_mlp":  # rows r of the sum over ranks of gelu(all_gather(x) @ w1_r) @ w2_r, H stored in x's dtype
        xs = torch.cat([i["x"] for i in inputs]).float()
        total = sum(torch.nn.functional.gelu(xs @ i["w1"].float(), approximate="tanh").to(i["x"].dtype).float() @ i["w2"].float()
                    for i in inputs)
        rows = inputs[0]["x"].shape[0]
        return [total[r * rows:(r + 1) * rows] for r in range(world)]
    raise AssertionError(f"no reference for template {name}")


#: Shapes small enough for the interpreter (rows per rank not a multiple of the tile where the template allows).
CPU_SHAPES = {"ag_rmsnorm": (12, 96, 0), "ag_gemm": (40, 32, 32), "ag_gemm_persistent": (40, 32, 32), "gemm_rs": (96, 32, 32),
              "gemm_ar": (90, 32, 32)}


def run_template(tw: ThreadWorld, name: str, seed: int, dtype=torch.float32, device="cpu", shape=None) -> float:
    """One launch of template `name` on every rank of `tw` with fresh inputs; the worst relative error."""
    mod = templates.get(name).module
    shape = shape or CPU_SHAPES.get(name, mod.DEFAULT_SHAPE)
    inputs = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in mod.inputs(r, tw.world, shape, dtype, seed=seed).items()}
              for r in range(tw.world)]
    outs = tw.run(lambda fused, group, r: mod.launch(fused, **inputs[r], group=group))
    tw.synchronize()
    refs = reference(name, [{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in i.items()} for i in inputs], tw.world)
    worst = 0.0
    for out, ref in zip(outs, refs):
        err = (out.float().cpu() - ref).abs().max().item() / max(1.0, ref.abs().max().item())
        worst = max(worst, err if err == err else float("inf"))
    return worst


# ag_attention lists K and V (`tensor: [K, V]`): each chunk of both lands before its flag. tp_mlp is
# two operators linked per rank (runtime/worlds/thread_pipeline.py): each has a thread world of its own.
@pytest.mark.parametrize("name", sorted(templates.available()))
def test_every_template_on_a_thread_world_of_three_launch_after_launch(name):
    tw = ThreadWorld(templates.get(name).fused(timeout_s=30.0, poison_receive=True), 3, device="cpu")
    for seed in range(2):
        assert run_template(tw, name, seed) < 1e-4, f"{name} launch {seed}"
    worlds = [tw] if tw.pipeline is None else list(tw.pipeline.worlds.values())
    assert len(worlds) == (2 if name == "tp_mlp" else 1)
    for w in worlds:
        assert w.epochs == {next(iter(w.worlds)): 2}


def test_the_loopback_world_refuses_several_listed_tensors_in_one_line():
    from syncopy.runtime.worlds.loopback import LoopbackWorld

    with pytest.raises(LaunchError) as err:
        LoopbackWorld(templates.get("ag_attention").fused(), 3, device="cpu")
    assert str(err.value) == ("several communicated tensors (K, V) move on the gloo backend and the thread world only so far, not a "
                              "loopback world; list one tensor, or run on CPU ranks (gloo)")


def test_listed_tensors_of_different_shapes_on_two_ranks_are_one_line():
    tw = ThreadWorld(templates.get("ag_attention").fused(timeout_s=30.0), 2, device="cpu")
    mod = templates.get("ag_attention").module
    inputs = [mod.inputs(r, 2, (16, 2, 16), torch.float32) for r in range(2)]
    inputs[1]["v"] = inputs[1]["v"][:, :1].contiguous()  # one head where rank 0 has two
    with pytest.raises(LaunchError) as err:
        tw.run(lambda fused, group, r: mod.launch(fused, **inputs[r], group=group))
    assert str(err.value) == ("rank 1 passed the listed tensors V with shapes and dtypes (((16, 1, 16), torch.float32),) but "
                              "rank 0 (((16, 2, 16), torch.float32),); every rank's shards must match"), str(err.value)


def _ag(chunks=2, timeout_s=30.0, order="ring"):
    return syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=chunks, order=order), timeout_s=timeout_s,
                           poison_receive=True)(ag_gemm_kernel)


def _ag_args(world: int, rows: int, n: int, k: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    shards = [torch.randn(rows, k, generator=g) for _ in range(world)]
    b = torch.randn(k, n, generator=g)
    m = rows * world
    cs = [torch.full((m, n), float("nan")) for _ in range(world)]
    args = [(a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)) for a, c in zip(shards, cs)]
    grid = (triton.cdiv(m, META["BLOCK_M"]) * triton.cdiv(n, META["BLOCK_N"]),)
    return grid, args, torch.cat(shards) @ b, cs


def test_paced_chunks_land_while_the_kernel_runs():
    # The first rank's kernel starts before its last chunk lands (tiles run while chunks are in
    # flight), and the NaN-poisoned buffers prove that no tile of any rank read a row before its
    # chunk. (The interpreter runs the ranks' kernels one after another on the calling thread, so
    # the later ranks' chunks have mostly landed when theirs start; on a GPU they run at once.)
    world = 3
    tw = ThreadWorld(_ag(), world, device="cpu")
    for seed in range(2):
        grid, args, ref, cs = _ag_args(world, 32, 16, 16, seed)
        tw.launch(grid, args, dict(META), delay_s=0.03, timeline=True, sync=True)
        for r, c in enumerate(cs):
            assert torch.allclose(c, ref, atol=1e-4), f"rank {r}"
        times = tw.timeline_ms()
        for r, t in enumerate(times):
            landed = [v for name, v in t.items() if isinstance(name, int)]
            assert len(landed) == (world - 1) * 2, f"rank {r}: {t}"
        first = times[0]
        assert max(v for name, v in first.items() if isinstance(name, int)) > first["kernel"], f"every chunk landed before the kernel started: {first}"


def test_gemm_rs_sends_chunks_while_the_kernel_still_runs():
    # Rank 0's kernel runs first under the interpreter: its chunks for ranks 1 and 2 leave as their
    # flags rise, before the kernel ends (48 row tiles of 16 rows, local_first: the peers' chunks are
    # finished first and rank 0's own 16 tiles still compute, long enough for a send thread to wake up
    # on a loaded machine: with 8 own tiles a send once left 0.4 ms after the kernel's end on a CI
    # machine running other tests); every rank's rows are the sum over ranks.
    name, world, m = "gemm_rs", 3, 768
    tw = ThreadWorld(templates.get(name).fused(timeout_s=30.0, chunks_per_rank=2, order="local_first"), world, device="cpu")
    mod = templates.get(name).module
    meta = dict(mod.META, BLOCK_M=16)
    for seed in (1, 2):
        inputs = [mod.inputs(r, world, (m, 32, 32), torch.float32, seed=seed) for r in range(world)]
        outs = [torch.full((m // world, 32), float("nan")) for _ in range(world)]
        calls = []
        for r in range(world):
            a, b = inputs[r]["a"], inputs[r]["b"]
            (rows, k), n = a.shape, b.shape[1]
            calls.append((a, b, outs[r], rows, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), n, 1))
        grid = (triton.cdiv(m, 16), triton.cdiv(32, meta["BLOCK_N"]))
        tw.launch(grid, calls, meta, timeline=True, sync=True)
        t = tw.timeline_ms()[0]
        sent = {key[1]: v for key, v in t.items() if isinstance(key, tuple)}
        assert len(sent) == 4 and min(sent.values()) < t["end"], t
        for out, ref in zip(outs, reference(name, inputs, world)):
            assert torch.allclose(out, ref, atol=1e-4)


def test_withheld_chunk_is_a_timeout_naming_rank_chunk_and_epoch():
    world = 2
    tw = ThreadWorld(_ag(timeout_s=1.0), world, device="cpu")
    grid, args, ref, cs = _ag_args(world, 16, 16, 16, 0)
    tw.launch(grid, args, dict(META), sync=True)
    assert torch.allclose(cs[1], ref, atol=1e-4)
    grid, args, ref, cs = _ag_args(world, 16, 16, 16, 1)
    tw.launch(grid, args, dict(META), withhold=frozenset({1}))  # rank 0's second chunk never reaches rank 1
    with pytest.raises(SyncopyTimeout) as e:
        tw.synchronize()
    assert (e.value.rank, e.value.chunk, e.value.epoch) == (1, (0, 1), 2)


def test_two_operators_interleaved_with_shapes_that_change():
    # An AG-GEMM and a GEMM-RS thread world alternate; the AG one sees two shard shapes.
    world = 2
    ag = ThreadWorld(_ag(), world, device="cpu")
    rs_name = "gemm_rs"
    rs = ThreadWorld(templates.get(rs_name).fused(timeout_s=30.0), world, device="cpu")
    for seed, rows in enumerate((16, 24, 16)):
        grid, args, ref, cs = _ag_args(world, rows, 16, 16, seed)
        ag.launch(grid, args, dict(META))
        assert run_template(rs, rs_name, seed) < 1e-4
        ag.synchronize()
        for c in cs:
            assert torch.allclose(c, ref, atol=1e-4)
    assert sorted(key[0] for key in ag.worlds) == [(16, 16), (24, 16)]
    assert ag.epochs[((16, 16), torch.float32)] == 2


def test_bad_launches_are_one_line_errors():
    tw = ThreadWorld(_ag(), 2, device="cpu")
    grid, args, _, _ = _ag_args(2, 16, 16, 16, 0)
    with pytest.raises(LaunchError, match="has 2 ranks but got arguments for 1"):
        tw.launch(grid, args[:1], dict(META))
    _, other, _, _ = _ag_args(2, 24, 16, 16, 0)
    with pytest.raises(LaunchError, match=r"rank 1 passed 'A' as \[24, 16\]"):
        tw.launch(grid, [args[0], other[1]], dict(META))
    tw.engine.device_type = "cuda"  # as on a GPU
    with pytest.raises(LaunchError, match="a GPU stream cannot pause"):
        tw.launch(grid, args, dict(META), delay_s=0.1)


def test_rank_group_answers_what_templates_ask():
    assert templates.world_size(RankGroup(2, 4)) == 4
    g = RankGroup(1, 3)
    assert (g.rank(), g.size()) == (1, 3)


def test_pushes_before_the_kernel_land_before_it_starts_and_stay_correct():
    # The mode a device whose copies cannot run beside a full kernel gets: each rank's kernel
    # starts once the pushes into it are done.
    world = 3
    tw = ThreadWorld(_ag(), world, device="cpu", pushes="before-kernel")
    grid, args, ref, cs = _ag_args(world, 32, 16, 16, 0)
    tw.launch(grid, args, dict(META), delay_s=0.01, timeline=True, sync=True)
    for c in cs:
        assert torch.allclose(c, ref, atol=1e-4)
    for r, t in enumerate(tw.timeline_ms()):
        landed = [v for name, v in t.items() if isinstance(name, int)]
        assert len(landed) == (world - 1) * 2 and max(landed) <= t["kernel"], f"rank {r}: {t}"
    with pytest.raises(LaunchError, match="pushes='sometimes': expected one of in-kernel, before-kernel"):
        ThreadWorld(_ag(), world, device="cpu", pushes="sometimes")
