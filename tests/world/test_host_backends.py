"""The GPU backends' protocols on CPU ranks, under the interpreter: everything but the device is the
GPU code path. p2p: shared memory stands in for CUDA IPC and copies are done at once (HostMemory);
handle exchange on the control group, the per-launch sync + barrier, pushes straight into each
peer's buffer in that peer's arrival order, a flag raised behind each chunk, own flags by local(),
pull-reduce for producer patterns, dropped chunks. nccl: gloo stands in for NCCL (HostStreams); the
same rounds on every rank, relays from the buffer, a flag after each round, the grid check,
collectives for producers. Results against the templates' torch references, several launches,
NaN-poisoned buffers."""
from __future__ import annotations

import pytest

from tests.world.harness import spawn
from tests.world import host_backend_workers as workers
from tests.world.workers import job, once, run_jobs
from tests.oracles import worst

WORLD = 3
CASES = [
    dict(backend="p2p", template="ag_gemm", chunks=2, order="ring", shape=(13, 16, 16)),
    dict(backend="p2p", template="ag_gemm", chunks=3, order="bidirectional_ring", shape=(7, 16, 16)),
    dict(backend="p2p", template="ag_gemm", chunks=1, order=[2, 1], shape=(8, 16, 16), launches=1),
    dict(backend="p2p", template="ag_gemm_persistent", chunks=2, order="local_first", shape=(9, 32, 32), launches=1),
    dict(backend="p2p", template="ag_gemm", chunks=2, order="ring", shape=(10, 16, 16), shared=True),
    dict(backend="p2p", template="a2a_gemm", chunks=1, order="local_first", shape=(96, 32, 32), launches=1),
    dict(backend="p2p", template="gemm_rs", chunks=2, order="ring", shape=(24, 16, 16), launches=3),
    dict(backend="p2p", template="gemm_ar", chunks=1, order="ring", shape=(10, 16, 16), launches=1),
    dict(backend="nccl", template="ag_gemm", chunks=2, order="ring", shape=(13, 16, 16)),
    dict(backend="nccl", template="ag_gemm", chunks=2, order="bidirectional_ring", shape=(7, 16, 16), launches=1),
    dict(backend="nccl", template="ag_gemm_persistent", chunks=1, order=[2, 1], shape=(9, 32, 32), launches=1),
    dict(backend="nccl", template="a2a_gemm", chunks=1, order="ring", shape=(96, 32, 32), launches=1),
    dict(backend="nccl", template="gemm_rs", chunks=2, order="ring", shape=(24, 16, 16), launches=1),
    dict(backend="nccl", template="gemm_ar", chunks=1, order="ring", shape=(10, 16, 16), launches=1),
]
HOST_CLASS = {"p2p": "HostP2P", "nccl": "HostNccl"}
CONSUMERS = {"ag_gemm", "ag_gemm_persistent", "a2a_gemm"}


DROP = (0, 1)


@once
def _world() -> list[dict]:
    """Every world-3 test of this file in one spawned world (spawning costs seconds), the dropped
    chunk last: its timeout breaks the group's transport."""
    jobs = {name: (f"{workers.__name__}:{fn}", args) for name, fn, args in [
        ("templates", "run_templates", (CASES,)), ("traced", "run_traced", ()),
        ("nccl big grid", "run_nccl_big_grid", ()), ("nccl async", "run_nccl_rounds_beside_the_kernel", ()),
        ("letting go", "run_evicted_contexts_let_go", ()),
        ("p2p drop", "run_drop", (DROP, 2.0))]}
    return spawn(run_jobs, WORLD, jobs, timeout_s=600)


def _templates() -> list[list[dict]]:
    return job(_world(), "templates")


def _traced() -> list[dict]:
    return job(_world(), "traced")


