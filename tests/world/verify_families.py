"""Rank functions of tests/world/test_verify_families.py: the kernel families of tests/kernels/ through
the verifier's conditions (syncopy.verifier.check_in_world: reordered, held, checked; producers'
chunks taken at their flag) against their own unfused kernels, in the shared world of 2 (issue 26,
item 2: every kernel the tests fuse, at least once).

Each family's example makes a rank's launch as the family's own world test does, through that test's
workers where they launch (their launch functions are handed a recorder instead of a kernel: the
grid, arguments and keywords they would have launched with). Shapes are the smallest that still give
several chunks a rank and more than one program (ragged where cheap); new data every launch, the
communicated tensor at its shard size (reduce_scatter: this rank's rows of the result).
"""
from __future__ import annotations

from tests.world.verify_workers import LAUNCHES, _summary

PRODUCERS = ("reduce_scatter", "all_reduce")


class _Recorder:
    """Stands in for a kernel: `rec[grid](*args, **kwargs)` keeps the launch (a `group=None` the
    workers pass to fused kernels dropped: the user's own kernel takes no group)."""

    made = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if kwargs.get("group", 0) is None:
                del kwargs["group"]
            self.made = (grid, list(args), dict(kwargs))
        return launch


def _made(launch) -> tuple:
    rec = _Recorder()
    launch(rec)
    assert rec.made is not None, "the workers' launch function launched nothing"
    return rec.made


def _verify(kernel, schedule: dict, example, world: int) -> dict:
    import syncopy.verifier as verifier

    return _summary(verifier.check_in_world(kernel, schedule, example, launches=LAUNCHES, seed=world))


def _gen(*parts: int):
    import torch

    seed = 0
    for p in parts:
        seed = seed * 1009 + p
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------------
# tests/kernels/waits.py (tests/world/wait_workers.py): consumers of X whose reads no single bound covers.

#: kernel -> (chunks per rank, rows per rank) at world 2 (tests/world/test_consumer_waits.py's, or smaller).
WAITS = {
    "masked_quad": (2, 7),         # two programs of four 2-row blocks, the last block masked off
    "reverse_scan": (2, 6),
    "nested_steps": (3, 6),        # two programs of 6 rows, 2-row chunks
    "ring_rows": (2, 6),           # three 4-row blocks (ragged against the 3-row chunks)
    "helper_block": (2, 7),        # four blocks, the last one masked
    "helper_wrapped": (2, 7),
    "helper_pid": (2, 6),
    "gather_rows": (2, 6),         # new indices every launch, by rank
    "persistent_blocks": (2, 8),
    "while_own_end": (2, 8),
    "swizzled_tiles": (2, 12),     # six blocks, swizzle of 3
    "prefetch_next": (2, 8),
    "stream_k": (2, 6),            # six 2-row steps, two tiles of three, four programs
    "persistent_wrapped": (2, 8),
}


def _waits_example(name: str, rows: int):
    def example(rank: int, world: int, launch: int):
        import torch

        from tests.world import wait_workers as ww

        x = torch.randn(rows, ww.NC, generator=_gen(launch, len(name), rank, 1))
        gen = _gen(launch, len(name), rank, 2)  # index tensors differ by rank and launch
        shape_only = torch.zeros(world * rows, ww.NC)  # ww._run's own torch answer is not used
        return _made(lambda rec: ww._run(name, rec, x, shape_only, gen))
    return example


