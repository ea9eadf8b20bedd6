"""Rank functions of tests/world/test_verify.py: the kernels the suite fuses, through the verifier's
conditions (syncopy.verifier.check_in_world: reordered, held, checked; producers' chunks taken at
their flag) against their own unfused kernels, in the shared worlds.

Each family's example makes a rank's launch the way its own world test does: the golden recipes
(tests/golden/golden_worlds.py), the listed-tensor kernels in every order of their list
(tests/world/listed_workers.py). New data every launch, the communicated tensor at its shard size.
"""
from __future__ import annotations

LAUNCHES = 2


def _summary(record: dict) -> dict:
    """condition -> [differences of each launch] (empty lists where it agreed), and what the oracles saw."""
    out = {}
    for cond, launches in record["conditions"].items():
        out[cond] = {"launches": len(launches), "differences": [d for r in launches for d in r["differences"]],
                     "waited": sum(len(r.get("waited", [])) for r in launches),
                     "unwaited": sum(len(r.get("unwaited", [])) for r in launches),
                     "taken": sum(r.get("taken", 0) for r in launches)}
    return out


def _golden_consumer(case: str):
    import torch

    from tests.golden.golden_worlds import RECIPES

    rows, cols, make = RECIPES[case]

    def example(rank: int, world: int, launch: int):
        shape = (rows,) if cols is None else (rows, cols)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(7919 * launch + 31 * rank + len(case)))
        grid, args, kwargs, _ = make(x, world * rows, torch.Generator().manual_seed(104729 * launch + len(case)))
        return grid, args, kwargs
    return example


