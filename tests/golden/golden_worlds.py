"""Rank functions of test_golden.py's world tests of the expected kernels (spawned: module level).

Every all-gather golden's kernel.py is fused with its schedule.yaml through the decorator, the
kernel the runtime runs is checked to be expected.py's, and it is launched on a CPU world (two
launches, new data each) against its meaning: all_gather_into_tensor of the shards, then the
user's unfused kernel (kernel.py) on the gathered tensor. Each recipe below says how the kernel is
launched: (rows per rank, columns of the communicated tensor or None for 1-D, make(x, m, gen)).
`make` returns (grid, args, kwargs, output) for the communicated tensor `x` (the shard for the fused
kernel, the gathered tensor for the reference); tensors other than `x` come from `gen`, so that both
calls get the same ones. The producer goldens (reduce_scatter, all_reduce) have recipes of their
own below: their meaning is the user's kernel on zeros (or on the rank's C) followed by a reduce.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).parent
NAN = float("nan")
LAUNCHES = 2  # a first launch and a warm one, new data each


def _t(*shape, gen):
    import torch

    return torch.randn(*shape, generator=gen)


def _nan(*shape):
    import torch

    return torch.full(shape, NAN)


def _cdiv(a, b):
    return -(-a // b)


def _act_rows(x, m, gen):
    out = _nan(m)
    return (_cdiv(m, 4),), [x, out, m, 1, 1], dict(BLOCK=4), out


def _gather_sum(x, m, gen):
    out = _nan(_cdiv(m, 4))
    return (_cdiv(m, 4),), [x, out, m, 1], dict(BLOCK=4), out


def _tiled_product(x, m, gen):
    q, r = _t(16, 16, gen=gen), _nan(m, 16)
    return (m // 16, 1), [x, q, r, m, 16, 16, *x.stride(), *q.stride(), *r.stride()], dict(TILE_A=16, TILE_B=16, TILE_K=16), r


def _swizzled_mm(x, m, gen):
    right, dst = _t(24, 32, gen=gen), _nan(m, 32)
    return ((_cdiv(m, 16) * 2),), [x, right, dst, m, 32, 24, *x.stride(), *right.stride(), *dst.stride()], \
        dict(BR=16, BC=16, BD=16, SWZ=2), dst


def _scaled_rows(x, m, gen):
    scale, dst = _t(6, gen=gen), _nan(m, 6)
    return (_cdiv(m, 4),), [x, scale, dst, m, 6, x.stride(0), dst.stride(0)], dict(ROWS=4, COLS=8), dst


def _col_major_grid(x, m, gen):
    wt, res = _t(16, 32, gen=gen), _nan(m, 32)
    return (2, _cdiv(m, 16)), [x, wt, res, m, 32, 16, *x.stride(), *wt.stride(), *res.stride()], dict(BF=16, BH=16, BD=16), res


def _mm_rebuild(x, m, gen):
    ws, ys = _t(24, 16, gen=gen), _nan(m, 16)
    return (_cdiv(m, 16), 1), [x, ws, ys, m, 16, 24, *x.stride(), *ws.stride(), *ys.stride()], dict(BM=16, BN=16, BK=16), ys


def _layer_norm_rows(x, m, gen):
    gamma, out = _t(10, gen=gen), _nan(m, 10)
    return (m,), [x, gamma, out, x.stride(0), 10, 1e-5], dict(BLK=8), out


def _second_kernel(x, m, gen):
    out = _nan(m)
    return (_cdiv(m, 4),), [x, out, m], dict(BLOCK=4), out


def _gather_rows(x, m, gen):
    import torch

    idx = torch.randint(0, m, (m + 3,), generator=gen, dtype=torch.int32)
    out = _nan(m + 3, 8)
    return (m + 3,), [x, idx, out], dict(NC=8), out


def _helper_pid(x, m, gen):
    out = _nan(_cdiv(m, 4), 8)
    return (_cdiv(m, 4),), [x, out, m], dict(NC=8, BR=4), out


def _two_helpers(x, m, gen):
    out = _nan(m, 8)
    return (_cdiv(m, 4),), [x, out, m], dict(NC=8, BR=4), out


def _masked_quad(x, m, gen):
    out = _nan(m, 8)
    return (_cdiv(m, 8),), [x, out, m], dict(NC=8, BM=2), out


def _nested_steps(x, m, gen):
    out = _nan(m // 6, 8)
    return (m // 6,), [x, out], dict(NC=8, OUTER=2, INNER=3), out


def _persistent_blocks(x, m, gen):
    import torch

    nb = _cdiv(m, 4)
    blocks = torch.randperm(nb, generator=gen).to(torch.int32)
    out = _nan(nb * 4, 8)
    return (2,), [x, blocks, out, nb, m], dict(NC=8, BR=4, NP=2), out


def _ring_rows(x, m, gen):
    nb = _cdiv(m, 4)
    out = _nan(nb * 4, 8)
    return (nb,), [x, out, m], dict(NC=8, BR=4, NB=nb), out


def _gemm_persistent(x, m, gen):
    rhs, res = _t(16, 32, gen=gen), _nan(m, 32)
    return (3,), [x, rhs, res, m, 32, 16], dict(TR=16, TC=16, TD=16, SWZ=2, CORES=3), res


def _flat_k_desc(x, m, gen):
    b, c = _t(32, 32, gen=gen), _nan(m, 32)
    return (3,), [x, b, c, m, 32, 32], dict(BM=16, BN=16, BK=16, SMS=3), c


def _matmul_kernel_persistent(x, m, gen):
    b, c = _t(24, 32, gen=gen), _nan(m, 32)
    return (3,), [x, b, c, m, 32, 24, *x.stride(), *b.stride(), *c.stride()], \
        dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=16, BLOCK_SIZE_K=16, GROUP_SIZE_M=2, NUM_SMS=3), c


def _matmul_kernel_descriptor_persistent(x, m, gen):
    b, c = _t(32, 32, gen=gen), _nan(m, 32)  # b is [N, K]: the kernel multiplies by its transpose
    return (3,), [x, b, c, m, 32, 32], dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=16, BLOCK_SIZE_K=16, GROUP_SIZE_M=2, NUM_SMS=3), c


def _rolling_tiles(x, m, gen):
    q, r = _t(24, 32, gen=gen), _nan(m, 32)
    return (3,), [x, q, r, m, 32, 24, *x.stride(), *q.stride(), *r.stride()], dict(BM=16, BN=16, BK=16, LANES=3), r


def _column_stats(x, m, gen):
    out = _nan(2, 8)  # row 0: the column sums, row 1: the column maxima
    return (2,), [x, out[0], out[1], m], dict(NC=8, BR=4, BC=4), out


def _column_loop(blocks_out):
    def make(x, m, gen):
        out = _nan(blocks_out(m), 8)
        return (1,), [x, out, m], dict(NC=8, BR=4), out
    return make


def _padded_attention(x, m, gen):
    # Keys at positions >= L are padding: the last rank's blocks are all padding (NaN had they come first).
    q, out = _t(16, 16, gen=gen), _nan(16, 16)
    return (1,), [q, x, out, 16, m, m // 2 - 3, 0.25], dict(D=16, BM=16, BN=8), out


def _mm_k_gathered(x, m, gen):
    a, c = _t(20, m, gen=gen), _nan(20, 16)
    return (2, 1), [a, x, c, 20, 16, m], dict(BM=16, BN=16, BK=16), c


#: case -> (rows per rank, columns of the communicated tensor (None: 1-D), make)
RECIPES = {
    "defaulted_constexpr": (7, None, _act_rows),
    "docstring_comments": (7, None, _gather_sum),
    "gemm_2d_launch": (16, 16, _tiled_product),
    "grouped_gemm_1d": (13, 24, _swizzled_mm),
    "masked_loads": (9, 6, _scaled_rows),
    "program_id_axis_kw": (11, 16, _col_major_grid),
    "ptr_in_loop": (10, 24, _mm_rebuild),
    "rownorm_reassign": (5, 10, _layer_norm_rows),
    "two_kernels": (6, None, _second_kernel),
    "waits_data_rows": (6, 8, _gather_rows),
    "waits_helper_pid": (7, 8, _helper_pid),
    "waits_helper_rows": (8, 8, _two_helpers),
    "waits_masked_last": (7, 8, _masked_quad),
    "waits_nested_step": (6, 8, _nested_steps),
    "waits_persistent_index": (8, 8, _persistent_blocks),
    "waits_wrapped_rows": (6, 8, _ring_rows),
    "persistent_desc_helper": (13, 16, _gemm_persistent),
    "persistent_flat_desc": (16, 32, _flat_k_desc),
    "persistent_flat_pointers": (13, 24, _matmul_kernel_persistent),
    "persistent_tutorial_two_counters": (16, 32, _matmul_kernel_descriptor_persistent),
    "persistent_while_pointers": (11, 24, _rolling_tiles),
    "loop_arrival_colsum": (7, 8, _column_stats),
    "loop_as_written_gemm": (13, 16, _mm_k_gathered),
    "loop_written_decayed_sum": (8, 8, _column_loop(lambda m: 2)),
    "loop_written_max_reader": (8, 8, _column_loop(lambda m: 1)),
    "loop_written_helper_store": (8, 8, _column_loop(lambda m: 1 + _cdiv(m, 4))),
    "loop_written_unguarded_softmax": (16, 32, _padded_attention),
}


def _local_kernel(case: str, name: str):
    spec = importlib.util.spec_from_file_location(f"golden_kernel_{case}", HERE / case / "kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _set_allocator() -> None:
    """Tensor descriptors made in a kernel need scratch memory (the fused launch sets this itself)."""
    import torch
    import triton

    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8))


def _fused_case(case: str, world: int):
    """(schedule, the user's local kernel, the fused operator -- None unless the kernel the runtime
    runs is expected.py's) of golden `case`, NaN-poisoning its receive buffers."""
    import syncopy
    from syncopy.schedule import load_schedule
    from tests.golden.spans import inside

    sched = load_schedule(HERE / case / "schedule.yaml")
    local = _local_kernel(case, sched.kernel)
    # An explicit order is written for its own world; the kernel's text does not depend on it.
    order = "ring" if isinstance(sched.order, list) and len(sched.order) != world - 1 else None
    # Unchecked (expected.py is the unchecked form), whatever the shared world's SYNCOPY_CHECKED says.
    fused = syncopy.overlap(sched, order=order, poison_receive=True, checked=False)(local)
    same = inside(fused.source, sched.kernel) == inside((HERE / case / "expected.py").read_text(), sched.kernel)
    return sched, local, fused if same else None


def run_expected_kernels(rank: int, world: int, cases: list[str]) -> list[tuple[str, float, str]]:
    """(case and launch, error, problem) for every case: LAUNCHES launches each, new data every time."""
    import torch
    import torch.distributed as dist

    _set_allocator()
    out = []
    for ci, case in enumerate(cases):
        sched, local, fused = _fused_case(case, world)
        if fused is None:
            out.append((case, float("inf"), "the kernel the runtime runs is not expected.py's"))
            continue
        rows, cols, make = RECIPES[case]
        for launch in range(1, LAUNCHES + 1):
            seed = (ci * 10 + launch) * 1009
            shape = (rows,) if cols is None else (rows, cols)
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed + rank))
            full = torch.empty((world * rows,) + shape[1:])
            dist.all_gather_into_tensor(full, x)
            m = world * rows
            grid, args, kwargs, want_out = make(full, m, torch.Generator().manual_seed(seed))
            local[grid](*args, **kwargs)
            grid, args, kwargs, got = make(x, m, torch.Generator().manual_seed(seed))
            fused[grid](*args, **kwargs)
            diff = torch.nan_to_num((got - want_out).abs(), nan=float("inf"))
            out.append((f"{case} launch {launch}", float(diff.max()) / max(1.0, float(want_out.abs().max())), ""))
    return out


