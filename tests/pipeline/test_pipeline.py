"""syncopy.pipeline: dependencies inferred from the tensors launches share (unit), and the tp_mlp
template on CPU worlds: correct against torch launch after launch (fresh data, NaN-poisoned receive
buffers, the slow reordering link of tests/world/harness.py, checked mode), nothing allocated after
the first launch, the reader's tiles held by the device-side link, one trace of both operators."""
from __future__ import annotations

import json

import pytest
import torch

from syncopy import templates
from syncopy.errors import LaunchError
from syncopy import explain
from syncopy.runtime.pipeline.edges import Edge, Launch, infer_edges
from tests.pipeline import workers
from tests.world.harness import spawn
from tests.oracles import worst


def _mlp_launches(world=2, rows=8, n=16, f=24):
    op = templates.get("tp_mlp").fused()
    x, w1, w2 = torch.zeros(rows, n), torch.zeros(n, f), torch.zeros(f, n)
    h, y = torch.zeros(rows * world, f), torch.zeros(rows, n)
    up = Launch(op.up, (1,), (), {}, None, {"A": x, "B": w1, "C": h, "M": rows * world})
    down = Launch(op.down, (1,), (), {}, None, {"A": h, "B": w2, "C": y, "M": rows * world})
    return op, up, down


def test_noop_launches_that_share_no_tensor_are_not_linked():
    op, up, down = _mlp_launches()
    down.bound["A"] = down.bound["A"].clone()
    assert infer_edges([up, down]) == []


def test_the_tensor_one_launch_writes_and_the_next_reads_is_the_edge():
    _, up, down = _mlp_launches()
    assert infer_edges([up, down]) == [Edge(0, "C", 1, "A")]


def test_a_view_of_the_shared_tensor_is_not_the_same_tensor():
    _, up, down = _mlp_launches()
    down.bound["A"] = up.bound["C"][:4]
    assert infer_edges([up, down]) == []


def test_a_shared_communicated_tensor_is_refused_in_one_line():
    op, up, down = _mlp_launches()
    down.bound["C"] = up.bound["A"]  # the down projection's output is the up projection's gathered input
    with pytest.raises(LaunchError) as err:
        infer_edges([up, down])
    assert str(err.value) == ("launch 1 of the pipeline (mlp_up_kernel) communicates 'A', which launch 2 also takes; a pipeline "
                              "links tensors that stay on their rank: pass a separate tensor to one of them, or launch them "
                              "outside the pipeline")


@pytest.mark.parametrize("world, shape, chunks, dtype, launches", [
    pytest.param(2, (20, 32, 48), 2, torch.float32, 3, id="w2-ragged"),
    pytest.param(3, (10, 16, 40), 3, torch.float16, 2, id="w3-fp16"),
])
def test_tp_mlp_matches_torch_and_allocates_nothing_after_its_first_launch(world, shape, chunks, dtype, launches, tmp_path):
    trace = tmp_path / "mlp.json" if world == 2 else None
    results = spawn(workers.tp_mlp, world, shape, launches, chunks, dtype, str(trace) if trace else None)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    for r in results:
        assert r["err"] < tolerance
        assert r["plans"] == 1 and r["edges"] == [(0, "C", 1, "A")] and r["epochs"] == [launches]
        assert all(held == r["held"][0] for held in r["held"]), "a launch after the first allocated a buffer"
        # One instruction graph per plan, built once, and what `syncopy explain` prints for that rank.
        assert r["same_graph"] and r["graph"] == explain.for_template("tp_mlp", world, r["rank"], shape, chunks).text()
    if trace:
        _check_trace(json.loads(trace.read_text()), world)


