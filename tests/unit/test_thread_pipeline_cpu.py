"""A pipeline template (tp_mlp) on the thread world, CPU tensors under the Triton interpreter: each
rank's operators linked by links of its own (runtime/worlds/thread_pipeline.py), against torch, launch after
launch with new inputs and shapes that change and come back; a reader whose writer never ran is a
SyncopyTimeout naming rank, rows and writer. (tests/gpu/test_threads.py runs it on a GPU.)"""
from __future__ import annotations

import pytest
import torch

from syncopy import device as dev
from syncopy import templates
from syncopy.errors import LaunchError, SyncopyTimeout
from syncopy.runtime.transport.link import Faults
from syncopy.runtime.worlds.threads import ThreadWorld
from tests.unit.test_threads_cpu import reference

MOD = templates.get("tp_mlp").module


def _launch(tw: ThreadWorld, shape, seed: int, delay_s: float = 0.01) -> float:
    """One launch with new inputs on a paced link (each chunk `delay_s` late: tiles wait for it); the worst error."""
    inputs = [MOD.inputs(r, tw.world, shape, torch.float32, seed=seed) for r in range(tw.world)]
    outs = tw.run(lambda op, group, r: MOD.launch(op, **inputs[r], group=group), delay_s=delay_s)
    tw.synchronize()
    return max((out - ref).abs().max().item() for out, ref in zip(outs, reference("tp_mlp", inputs, tw.world)))


def _held(tw: ThreadWorld) -> list[int]:
    """The storage of every link, activation and operator buffer the thread pipeline holds."""
    tp = tw.pipeline
    ptrs = [h.data_ptr() for view in tp.views for h in view._hidden.values()]
    for plan in tp.plans.values():
        ptrs += [t.data_ptr() for links in plan.links for link in links.values() for t in (link.ctx, link.signals)]
    for w in tp.worlds.values():
        ptrs += [t.data_ptr() for ranks in w.worlds.values() for rk in ranks for t in (rk.ctx.buffer, rk.ctx.signals, rk.ctx.ctx)]
    return sorted(ptrs)


def test_each_rank_links_its_own_activations_and_every_launch_raises_them_to_its_epoch():
    world, chunks = 2, 2
    tw = ThreadWorld(templates.get("tp_mlp").fused(timeout_s=30.0, poison_receive=True, chunks_per_rank=chunks), world, device="cpu")
    for seed in range(2):
        assert _launch(tw, (20, 32, 48), seed) < 1e-4, f"launch {seed}"
        (plan,) = tw.pipeline.plans.values()
        (edge,) = plan.edges
        assert (edge.src, edge.src_arg, edge.dst, edge.dst_arg) == (0, "C", 1, "A")
        links = [plan.links[r][edge] for r in range(world)]
        assert links[0] is not links[1] and links[0].signals.data_ptr() != links[1].signals.data_ptr()
        n = links[0].chunks
        assert n == world * chunks
        for r, link in enumerate(links):
            words = link.signals.tolist()
            flags = words[dev.SIG_HEADER:dev.SIG_HEADER + n]
            counters, targets = words[dev.SIG_HEADER + n + 2:dev.SIG_HEADER + 2 * n + 2], words[dev.SIG_HEADER + 2 * n + 2:]
            # The up projection's tiles raised every chunk of this rank's H to this launch's epoch,
            # each chunk once all of the tiles that store into it had counted themselves.
            assert flags == [seed + 1] * n and counters == targets and min(targets) > 0, f"rank {r}: {words}"
    hidden = [next(iter(view._hidden.values())) for view in tw.pipeline.views]
    assert hidden[0].data_ptr() != hidden[1].data_ptr()  # ranks share a process, not their activations


def test_shapes_that_change_and_come_back_reuse_their_plan_and_allocate_nothing_new():
    world = 3
    tw = ThreadWorld(templates.get("tp_mlp").fused(timeout_s=30.0, poison_receive=True, chunks_per_rank=1), world, device="cpu")
    held = []
    for seed, rows in enumerate((12, 7, 12)):
        assert _launch(tw, (rows, 16, 32), seed) < 1e-4, f"launch {seed} ({rows} rows per rank)"
        held.append(_held(tw))
    assert len(tw.pipeline.plans) == 2
    assert held[2] == held[1]  # the first shape's plan, links, buffers and activations, reused
    tw.pipeline.max_plans = 1  # a bound on the structures kept: the least recently used goes
    assert _launch(tw, (5, 16, 32), 3) < 1e-4  # a new structure: the other two go
    assert [key[0][2][0] for key in tw.pipeline.plans] == [(5, 16)]  # x's shape, per rank


def test_a_reader_whose_writer_never_ran_names_rank_rows_and_writer():
    world = 2
    tw = ThreadWorld(templates.get("tp_mlp").fused(timeout_s=0.5, chunks_per_rank=1, poison_receive=True), world, device="cpu")
    assert _launch(tw, (8, 16, 32), 0) < 1e-4
    (plan,) = tw.pipeline.plans.values()
    up = tw.pipeline.worlds[id(plan.variants[0])]
    up.launch = lambda *args, **kwargs: None  # the up projection never runs: nothing raises H's chunks
    inputs = [MOD.inputs(r, world, (8, 16, 32), torch.float32, seed=1) for r in range(world)]
    with pytest.raises(SyncopyTimeout) as err:
        tw.run(lambda op, group, r: MOD.launch(op, **inputs[r], group=group))
    assert (err.value.rank, err.value.chunk, err.value.epoch) == (0, (0, 0), 2)
    assert "it is rows 0..7 of 'A', which mlp_down_kernel waits for and mlp_up_kernel (launch 1 of the pipeline) writes" in str(err.value)
    # What else that launch left (the down kernel's own timeouts, its sends that never left) went with it.
    tw.synchronize()


def test_ranks_that_launch_different_shapes_and_injected_faults_are_one_line_errors():
    tw = ThreadWorld(templates.get("tp_mlp").fused(timeout_s=5.0), 2, device="cpu")
    inputs = [MOD.inputs(r, 2, (8, 16, 32), torch.float32) for r in range(2)]
    inputs[1]["w1"] = inputs[1]["w1"][:, :16].contiguous()  # rank 1's FFN width differs
    with pytest.raises(LaunchError) as err:
        tw.run(lambda op, group, r: MOD.launch(op, **inputs[r], group=group))
    assert str(err.value).startswith("rank 1's pipeline launched mlp_up_kernel(")
    assert str(err.value).endswith("every rank launches the same operators on tensors of the same shapes")
    with pytest.raises(LaunchError, match="injected faults act on the gloo backend's transfers; the thread world moves chunks by stream copies"):
        ThreadWorld(templates.get("tp_mlp").fused(faults=Faults.of(drop=[(0, 0)])), 2, device="cpu")
    with pytest.raises(LaunchError, match=r"call run\(body\) with the template's launch"):
        tw.launch((1,), [(), ()])