# --- producer goldens: the kernel on zeros (reduce_scatter) or on each rank's C (all_reduce), then a
# reduce over the ranks (torch.distributed.all_reduce), against the fused kernel's result. `make`
# returns (grid, args, kwargs) for the communicated tensor `c` (the rank's shard for the fused
# reduce_scatter, the full tensor otherwise); its other tensors come from `gen`, seeded per rank.

def _row_parallel_linear(c, m, gen):
    x, w = _t(m, 16, gen=gen), _t(16, 16, gen=gen)
    return (_cdiv(m, 16),), [x, w, c, m, 16, 16, *x.stride(), *w.stride(), 16, 1], dict(BR=16, BC=16, BI=16)


def _gemm_desc_out(c, m, gen):
    a, b = _t(m, 16, gen=gen), _t(16, 16, gen=gen)
    return (_cdiv(m, 16), 2), [a, b, c, m, 16, 16], dict(BM=16, BN=16, BK=16)  # the second column block returns early


def _causal_scores(c, m, gen):
    q, k = _t(m, 16, gen=gen), _t(m, 16, gen=gen)
    return (_cdiv(m, 16), _cdiv(m, 16)), [q, k, c, m, 16], dict(BT=16, BD=16)


def _layer_norm_out(c, m, gen):
    inp, gamma = _t(m, 10, gen=gen), _t(10, gen=gen)
    return (m,), [inp, gamma, c, 10, 10, 1e-5], dict(BLK=8)