def _check_trace(doc: dict, world: int) -> None:
    """Both operators' kernels on every rank, each on lanes of its own; the first launch in order (it
    compiles, probes and meets the peers), the later ones side by side: the down projection on a side
    thread, its tiles starting while the up projection's still run (runtime/pipeline/interpreter_threads.py);
    every chunk landing once per launch."""
    from syncopy.runtime.trace.chrome_trace import CHUNKS_IN, lane_of

    events = doc["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert lanes == {f"{k} {lane}" for k in ("mlp_up_kernel", "mlp_down_kernel") for lane in ("kernel", "tiles", "chunks in", "chunks out")}
    early = 0  # the down projection's tiles that started before the up projection's last tile, launches 2 and 3
    for rank in range(world):
        mine = [e for e in events if e.get("pid") == rank and e.get("ph") != "M"]
        for epoch in (1, 2, 3):
            (up,) = [e for e in mine if e["cat"] == "kernel" and e["args"]["epoch"] == epoch and e["args"]["kernel"] == "mlp_up_kernel"]
            (down,) = [e for e in mine if e["cat"] == "kernel" and e["args"]["epoch"] == epoch and e["args"]["kernel"] == "mlp_down_kernel"]
            assert (up["tid"], down["tid"]) == (0, 4)
            if epoch == 1:
                assert down["ts"] >= up["ts"] + up["dur"]
                continue
            assert down["ts"] < up["ts"] + up["dur"], (epoch, up, down)
            tiles = {k: [e["ts"] for e in mine if e["cat"] == "tile" and e["args"]["epoch"] == epoch and e["args"]["kernel"] == k]
                     for k in ("mlp_up_kernel", "mlp_down_kernel")}
            early += sum(t < max(tiles["mlp_up_kernel"]) for t in tiles["mlp_down_kernel"])
        landings = [(e["args"]["kernel"], e["args"]["chunk"], e["args"]["epoch"]) for e in mine
                    if e["cat"] == "chunk" and lane_of(e) == CHUNKS_IN]
        assert len(landings) == len(set(landings)) and {k for k, _, _ in landings} == {"mlp_up_kernel", "mlp_down_kernel"}
    assert early > 0


def test_the_readers_tiles_wait_on_the_device_for_rows_the_writer_announces():
    (r,) = spawn(workers.starved_reader, 1)
    n = r["chunks"]
    assert r["after_one"] == {"flags": [1] * n, "counters": r["after_one"]["targets"], "targets": r["after_one"]["targets"]}
    assert r["error"].startswith("rank 0 waited 1s for chunk 0 of rank 0 (epoch 2) and it never arrived; it is rows 0..9 of "
                                 "'A', which mlp_down_kernel waits for and mlp_up_kernel (launch 1 of the pipeline) writes")
    assert r["new_link"] and r["after_err"] < 1e-4


def test_varying_token_counts_share_buffers_made_once_at_max_rows():
    for r in spawn(workers.varying_tokens, 2, [12, 5, 12], 12):
        assert worst(r["errs"]) < 1e-4
        assert all(s == r["storages"][0] for s in r["storages"]), "a shape up to max_rows got buffers of its own"
        assert r["grown"] == [1, 1, 1]  # gathered X, the partial of Y, H: one allocation each, at max_rows


@pytest.fixture(scope="module")
def linked_world2():
    return spawn(workers.linked_checks, 2)


def test_a_shape_that_comes_back_runs_on_its_own_link(linked_world2):
    # Soak regression (tp_mlp, world 4, seed 1, launch 127): each plan's links were given to the shared
    # linked operators when the plan was made, so a plan reused after another shape's plan was made ran
    # its kernels on that other shape's link. The writer's counts there went past its targets, and the
    # next launch of that shape never raised its flags: the reader starved (here at launch 4, chunk 0).
    for r in linked_world2:
        r = r["changing"]
        assert r["errors"] == [] and len(r["errs"]) == 4 and worst(r["errs"]) < 1e-4 and r["plans"] == 2


def test_a_compiled_module_calls_the_pipeline_as_one_custom_operator(linked_world2):
    for r in linked_world2:
        r = r["compiled"]
        assert worst(r["errs"]) < 1e-4 and r["fake_shape"] == r["shape"] == (8, 16)


def test_the_pipeline_custom_operator_is_differentiable_with_both_backward_gemms_fused(linked_world2):
    for r in linked_world2:
        assert set(r["autograd"]) == {"y", "dx", "dw1", "dw2"} and worst(r["autograd"].values()) < 1e-4, r["autograd"]


def test_a_warm_launch_reads_no_link_word_from_the_device(linked_world2):
    # Launches 2 and 3: the links' epoch, bound, counters and targets go by one stream operation and
    # their error words come back through the pinned ring; a torch read or write of them would count.
    for r in linked_world2:
        r = r["warm"]
        assert r["touched"] == [] and worst(r["errs"]) < 1e-4 and r["epochs"] == [3], r


def test_a_starved_link_is_named_even_when_the_readers_transfers_give_up_first(linked_world2):
    for r in linked_world2:
        error = r["starved"]["error"]
        assert error.startswith(f"rank {r['rank']} waited 1s for chunk "), error
        assert "of 'A', which mlp_down_kernel waits for and mlp_up_kernel (launch 1 of the pipeline) writes" in error
