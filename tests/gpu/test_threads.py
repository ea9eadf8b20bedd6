"""The thread world on a GPU: W ranks in one process on one device, their kernels, pushes, sends and
reductions on their own streams at once. Every template at worlds 2 and 4, launch after launch with
new inputs; warm launches that never sync the host; launches that overlap one another (join=False);
a withheld chunk raised at synchronize(). Skipped cleanly without CUDA."""
import os

import pytest
import torch
import triton

from tests.unit.test_threads_cpu import reference, run_template
from tests.oracles import worst

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs a CUDA device (and TRITON_INTERPRET unset)"),
]

META = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)


def _world(name: str, world: int, **options):
    from syncopy import templates
    from syncopy.runtime.worlds.threads import ThreadWorld

    return ThreadWorld(templates.get(name).fused(timeout_s=options.pop("timeout_s", 20.0), **options), world)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", ["a2a_gemm", "ag_attention", "ag_gemm", "ag_gemm_persistent", "ag_rmsnorm", "gemm_ar", "gemm_rs",
                                  "tp_mlp"])
def test_every_template_on_the_thread_world(name, world):
    from syncopy import templates

    tw = _world(name, world, poison_receive=True)
    tol = templates.get(name).module.TOLERANCE[torch.float16]
    for seed in range(3):
        assert run_template(tw, name, seed, dtype=torch.float16, device="cuda") < tol, f"{name} world {world} launch {seed}"


def _ag_calls(world, rows, n, k, seed, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    shards = [torch.randn(rows, k, generator=g).to(dtype).cuda() for _ in range(world)]
    b = torch.randn(k, n, generator=g).to(dtype).cuda()
    m = rows * world
    cs = [torch.full((m, n), float("nan"), dtype=dtype, device="cuda") for _ in range(world)]
    args = [(a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)) for a, c in zip(shards, cs)]
    grid = (triton.cdiv(m, META["BLOCK_M"]) * triton.cdiv(n, META["BLOCK_N"]),)
    return grid, args, torch.cat(shards).float() @ b.float(), cs


def _err(c, ref) -> float:
    return float(torch.nan_to_num((c.float() - ref).abs(), nan=float("inf")).max()) / max(1.0, float(ref.abs().max()))


def test_warm_launches_never_sync_the_host_and_overlapping_launches_stay_correct():
    # After a first (probing) launch, launches enqueue and return; with join=False a launch's ranks
    # start while the last launch's still run, held apart by the device-side handshakes only.
    import syncopy
    from syncopy.runtime.worlds.threads import ThreadWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    world = 4
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=3), timeout_s=20.0)(ag_gemm_kernel)
    tw = ThreadWorld(fk, world)
    grid, args, ref, cs = _ag_calls(world, 1000, 256, 128, 0)
    tw.launch(grid, args, dict(META), sync=True)
    assert worst(_err(c, ref) for c in cs) < 2e-2
    cases = [_ag_calls(world, 1000, 256, 128, seed) for seed in range(1, 7)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for grid, args, _, _ in cases:
            tw.launch(grid, args, dict(META), join=False)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    tw.synchronize()
    for seed, (_, _, ref, cs) in enumerate(cases, start=1):
        assert worst(_err(c, ref) for c in cs) < 2e-2, f"launch {seed}"


@pytest.mark.parametrize("name,shape,options", [("gemm_rs", (1024, 256, 128), dict(order="local_first")),
                                                 ("tp_mlp", (256, 128, 256), {})])
def test_producer_and_pipeline_warm_launches_never_sync_the_host(name, shape, options):
    # tp_mlp: two operators linked per rank (runtime/worlds/thread_pipeline.py): the links' words, both
    # operators and the links' error words, enqueued.
    from syncopy import templates

    world = 4
    tw = _world(name, world, chunks_per_rank=2, **options)
    mod = templates.get(name).module
    inputs = [[{k: v.cuda() for k, v in mod.inputs(r, world, shape, torch.float16, seed=s).items()} for r in range(world)] for s in range(4)]
    tw.run(lambda fused, group, r: mod.launch(fused, **inputs[0][r], group=group))
    tw.synchronize()
    outs = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        for s in range(1, 4):
            outs.append(tw.run(lambda fused, group, r: mod.launch(fused, **inputs[s][r], group=group)))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    tw.synchronize()
    for s, got in enumerate(outs, start=1):
        refs = reference(name, [{k: v.cpu() for k, v in i.items()} for i in inputs[s]], world)
        for r, (out, ref) in enumerate(zip(got, refs)):
            assert _err(out.cpu(), ref) < mod.TOLERANCE[torch.float16], f"launch {s} rank {r}"


def test_withheld_chunk_raises_at_synchronize_naming_rank_chunk_and_epoch():
    import syncopy
    from syncopy.errors import SyncopyTimeout
    from syncopy.runtime.worlds.threads import ThreadWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2), timeout_s=1.0)(ag_gemm_kernel)
    tw = ThreadWorld(fk, 2)
    grid, args, ref, cs = _ag_calls(2, 256, 128, 64, 0)
    tw.launch(grid, args, dict(META), sync=True)
    assert worst(_err(c, ref) for c in cs) < 2e-2
    grid, args, _, _ = _ag_calls(2, 256, 128, 64, 1)
    tw.launch(grid, args, dict(META), withhold=frozenset({3}))  # rank 1's second chunk never reaches rank 0
    with pytest.raises(SyncopyTimeout) as e:
        tw.synchronize()
    assert (e.value.rank, e.value.chunk, e.value.epoch) == (0, (1, 1), 2)