def _combine(c, m, gen):
    import torch

    n_rows = 12
    expert_out = _t(n_rows, 8, gen=gen)
    token_of = torch.randint(0, m, (n_rows,), generator=gen, dtype=torch.int32)
    return (_cdiv(n_rows, 4),), [expert_out, token_of, c, n_rows, 8], dict(BR=4, BH=8)


def _rotate_rows(c, m, gen):
    import torch

    shift = int(torch.randint(1, m, (1,), generator=gen))  # a new wrap each launch
    return (2,), [_t(m, 8, gen=gen), c, m, 8, shift], dict(BLOCK_M=4, BLOCK_N=8, STEPS=3)


def _scatter_rows(c, m, gen):
    import torch

    x, index = _t(m, 8, gen=gen), torch.randperm(m, generator=gen).to(torch.int32)
    return (2,), [x, c, index, m, 8], dict(BLOCK_M=4, BLOCK_N=8, BLOCKS=3)


def _reversed_halves(c, m, gen):
    return (_cdiv(m, 8),), [_t(m, 8, gen=gen), c, m, 8], dict(BLOCK_M=2, BLOCK_N=8, PARTS=2, HALVES=2)


def _copy_band(c, m, gen):
    return (_cdiv(m, 10),), [_t(m, 8, gen=gen), c, m, 8, 10], dict(BLOCK_M=4, BLOCK_N=8)