def _golden_producer(case: str, pattern: str):
    import torch

    from tests.golden.golden_worlds import PRODUCER_RECIPES

    rows, cols, make = PRODUCER_RECIPES[case]

    def example(rank: int, world: int, launch: int):
        m = rows // world * world  # reduce_scatter: every rank receives as many rows
        seed = 7919 * launch + 31 * rank + len(case)
        if pattern == "all_reduce":
            c = torch.randn(m, cols, generator=torch.Generator().manual_seed(seed + 1))  # the user's C, read by the kernel
        else:
            c = torch.full((m // world, cols), float("nan"))  # the shard of the result: written, never read
        grid, args, kwargs = make(c, m, torch.Generator().manual_seed(seed))
        return grid, args, kwargs
    return example


def run_golden(rank: int, world: int, cases: list[str]) -> dict:
    """Every golden case (consumers and producers) through the verifier: case -> summary."""
    import syncopy.verifier as verifier
    from syncopy.schedule import load_schedule
    from tests.golden import golden_worlds as gw

    gw._set_allocator()
    out = {}
    for case in cases:
        sched = load_schedule(gw.HERE / case / "schedule.yaml")
        kernel = gw._local_kernel(case, sched.kernel)
        # An explicit order is written for its own world; the kernel's text does not depend on it.
        order = "ring" if isinstance(sched.order, list) and len(sched.order) != world - 1 else None
        producer = sched.pattern in verifier.PRODUCERS
        example = _golden_producer(case, sched.pattern) if producer else _golden_consumer(case)
        out[case] = _summary(verifier.check_in_world(kernel, sched, example, launches=LAUNCHES, seed=world, order=order))
    return out


def _listed_example(kernel: str, order: tuple[str, ...]):
    """The listed-tensor kernel's launch (tests/world/listed_workers.py), arguments by the kernel's own names."""
    import torch

    from tests.world import listed_workers as lw

    n = lw.CASES[kernel][1]

    def example(rank: int, world: int, launch: int):
        s = lw._shards(kernel, rank, launch)
        m = lw.ROWS * world
        y = torch.full((m, n), float("nan"))
        w = torch.randn(n, generator=torch.Generator().manual_seed(launch))
        if kernel in ("swiglu_fwd", "swiglu_desc", "swiglu_helper", "swiglu_pair"):
            return (-(-m // 4),), [s["A"], s["B"], y, m], dict(N=n, BR=4)
        if kernel == "swiglu_offsets":
            return (-(-m // 4),), [s["A"], s["B"], y, m, n], dict(BR=4, BN=8)
        if kernel == "dequant_rows":
            return (-(-m // 4),), [s["Q"], s["S"], y, m], dict(N=n, BR=4)
        if kernel == "dequant_row":
            return (m,), [s["Q"], s["S"], y, n], dict(BN=8)
        if kernel == "layernorm_residual":
            return (m,), [s["X"], s["RESIDUAL"], w, y, n, 1e-5], dict(BLOCK=8)
        return (m,), [s["X"], s["RESIDUAL"], s["ROWSCALE"], w, y, n, 1e-5], dict(BLOCK=16)
    return example


def run_listed(rank: int, world: int, cases: list[tuple[str, tuple[str, ...]]]) -> dict:
    """Each (listed kernel, order of its list) through the verifier: "kernel [A, B]" -> summary."""
    import syncopy.verifier as verifier
    from tests.kernels import listed

    out = {}
    for kernel, order in cases:
        sched = {"pattern": "all_gather", "tensor": list(order), "dim": 0, "chunks_per_rank": 2}
        example = _listed_example(kernel, order)
        out[f"{kernel} [{', '.join(order)}]"] = _summary(
            verifier.check_in_world(getattr(listed, kernel), sched, example, launches=LAUNCHES, seed=world))
    return out


def run_templates(rank: int, world: int, names: list[str]) -> dict:
    """Each template through the verifier, against its torch reference: name -> summary."""
    import syncopy.verifier as verifier

    return {name: _summary(verifier.check_template_in_world(name, launches=LAUNCHES, seed=world)) for name in names}


def run_reference_past_rows(rank: int, world: int) -> list[str]:
    """`fused.reference` of a reduce_scatter GEMM whose grid writes more rows than the ranks' shards
    make up: refused in the fused launch's one line, then in the reference's (no out-of-bounds store)."""
    import torch

    import syncopy
    from syncopy.errors import LaunchError
    from syncopy.schedule import load_schedule
    from tests.golden import golden_worlds as gw

    case = "producer_gemm_rs"
    sched = load_schedule(gw.HERE / case / "schedule.yaml")
    op = syncopy.overlap(sched, checked=False)(gw._local_kernel(case, sched.kernel))
    m, cols, make = gw.PRODUCER_RECIPES[case]
    out = []
    for run in (op.__getitem__, op.reference.__getitem__):
        c = torch.full((m // world - 1, cols), float("nan"))  # one row short on every rank
        grid, args, kwargs = make(c, m, torch.Generator().manual_seed(rank))
        try:
            run(grid)(*args, **kwargs)
            out.append("returned")
        except LaunchError as exc:
            out.append(str(exc))
    return out


def run_pruned_autotune(rank: int, world: int) -> dict:
    """The autotuned row sum whose prune_configs_by drops the config it cannot run (tests/kernels/
    autotuned.py, issue 30 D) through the verifier: its reference is the user's autotuner itself,
    which prunes as plain Triton does, so a fused launch running a pruned config differs from it."""
    import torch

    import syncopy.verifier as verifier
    from tests.kernels import autotuned

    def example(rank: int, world: int, launch: int):
        rows = (6, 5)[launch % 2]
        x = torch.randn(rows, 24, generator=torch.Generator().manual_seed(100 * launch + rank))
        m = world * rows
        return (-(-m // 4),), [x, torch.full((m,), float("nan")), m, 24], dict(BLOCK_M=4)
    sched = {"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": 2}
    return {"row_sums_whole_blocks": _summary(verifier.check_in_world(autotuned.row_sums_whole_blocks, sched, example,
                                                                      launches=LAUNCHES, seed=world))}


def run_assigned_jit(rank: int, world: int) -> dict:
    """`copy_rows = triton.jit(_copy_rows)` (tests/kernels/assigned_jit.py), the schedule naming the
    kernel or its function: through the verifier."""
    import torch

    import syncopy.verifier as verifier
    from tests.kernels import assigned_jit

    def example(rank: int, world: int, launch: int):
        rows = (5, 3)[launch % 2]
        x = torch.randn(rows, 8, generator=torch.Generator().manual_seed(10 * launch + rank))
        m = world * rows
        return (-(-m // 2),), [x, torch.full((m, 8), float("nan")), m], dict(N=8, BR=2)
    out = {}
    for name in ("copy_rows", "_copy_rows"):
        sched = {"kernel": name, "pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": 2}
        out[name] = _summary(verifier.check_in_world(assigned_jit.copy_rows, sched, example, launches=LAUNCHES, seed=world))
    return out