@pytest.mark.world
@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{c['backend']}-{c['template']}-{c['order']}-C{c['chunks']}{'-shared' if c.get('shared') else ''}" for c in CASES])
def test_backend_protocol_gives_the_reference_result(case):
    for rank, results in enumerate(_templates()):
        r = results[case]
        assert r["backend"] == HOST_CLASS[CASES[case]["backend"]], r
        assert r["epochs"] == [r.get("launches", 2)], r  # one context, one epoch per launch
        assert r["worst"] <= r["tolerance"], f"rank {rank}: {r}"
        # Ranks on one GPU (here: told so) deliver every chunk before the launch; others never wait for that.
        assert r["shared_device"] == bool(CASES[case].get("shared")), r
        # p2p's ranks share a host: its launch barriers go through shared memory, not gloo.
        assert r["handshake"] == ({"NodeBarrier"} if CASES[case]["backend"] == "p2p" else {"NoneType"}), r
        if CASES[case]["backend"] == "p2p" and CASES[case]["template"] in CONSUMERS | {"gemm_rs"} and r.get("launches", 2) > 1:
            # Warm consumer and reduce_scatter launches hand-shake on the device (ready and delivered
            # words in the peers' pads), no host sync or barrier; ranks sharing a GPU still meet on
            # the host every launch.
            assert (r["warm_host_handshakes"] == 0) != bool(CASES[case].get("shared")), r
        # Its premise (issue 26; tests/world/precondition_backends.py): what the kernel read came
        # through the protocol in each launch. One protocol start per launch; a consumer's remote
        # chunks were all poison with their flags down when it began, and flagged once the launch
        # returned; a producer's output was all poison when its reduction began.
        assert len(r["protocol"]) == r.get("launches", 2) and all(len(p) == 1 for p in r["protocol"]), r["protocol"]
        for launch, (p,) in enumerate(r["protocol"], start=1):
            where = f"rank {rank} launch {launch}: {p}"
            if CASES[case]["template"] in CONSUMERS:
                assert p["kind"] == "consumer" and p["remote"], where
                assert p["pending"] == p["remote"], f"remote chunks not poison with their flags down when the protocol began: {where}"
                assert p["landed"] == p["remote"], f"remote chunks never flagged: {where}"
            else:
                assert p["kind"] == "producer" and p["out_poisoned"], where


@pytest.mark.world
def test_an_evicted_context_lets_its_worker_threads_go():
    # Shapes beyond an operator's context budget evict its oldest context, and its backend's
    # worker threads end with it: nccl's rounds thread, p2p's send threads (they piled up, one
    # set per shape ever launched, each thread holding its stream). Launches stay right, and
    # release() leaves none; the operators of the rank's earlier jobs, dropped without
    # release(), left none either. (tests/unit/test_letting_go.py: close() itself.)
    for rank, r in enumerate(job(_world(), "letting go")):
        for backend, got in r.items():
            assert got["worst"] < 1e-3, (rank, backend, got)
            assert got["before"] == 0, (rank, backend, got)
            assert got["alive"] == [got["per_context"]] * 6, (rank, backend, got)
            assert got["after_release"] == 0, (rank, backend, got)


@pytest.mark.world
def test_p2p_dropped_chunk_is_a_timeout_on_the_ranks_that_need_it():
    drop = DROP
    results = job(_world(), "p2p drop")
    assert results[0]["type"] is None, results[0]
    for rank in (1, 2):  # direct pushes: every other rank waits on rank 0's chunk itself
        r = results[rank]
        assert r["type"] == "SyncopyTimeout", (rank, r)
        assert (r["rank"], tuple(r["chunk"]), r["epoch"]) == (rank, drop, 1), (rank, r)


@pytest.mark.world
def test_nccl_refuses_a_grid_that_could_hold_every_sm():
    for rank, r in enumerate(job(_world(), "nccl big grid")):
        assert r["type"] == "LaunchError", (rank, r)
        assert r["str"].startswith("kernel 'ag_gemm_kernel' launches 132 programs on a GPU with 132 SMs"), r["str"]


