"""Rank functions of the world fuzzers (run by tests/world/harness.py's `spawn`, one process per rank).

One spawned world of `max(case worlds)` ranks runs every case drawn for worlds 1 to 4: a case on
`world` ranks launches on the process group of ranks 0..world-1, the others skip it (cases come
sorted by world, largest first, so no rank waits for a group it is not in). A rank loops over the
cases: each builds its fused operator, launches it `LAUNCHES` times with new data and NaN-poisoned
receive buffers (on the harness's slow, jittery, reordering link), and reports its worst error
against the torch reference on its group; a case that raises is reported, not fatal.
"""
from __future__ import annotations

import traceback

from tests.world.workers import Problem
from tests import oracles

LAUNCHES = 2


class GroupProblem(Problem):
    """tests/world/workers.py's Problem, launched on a process group and checked on it."""

    def __init__(self, kernel: str, group, rows: int, seed: int):
        import torch.distributed as dist

        self.group = group
        super().__init__(kernel, dist.get_rank(group), dist.get_world_size(group), rows, "float32", seed)

    def launch(self, fn, **extra) -> None:
        super().launch(fn, group=self.group, **extra)

    def reference(self):
        """all_gather_into_tensor on the group, then torch math in float32 (as Problem.reference)."""
        import torch
        import torch.distributed as dist

        from tests.world.workers import RMS_EPS

        gathered = torch.empty((self.m,) + tuple(self.shard.shape[1:]), dtype=self.shard.dtype)
        dist.all_gather_into_tensor(gathered, self.shard.contiguous(), group=self.group)
        x = gathered.float()
        if self.kernel in ("grouped", "gemm2d"):
            return x @ self.b.float()
        return x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + RMS_EPS) * self.w.float()


def run_cases(rank: int, world: int, cases: list[dict], timeout_s: float = 60.0) -> list[tuple[str, float, str, bool]]:
    """[(case id, worst error over its launches, problem text or '', refused with a KernelError)] for
    each case this rank is in.
    A case: {id, world, schedule (a dict), kernel, rows} and, for a kernel from a file, {file, module,
    problem}: the kernel `kernel` of that file, launched as tests/world/workers.py launches `problem`."""
    import torch.distributed as dist

    groups = {w: dist.new_group(list(range(w))) for w in sorted({c["world"] for c in cases})}  # every rank makes each
    out = []
    for n, case in enumerate(cases):
        if rank >= case["world"]:
            continue
        out.append(_run_case(case, groups[case["world"]], n, timeout_s))
    return out


def _run_case(case: dict, group, n: int, timeout_s: float) -> tuple[str, float, str, bool]:
    import syncopy
    from syncopy.errors import KernelError
    from tests.world.workers import TOL

    try:
        fused = syncopy.overlap(case["schedule"], poison_receive=True, timeout_s=timeout_s)(_kernel(case))
        worst = 0.0
        for launch in range(LAUNCHES):
            p = GroupProblem(case.get("problem", case["kernel"]), group, case["rows"], seed=n * 31 + launch)
            p.launch(fused)
            worst = oracles.worst([worst, p.error()])
        return case["id"], worst, "" if worst <= TOL["float32"] else f"error {worst:.3g}", False
    except Exception as exc:  # the test names every failing case
        return case["id"], float("inf"), f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1200:]}", isinstance(exc, KernelError)


def _kernel(case: dict):
    """The case's @triton.jit function: a kernel of tests/world/workers.py, or one from a file."""
    if "file" not in case:
        from tests.world.workers import _kernel as named

        return named(case["kernel"])
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(case["module"], case["file"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[case["module"]] = module  # Triton's @jit reads the source through inspect
    spec.loader.exec_module(module)
    return getattr(module, case["kernel"])
