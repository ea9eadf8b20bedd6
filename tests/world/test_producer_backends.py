"""Producer patterns on the GPU backends, on CPU ranks (the backends' CPU forms; on GPUs these paths
need one rank per GPU: tests/gpu/test_backends.py, 2 GPUs).

all_reduce on p2p: the reduce-scatter half overlaps the kernel (each chunk leaves for its owner once
its flag rises) and the gather half runs on the device (each owner pushes its reduced rows into
every peer's buffer): no host sync or barrier per launch, every rank the same bits, equal to torch.
reduce_scatter on nccl: rounds triggered by the kernel's flags (runtime/transport/backends/nccl.py,
FlagRounds), the same (offset, chunk) sequence on every rank, along dim 0 and along dim 1."""
from __future__ import annotations

import re

import pytest

from tests.world.harness import spawn
from tests.world import producer_backend_workers as workers
from tests.world.workers import once
from tests.oracles import worst

WORLD = 3


@once
def _results() -> list[dict]:
    return spawn(workers.run_producers, WORLD, timeout_s=400)


@pytest.mark.world
def test_p2p_all_reduce_sends_while_the_kernel_runs_and_gathers_on_the_device():
    results = [r["p2p_all_reduce"] for r in _results()]
    for rank, r in enumerate(results):
        assert r["reducer"] == ["SendReduce"], r
        assert worst(r["worst"]) < 1e-3, f"rank {rank}: {r['worst']}"
        remote = [g for g in range(WORLD * 2) if g // 2 != rank]
        for launch, (sent, early) in enumerate(zip(r["sent"], r["sent_before_end"])):
            assert sent == remote, f"rank {rank} launch {launch}: {r}"
            assert early, f"rank {rank} launch {launch}: every chunk left after the kernel ended: {r}"
        assert r["host_waits_after_first"] == 0, f"rank {rank}: {r['host_waits_after_first']} host syncs/barriers after the first launch"
    assert len({tuple(r["same_bits"]) for r in results}) == 1, [r["same_bits"] for r in results]


@pytest.mark.world
def test_nccl_producers_run_rounds_behind_the_kernels_flags():
    results = [r["nccl"] for r in _results()]
    for rank, r in enumerate(results):
        rs, ar = r["gemm_rs"], r["gemm_ar"]
        assert rs["used"] == ar["used"] == ["FlagRounds"] * 3, (rs["used"], ar["used"])
        # The rounds wait for the flags beside the kernel (a worker thread on CPU ranks, the syncopy
        # stream on a GPU): chunks leave while later tiles still compute, launch after launch.
        assert all(rs["sent_before_end"]), (rank, rs["sent_before_end"])
        assert worst(rs["worst"]) < 1e-3 and worst(ar["worst"]) < 1e-3, f"rank {rank}: {rs['worst']} {ar['worst']}"
        # Per launch, one round per (peer offset, chunk): a send to rank+d and a receive from rank-d.
        want = [[("isend", (rank + d) % WORLD, 12), ("irecv", (rank - d) % WORLD, 12)] for d in range(1, WORLD) for _ in range(2)]
        assert [[op[:3] for op in r] for r in rs["posted"]] == want * 3, (rank, rs["posted"])
        # all_reduce of 22 rows (parts of 8, 8, 6; chunks of 4, 4 / 4, 4 / 4, 2): the same rounds, then
        # one round per offset with the reduced rows; rank 2's part is the short one.
        rows = [8, 8, 6]
        chunk = [[4, 4], [4, 4], [4, 2]]
        reduce_rounds = [[("isend", (rank + d) % WORLD, chunk[(rank + d) % WORLD][i]), ("irecv", (rank - d) % WORLD, chunk[rank][i])]
                         for d in range(1, WORLD) for i in range(2)]
        gather_rounds = [[("isend", (rank + d) % WORLD, rows[rank]), ("irecv", (rank - d) % WORLD, rows[(rank - d) % WORLD])]
                         for d in range(1, WORLD)]
        assert [[op[:3] for op in r] for r in ar["posted"]] == (reduce_rounds + gather_rounds) * 3, (rank, ar["posted"])
        # Along dim 1 (blocks of columns): the same rounds, each chunk 32 rows of 12 columns.
        cols = r["gemm_rs_columns"]
        assert cols["used"] == ["FlagRounds"] * 2 and worst(cols["worst"]) < 1e-3, (rank, cols)
        assert cols["shapes"] == [(32, 12)], (rank, cols)
    assert len({r["gemm_ar"]["same_bits"] for r in results}) == 1


@pytest.mark.world
def test_a_nccl_producer_whose_peer_is_late_past_the_bound_is_a_timeout():
    # Rank 2 starts launch 2 seven seconds late. The others hear of every launch before their rounds
    # start (runtime/launch/agreement.py): at their timeout they raise SyncopyTimeout naming rank 2 and
    # what it made, having sent nothing; their next launch is refused, the group's launches out of step.
    # Rank 2, when it comes, learns that they gave up on it.
    for rank, r in enumerate(_results()):
        late = r["nccl_late"]
        assert late[0]["type"] is None and late[0]["worst"] < 1e-3, (rank, late)
        if rank == WORLD - 1:
            assert late[1]["type"] == "LaunchError", (rank, late)
            assert re.match(r"^rank 2: launch \d+ on this group \(gemm_rs_kernel\): this rank came late: rank 0 gave up waiting "
                            r"for it after 0.5s; rank 1 gave up waiting for it after 0.5s; ", late[1]["str"]), late[1]
            continue
        assert late[1]["type"] == "SyncopyTimeout" and late[1]["epoch"] == 2, (rank, late)
        assert re.search(r"; launch \d+ on this group: rank\(s\) 2 did not make it within 0.5s \(rank 2 made \d+ launch", late[1]["str"]), late[1]
        assert late[2]["type"] == "LaunchError" and re.match(
            r"^rank \d: launch \d+ of this group never met every peer's; create a new process group", late[2]["str"]), late[2]