#: case -> (rows of the full output, its columns, make)
PRODUCER_RECIPES = {
    "producer_store_wrapped_rows": (24, 8, _rotate_rows),
    "producer_store_loaded_rows": (24, 8, _scatter_rows),
    "producer_store_mixed_corner": (24, 8, _reversed_halves),
    "producer_store_while_rows": (24, 8, _copy_band),
    "producer_gemm_rs": (32, 16, _row_parallel_linear),
    "producer_desc_store": (32, 16, _gemm_desc_out),
    "producer_early_return": (32, 32, _causal_scores),
    "producer_rownorm_allreduce": (10, 10, _layer_norm_out),
    "producer_rows_from_data": (16, 8, _combine),
}


def run_expected_producers(rank: int, world: int, cases: list[str]) -> list[tuple[str, float, str]]:
    """(case and launch, error, problem) for every producer golden: LAUNCHES launches, new data each."""
    import torch
    import torch.distributed as dist

    _set_allocator()
    out = []
    for ci, case in enumerate(cases):
        sched, local, fused = _fused_case(case, world)
        if fused is None:
            out.append((case, float("inf"), "the kernel the runtime runs is not expected.py's"))
            continue
        m, cols, make = PRODUCER_RECIPES[case]
        rows = m // world
        for launch in range(1, LAUNCHES + 1):
            seed = (ci * 10 + launch) * 1013 + rank * 7
            start = torch.randn(m, cols, generator=torch.Generator().manual_seed(seed + 1))  # all_reduce: the user's C
            full = start.clone() if sched.pattern == "all_reduce" else torch.zeros(m, cols)
            grid, args, kwargs = make(full, m, torch.Generator().manual_seed(seed))
            local[grid](*args, **kwargs)
            dist.all_reduce(full)
            want = full if sched.pattern == "all_reduce" else full[rank * rows:(rank + 1) * rows]
            got = start.clone() if sched.pattern == "all_reduce" else torch.full((rows, cols), NAN)
            grid, args, kwargs = make(got, m, torch.Generator().manual_seed(seed))
            fused[grid](*args, **kwargs)
            diff = torch.nan_to_num((got - want).abs(), nan=float("inf"))
            out.append((f"{case} launch {launch}", float(diff.max()) / max(1.0, float(want.abs().max())), ""))
    return out