@pytest.mark.world
def test_p2p_refuses_a_mapping_that_does_not_reach_the_peers_memory():
    for rank, r in enumerate(spawn(workers.run_bad_mapping, 2, timeout_s=300)):
        assert r["type"] == "LaunchError", (rank, r)
        assert r["str"].startswith(f"rank {rank}: the CUDA IPC mapping of rank {1 - rank}'s signal pad reads 0x0 where rank "
                                   f"{1 - rank} wrote 0x"), r["str"]
        assert r["str"].endswith("; the mapping does not reach its memory, so pushes would be lost: use backend='nccl'"), r["str"]


@pytest.mark.world
def test_p2p_reduce_scatter_sends_chunks_while_the_kernel_runs():
    # Each chunk leaves for its owner once its flag rises (a send stream waits on the flag), while
    # later tiles still compute; the owner reduces behind the deliveries, launch after launch.
    for rank, r in enumerate(_traced()):
        r = r["gemm_rs"]
        assert r["reducer"] == ["SendReduce"], r
        assert r["worst"] < 1e-3, f"rank {rank}: {r}"
        remote = [g for g in range(WORLD * 2) if g // 2 != rank]
        for launch, (sent, early) in enumerate(zip(r["sent"], r["sent_before_end"])):
            assert sent == remote, f"rank {rank} launch {launch}: {r}"
            assert early, f"rank {rank} launch {launch}: every chunk left after the kernel ended: {r}"


@pytest.mark.world
def test_traces_on_the_gpu_backends_count_the_chunks_landed_when_each_tile_started():
    # p2p and nccl never count landings on the host (copy engines and peers raise the flags): a
    # traced kernel counts the flags of its launch that are up, so a trace's overlap is true there
    # too. Every tile started with at least the chunks it reads landed, on every launch.
    for rank, r in enumerate(_traced()):
        for backend, runs in r["ag_gemm"].items():
            for run in runs:
                assert run["worst"] < 1e-4, (rank, backend, run)
                assert run["tiles"], (rank, backend, run)
                for arrived, reads in run["tiles"]:
                    assert reads <= arrived <= run["total"], (rank, backend, run["epoch"], arrived, reads)



@pytest.mark.world
def test_nccl_rounds_run_beside_the_kernel_and_a_late_peer_is_a_timeout():
    # The rounds run on the syncopy stream (a worker thread standing in for the GPU stream), so on a
    # slow link tiles start while later chunks are still on the wire, launch after launch; the
    # kernel's error words are read through the deferred path (the error ring), as on a GPU.
    results = job(_world(), "nccl async")
    for rank, r in enumerate(results):
        assert r["threads"] == ["syncopy-nccl-rounds"], (rank, r["threads"])
        assert r["asynchronous"] == [True], (rank, r)
        for launch, run in enumerate(r["runs"]):
            assert run["worst"] < 1e-4, (rank, launch, run)
            assert run["landed"][0] < run["total"], f"rank {rank} launch {launch}: every tile waited for every chunk: {run}"
        # A peer 3 s late for launch 2 with a 1 s timeout: the others' kernels time out naming
        # this rank, a chunk of the late rank's (it sends its own first) and epoch 2; the context
        # then takes no more launches. The late rank finds every chunk waiting for it.
        late = r["late"]
        if rank == WORLD - 1:
            assert [x["type"] for x in late] == [None, None] and worst(x["worst"] for x in late) < 1e-4, late
        else:
            assert late[0]["type"] is None and late[0]["worst"] < 1e-4, late
            assert late[1]["type"] == "SyncopyTimeout", late
            assert late[1]["rank"] == rank and late[1]["epoch"] == 2, late
            assert late[1]["str"].startswith(f"rank {rank} waited 1s for chunk 0 of rank "), late
            assert late[2]["type"] == "LaunchError", late
            assert "broke in an earlier launch" in late[2]["str"], late