def test_the_watchdog_says_a_withheld_chunk_nobody_raised(capfd):
    # The launch returns at once; its failure is found by the watchdog thread from the ring's event
    # (cuEventQuery from another thread) and said on stderr, and still raises at synchronize().
    import time

    import syncopy
    from syncopy.errors import SyncopyTimeout
    from syncopy.runtime.streams import watchdog
    from syncopy.runtime.worlds.threads import ThreadWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2), timeout_s=1.0)(ag_gemm_kernel)
    tw = ThreadWorld(fk, 2)
    grid, args, _, _ = _ag_calls(2, 256, 128, 64, 0)
    tw.launch(grid, args, dict(META), sync=True)
    watchdog.configure(mode="warn", interval_s=0.05)
    try:
        grid, args, _, _ = _ag_calls(2, 256, 128, 64, 1)
        tw.launch(grid, args, dict(META), withhold=frozenset({3}))
        deadline, err = time.monotonic() + 15, ""
        while "syncopy watchdog" not in err and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capfd.readouterr().err
        assert "rank 0 waited 1s for chunk 1 of rank 1 (epoch 2)" in err
        with pytest.raises(SyncopyTimeout):
            tw.synchronize()
    finally:
        watchdog._mode = watchdog._interval_s = None


@pytest.mark.parametrize("pushes", ["in-kernel", "before-kernel"])
def test_a_grid_that_fills_the_gpu_in_both_push_modes(pushes):
    # 4 ranks x 1024 tiles of 64x64 (each rank's kernel alone can hold every SM while it waits): in-kernel
    # pushes ran correctly here on an H100, where 4 x 4096 tiles of 128x128 hung (see threads.py).
    import syncopy
    from syncopy.runtime.worlds.threads import ThreadWorld, copies_run_beside_full_sms
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    beside = copies_run_beside_full_sms(torch.cuda.current_device())
    print(f"device-to-device copies run beside a kernel that holds every SM: {beside}")
    if pushes == "in-kernel" and not beside:
        pytest.skip("this device does not run copies beside a kernel with waiting programs on every SM")
    fk = syncopy.overlap(dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=4), timeout_s=5.0)(ag_gemm_kernel)
    tw = ThreadWorld(fk, 4, pushes=pushes)
    for seed in range(2):
        grid, args, ref, cs = _ag_calls(4, 1024, 1024, 256, seed)
        tw.launch(grid, args, dict(META), sync=True)
        assert worst(_err(c, ref) for c in cs) < 2e-2, f"launch {seed}"
