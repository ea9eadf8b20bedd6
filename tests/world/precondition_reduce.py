"""The premise of tests/world/test_reduce.py's matrix, asserted (issue 26): a producer launch's result
tells an early announcement from a right one only because each chunk is taken (its rows read by the
transfer: the gloo backend clones a partial it sends, and reads its own partial of a chunk it
reduces) when its flag rises, as a copy engine reads them then. So per launch, for every chunk, the
rows taken are recorded at that moment (the transfer's `_wait_ready` returned: the flag is up) and
compared, once the kernel is done, with the kernel's final partial (the context's buffer, which
nothing but the kernel writes): a chunk taken before its last write shows rows the kernel changed
afterwards. As tests/world/test_producer_bounds.py does for its kernels, here on the templates of the
matrix (gemm_rs: reduce_scatter, gemm_ar: all_reduce)."""
from __future__ import annotations


def taken_rows():
    """Record what every ReduceTransfer of this rank takes from now on, until the returned `stop()`:
    (records, stop). A record per launch (in launch order): {"chunks": the launch's chunk count,
    "taken": chunks taken at least once, "stale": chunks whose rows at a take differ from the kernel's
    final rows}."""
    import torch

    from syncopy.runtime.transport.backends import gloo

    cls = gloo.ReduceTransfer
    real_start, real_wait, real_join = cls.start, cls._wait_ready, cls.join
    records: list[dict] = []

    def start(self):
        self.taken_by_test = []  # before its threads start: (chunk, rows at the take)
        return real_start(self)

    def wait_ready(self, chunk):
        real_wait(self, chunk)
        self.taken_by_test.append((chunk, self.ctx.chunk_view(chunk).clone()))

    def join(self):
        real_join(self)  # after the kernel: the buffer holds its final partial
        final = {g: self.ctx.chunk_view(g) for g in range(self.ctx.n_chunks)}
        same = lambda a, b: torch.equal(torch.nan_to_num(a.float(), nan=0.5), torch.nan_to_num(b.float(), nan=0.5))
        records.append({"chunks": self.ctx.n_chunks, "taken": sorted({g for g, _ in self.taken_by_test}),
                        "stale": sorted({g for g, rows in self.taken_by_test if not same(rows, final[g])})})

    cls.start, cls._wait_ready, cls.join = start, wait_ready, join

    def stop():
        cls.start, cls._wait_ready, cls.join = real_start, real_wait, real_join

    return records, stop


def run_producer_matrix(rank: int, world: int, cases: list[dict]) -> dict:
    """tests/world/workers.py's run_producer_matrix (two launches per case), with the rows each
    launch took: {"matrix": its result, "taken": a record of `taken_rows` per launch}. The patch is
    undone before returning (the shared world's next jobs find the backend as it was)."""
    from tests.world import workers

    records, stop = taken_rows()
    try:
        matrix = workers.run_producer_matrix(rank, world, cases)
    finally:
        stop()
    return {"matrix": matrix, "taken": records}