def run_waits(rank: int, world: int, names: list[str]) -> dict:
    from tests.kernels import waits

    out = {}
    for name in names:
        chunks, rows = WAITS[name]
        sched = {"pattern": "all_gather", "tensor": "X", "dim": 0, "chunks_per_rank": chunks, "order": "ring"}
        out[name] = _verify(getattr(waits, name), sched, _waits_example(name, rows), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/loops.py (tests/world/loop_order_workers.py): loops whose order matters, and the controls.

LOOPS = ["decayed_sum_with_max", "decayed_sum_two_step_max", "rescaled_plain_sum", "sum_of_running_max",
         "count_new_records", "sum_until_max_passes", "max_of_running_sum", "sum_above_running_min",
         "max_history_helper", "max_history_nested_helper", "max_history_store", "sum_and_atomic_helper",
         "padded_attention", "padded_attention_exp2", "padded_attention_half_guard", "padded_attention_mask_tensor",
         "guarded_padded_attention", "sum_max_count"]


def _loops_example(name: str):
    def example(rank: int, world: int, launch: int):
        import torch

        from tests.world import loop_order_workers as lw

        g = _gen(launch, len(name), rank)
        if name in lw.ATTENTION:
            q, k, v = (torch.randn(n, lw.D, generator=g) for n in (lw.BM, lw.KEYS, lw.KEYS))
            n = world * lw.KEYS
            # Launch 0: every rank's keys but rank 0's are padding (its blocks all -inf), 1: the last rank's.
            length = (5, n - lw.KEYS - 3)[launch % 2]
            out = torch.full((lw.BM, lw.D), float("nan"))
            meta = dict(D=lw.D, BM=lw.BM, BN=lw.BN)
            if name.endswith("mask_tensor"):
                km = torch.ones(n, dtype=torch.int32).masked_fill(torch.arange(n) >= length, 0)
                return (1,), [q, k, v, km, out, lw.BM, n, 0.25], meta
            return (1,), [q, k, v, out, lw.BM, n, length, 0.25], meta
        x = torch.randn(lw.ROWS, lw.NC, generator=g)
        m = world * lw.ROWS
        rows = lw._column_meaning(name, torch.zeros(m, lw.NC), 1.0).shape  # its output's shape
        out = torch.zeros(rows) if name == "sum_and_atomic_helper" else torch.full(rows, float("nan"))
        scalars = [m, 1.0] if name == "sum_until_max_passes" else [m]
        return (1,), [x, out, *scalars], dict(NC=lw.NC, BR=lw.BR)
    return example


def run_loops(rank: int, world: int, names: list[str]) -> dict:
    from tests.kernels import loops
    from tests.world import loop_order_workers as lw

    out = {}
    for name in names:
        tensor = ["K", "V"] if name in lw.ATTENTION else "X"
        sched = {"pattern": "all_gather", "tensor": tensor, "dim": 0, "chunks_per_rank": 2, "order": "ring"}
        out[name] = _verify(getattr(loops, name), sched, _loops_example(name), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/producer_bounds.py (tests/world/producer_bounds_workers.py): store rows the analysis must prove.


def bounds_cases() -> list[tuple[str, str]]:
    """Each kernel once, reduce_scatter and all_reduce alternating over the kernels."""
    from tests.world import producer_bounds_workers as pbw

    return [(name, PRODUCERS[i % 2]) for i, name in enumerate(pbw.ALL)]


def _bounds_example(name: str, pattern: str):
    def example(rank: int, world: int, launch: int):
        import torch

        from tests.world import producer_bounds_workers as pbw

        m = pbw.rows(world)  # 3 rows a chunk at 4 chunks a rank: a program's stores straddle chunks
        g = _gen(launch, rank, 3)
        a, c = torch.randn(m, pbw.N, generator=g), torch.randn(m, pbw.N, generator=g)
        perm = torch.randperm(m, generator=g).to(torch.int32)
        if pattern == "reduce_scatter":
            c = torch.full((m // world, pbw.N), float("nan"))  # this rank's rows of the result: written, never read
        return _made(lambda rec: pbw._launch(rec, name, a, c, m, launch, perm))
    return example


def run_producer_bounds(rank: int, world: int, cases: list[tuple[str, str]]) -> dict:
    from tests.kernels import producer_bounds
    from tests.world import producer_bounds_workers as pbw

    out = {}
    for name, pattern in cases:
        sched = {"pattern": pattern, "tensor": "C", "dim": 0, "chunks_per_rank": pbw.CHUNKS, "order": "ring"}
        out[f"{name} {pattern}"] = _verify(getattr(producer_bounds, name), sched, _bounds_example(name, pattern), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/producer_cases.py (tests/world/producer_workers.py): producers touching C as people write them.

CASES = ["splitk_atomic", "partial_grid", "accumulate", "lower_triangular", "rows_by_index", "skip_by_flag",
         "scatter_add_rows"]


def producer_cases() -> list[tuple[str, str]]:
    return [(name, PRODUCERS[i % 2]) for i, name in enumerate(CASES)]


def _cases_example(name: str, pattern: str):
    def example(rank: int, world: int, launch: int):
        import torch

        from tests.world import producer_workers as prw

        m = prw._rows(world)  # 6 rows a chunk: 16-row tiles straddle chunks
        a, b, c, extra = prw._inputs(name, rank, world, m, launch, prw._variant(world, pattern, launch))
        if pattern == "reduce_scatter":
            c = torch.full((m // world, prw.N), float("nan"))
        return _made(lambda rec: prw._launch(rec, name, a, b, c, m, extra))
    return example


def run_producer_cases(rank: int, world: int, cases: list[tuple[str, str]]) -> dict:
    from tests.kernels import producer_cases as kernels
    from tests.world import producer_workers as prw

    out = {}
    for name, pattern in cases:
        sched = {"pattern": pattern, "tensor": "C", "dim": 0, "chunks_per_rank": prw.CHUNKS, "order": "ring"}
        out[f"{name} {pattern}"] = _verify(getattr(kernels, name), sched, _cases_example(name, pattern), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/persistent.py (tests/world/persistent_workers.py): persistent GEMMs, fewer programs than tiles.

PERSISTENT = ["sweep_tiles", "tutorial_ws", "rolling_tiles", "stepping_first", "flat_k_steps", "flat_k_desc"]
PERSISTENT_ROWS, PERSISTENT_PROGRAMS = 13, 3  # M = 26: two row tiles of 16 (the second ragged), four tiles


def _persistent_example(name: str):
    def example(rank: int, world: int, launch: int):
        import torch

        from tests.world import persistent_workers as pw

        a, b = pw._inputs(name, rank, PERSISTENT_ROWS, torch.float32, seed=launch + 1)
        c = torch.full((world * PERSISTENT_ROWS, pw.N), float("nan"))
        return _made(lambda rec: pw.launch(name, rec, a, b, c, PERSISTENT_PROGRAMS))
    return example


def run_persistent(rank: int, world: int, names: list[str]) -> dict:
    from tests.kernels import persistent
    from tests.world import persistent_workers as pw

    out = {}
    for name in names:
        sched = {"pattern": "all_gather", "tensor": pw.TENSOR[name], "dim": 0, "chunks_per_rank": 2, "order": "ring"}
        out[name] = _verify(getattr(persistent, name), sched, _persistent_example(name), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/read_check.py (tests/world/read_check_workers.py): row blocks, and the reads checked mode
# used to miss (an elif's test, a while's later tests, a helper from another file); here with the
# binding the analysis infers (the read-check tests narrow it on purpose).

READ_CHECK = [("double_rows", "all_gather"), ("double_into", "reduce_scatter"), ("first_of_block_elif", "all_gather"),
              ("finite_rows_while", "all_gather"), ("block_sum_imported", "all_gather")]


def _read_check_example(name: str, pattern: str):
    def example(rank: int, world: int, launch: int):
        import torch

        from tests.world import read_check_workers as rw

        m = rw.BR * world  # a program a rank's rows, two chunks
        meta = dict(NC=rw.NC, BR=rw.BR)
        if name == "double_into":  # every rank writes all of C from its own X
            x = torch.randn(m, rw.NC, generator=_gen(launch, rank, 5))
            return (world,), [x, torch.full((rw.BR, rw.NC), float("nan")), m], meta
        x = torch.randn(rw.BR, rw.NC, generator=_gen(launch, rank, 6))
        out = torch.full((m, rw.NC) if name == "double_rows" else (world,), float("nan"))
        return (world,), [x, out, m], meta
    return example


def run_read_check(rank: int, world: int, cases: list[tuple[str, str]]) -> dict:
    from tests.kernels import read_check

    out = {}
    for name, pattern in cases:
        tensor = "C" if pattern in PRODUCERS else "X"
        sched = {"pattern": pattern, "tensor": tensor, "dim": 0, "chunks_per_rank": 2, "order": "ring"}
        if name == "finite_rows_while":  # a read in a while's test is refused without a binding: the user's, sound
            sched["binding"] = {"rows": "pid * BR + tl.arange(0, BR)"}
        out[name] = _verify(getattr(read_check, name), sched, _read_check_example(name, pattern), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/gemm2d.py, grouped_gemm.py, rownorm.py (tests/world/workers.py's Problem) and desc_out.py
# (workers.run_producer_descriptors).

GEMMS = [("grouped", "all_gather"), ("gemm2d", "all_gather"), ("rms", "all_gather"), ("mm_desc_out", "reduce_scatter"),
         ("mm_desc_out", "all_reduce")]
GEMM_ROWS = {"grouped": 12, "gemm2d": 12, "rms": 5}  # GEMMs: M = 24, 2 x 2 tiles of 16 (6-row chunks); rms: 10 programs


def _problem_example(kernel: str):
    def example(rank: int, world: int, launch: int):
        from tests.world import workers

        p = workers.Problem(kernel, rank, world, GEMM_ROWS[kernel], "float32", seed=launch + 1)
        return _made(p.launch)
    return example


def _desc_out_example(pattern: str):
    def example(rank: int, world: int, launch: int):
        import torch

        m, n, k = 24, 32, 16  # 2 x 2 tiles of 16
        g = _gen(launch, rank, 7)
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        c = torch.full((m // world if pattern == "reduce_scatter" else m, n), float("nan"))
        if pattern == "all_reduce":
            c = torch.randn(m, n, generator=g)  # kept where the kernel writes nothing (it writes every element)
        return (-(-m // 16), -(-n // 16)), [a, b, c, m, n, k], dict(BM=16, BN=16, BK=16)
    return example


def run_gemms(rank: int, world: int, cases: list[tuple[str, str]]) -> dict:
    from tests.kernels.desc_out import mm_desc_out
    from tests.world import workers

    out = {}
    for kernel, pattern in cases:
        if kernel == "mm_desc_out":
            sched = {"pattern": pattern, "tensor": "C", "dim": 0, "chunks_per_rank": 2}
            out[f"{kernel} {pattern}"] = _verify(mm_desc_out, sched, _desc_out_example(pattern), world)
        else:
            out[kernel] = _verify(workers._kernel(kernel), workers.schedule(kernel, 2, "ring"), _problem_example(kernel), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/autotuned.py (tests/world/autotune_workers.py); row_sums_whole_blocks is in test_verify.py.

AUTOTUNED = ["matmul_kernel", "split_k_fused", "softmax_rows"]


def _autotuned_example(name: str):
    def example(rank: int, world: int, launch: int):
        import torch
        import triton

        if name == "matmul_kernel":  # fp16, a grid that is a lambda of META, the activation on the second launch
            rows, n, k = 11, 20, 24
            a = torch.randn(rows, k, generator=_gen(launch, rank, 8)).half()
            b = torch.randn(k, n, generator=_gen(launch, 9)).half()
            m = world * rows
            c = torch.full((m, n), float("nan"), dtype=torch.float16)
            grid = lambda META: (triton.cdiv(m, META["BLOCK_SIZE_M"]) * triton.cdiv(n, META["BLOCK_SIZE_N"]),)  # noqa: E731
            return grid, [a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)], \
                dict(ACTIVATION="leaky_relu" if launch % 2 else "")
        if name == "split_k_fused":  # K = 24: the masked loop; K = 32: EVEN_K
            rows, n, k = 10, 12, (24, 32)[launch % 2]
            a = torch.randn(rows, k, generator=_gen(launch, rank, 10))
            b = torch.randn(k, n, generator=_gen(launch, 11))
            m = world * rows
            c = torch.full((m, n), float("nan"))  # the config's pre_hook zeroes it
            grid = lambda META: (triton.cdiv(m, META["BLOCK_M"]) * triton.cdiv(n, META["BLOCK_N"]), META["SPLIT_K"])  # noqa: E731
            return grid, [a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)], {}
        rows, cols = 5, 12  # softmax_rows: its `num_stages` constexpr passed as num_stages=2
        x = torch.randn(rows, cols, generator=_gen(launch, rank, 12))
        y = torch.full((world * rows, cols), float("nan"))
        return (world * rows,), [y, x, x.stride(0), y.stride(0), world * rows, cols], dict(BLOCK_SIZE=16, num_stages=2)
    return example


def run_autotuned(rank: int, world: int, names: list[str]) -> dict:
    from tests.kernels import autotuned

    # The user's own autotuners: under the interpreter the verifier's reference times every config alike
    # (no driver to time them with), so Triton takes the first its pruning leaves, as a fused launch does.
    kernels = {"matmul_kernel": (autotuned.matmul_kernel, "a_ptr"),
               # @syncopy.overlap stacked on it: the autotuner it decorates, as the user wrote it
               "split_k_fused": (autotuned.split_k_fused.tuning.layers[0], "A"),
               "softmax_rows": (autotuned.softmax_rows, "in_ptr")}
    out = {}
    for name in names:
        kernel, tensor = kernels[name]
        sched = {"pattern": "all_gather", "tensor": tensor, "dim": 0, "chunks_per_rank": 2, "order": "ring"}
        out[name] = _verify(kernel, sched, _autotuned_example(name), world)
    return out



# --------------------------------------------------------------------------------------------------
# The all_to_all kernel of tests/world/moe_workers.py (its uneven splits are the runtime's; here the
# even exchange: each rank's rows in `world` equal blocks, block d to rank d).

def _scale_rows_example(rank: int, world: int, launch: int):
    import torch

    rows = (3 * world, 3 * world, 2 * world)[launch % 3]  # a warm launch, then a new shape
    x = torch.randn(rows, 8, generator=_gen(launch, rank, 13))
    return (-(-rows // 4),), [x, torch.full((rows, 8), float("nan")), rows, 8], dict(BLOCK_M=4, BLOCK_N=8)


def run_all_to_all(rank: int, world: int) -> dict:
    from tests.world.moe_workers import scale_rows

    sched = {"pattern": "all_to_all", "tensor": "X", "dim": 0, "chunks_per_rank": 2}
    return {"scale_rows": _verify(scale_rows, sched, _scale_rows_example, world)}


# --------------------------------------------------------------------------------------------------
# tests/kernels/attention_styles.py (tests/world/attention_styles_workers.py): attention as public
# repositories write it, FA2 with EVEN_N flipping between launches (BLOCK_N 32: ragged, 16: even).

ATTENTION_STYLES = {"fa2_forward": ["K", "V"], "decode_split_kv": ["K_Buffer", "V_Buffer"]}


def _attention_styles_example(name: str):
    def example(rank: int, world: int, launch: int):
        from tests.world import attention_styles_workers as aw

        if name == "fa2_forward":
            q, k, v = aw.fa2_inputs(rank, world, launch)
            block_n, causal = aw.FA2_LAUNCHES[launch % len(aw.FA2_LAUNCHES)]
            return _made(lambda rec: aw.launch_fa2(rec, q, k, v, aw.torch_full_nan(q), aw.GATHERED, block_n, causal))
        q, k, v, indptr, slots = aw.decode_inputs(rank, world, launch, pool=12)
        return _made(lambda rec: aw.launch_decode(rec, q, k, v, indptr, slots))
    return example


def run_attention_styles(rank: int, world: int, names: list[str]) -> dict:
    from tests.kernels import attention_styles

    out = {}
    for name in names:
        sched = {"pattern": "all_gather", "tensor": ATTENTION_STYLES[name], "dim": 0, "chunks_per_rank": 2, "order": "ring"}
        out[name] = _verify(getattr(attention_styles, name), sched, _attention_styles_example(name), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/sequence_loops.py (tests/world/sequence_loop_workers.py): loops over a sequence
# gathered along dim 1 (issue 31 item 6), each iteration waiting for its own chunks.

def _sequence_loops_example(name: str):
    def example(rank: int, world: int, launch: int):
        from tests.world import sequence_loop_workers as sw

        if name in ("fa2_bshd", "guarded_attention_bshd"):
            return _made(lambda rec: sw.launch_attention(name, rec, rank, world, launch % len(sw.FA2_LAUNCHES)))
        if name == "state_passing":
            return _made(lambda rec: sw.launch_scan(rec, rank, world, launch))
        if name == "linear_recurrence_constexpr_steps":
            return _made(lambda rec: sw.launch_recurrence_constexpr_steps(rec, rank, world, launch))
        return _made(lambda rec: sw.launch_recurrence(rec, rank, world, launch))
    return example


def run_sequence_loops(rank: int, world: int, names: list[str]) -> dict:
    from tests.kernels import sequence_loops
    from tests.world.sequence_loop_workers import TENSORS

    out = {}
    for name in names:
        sched = {"pattern": "all_gather", "tensor": TENSORS[name], "dim": 1, "chunks_per_rank": 2, "order": "ring"}
        out[name] = _verify(getattr(sequence_loops, name), sched, _sequence_loops_example(name), world)
    return out


# --------------------------------------------------------------------------------------------------
# tests/kernels/attention_host_descriptors.py and the tutorial's attn_desc_by_helper, launched with
# host TensorDescriptor arguments (tests/world/host_descriptor_workers.py, issue 31 item 2).

def run_host_descriptors(rank: int, world: int, names: list[str]) -> dict:
    import syncopy.verifier as verifier
    from tests.world import host_descriptor_workers as hw

    out = {}
    for name in names:
        sched = {"pattern": "all_gather", "tensor": ["desc_k", "desc_v"], "dim": 0, "chunks_per_rank": 2, "order": "ring"}

        def example(rank: int, world: int, launch: int, name=name):
            return hw.host_launch(name, rank, world, launch)[:3]

        # Checked mode does not look inside a helper handed tensor descriptors (read_check.py): those are reordered and held only.
        conditions = hw.CONDITIONS if name in hw.HELPER_HANDED else verifier.CONDITIONS
        out[name] = _summary(verifier.check_in_world(hw.kernel_of(name), sched, example, launches=LAUNCHES, seed=world,
                                                     conditions=conditions))
    return out
