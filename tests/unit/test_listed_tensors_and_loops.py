"""Issue 13 items 2 and 3 without ranks: a schedule listing several communicated tensors (`tensor:
[K, V]`), reads inside loops whose iterations take other rows (each waits for its own chunks), the
arrival order of loops that only accumulate, and `loop_order`. Each misuse is one located line.
(CPU worlds: tests/templates/test_templates.py runs ag_attention; tests/golden the two loop forms.)
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import syncopy
from syncopy import device
from syncopy.errors import KernelError, LaunchError, ScheduleError
from syncopy.frontend.source import find_kernel, from_file
from syncopy.passes import names, transform
from syncopy.schedule import loads
from syncopy.templates import get

ROWS_LOOP = textwrap.dedent(
    '''\
    import triton
    import triton.language as tl


    @triton.jit
    def rows_loop(X, out, M, NC: tl.constexpr, BR: tl.constexpr):
        c = tl.arange(0, NC)
        acc = tl.zeros([BR, NC], dtype=tl.float32)
        for r0 in range(0, M, BR):
            rows = r0 + tl.arange(0, BR)
            v = tl.load(X + rows[:, None] * NC + c[None, :], mask=rows[:, None] < M, other=0.0)
            acc = acc * 0.5 + v
        tl.store(out + tl.arange(0, BR)[:, None] * NC + c[None, :], acc)
    '''
)


def _schedule(extra: str = "", tensor: str = "X", pattern: str = "all_gather"):
    return loads(f"pattern: {pattern}\ntensor: {tensor}\ndim: 0\nchunks_per_rank: 2\n{extra}")


def _fused(text: str, name: str, schedule) -> str:
    return transform(find_kernel(text, "k.py", name), schedule).code()


def test_context_block_words_match_the_device():
    assert names.CTX_WORDS == device.CTX_LEN
    assert names.ctx_of(0) == "syncopy_ctx" and names.ctx_of(2) == "(syncopy_ctx + 16)"


def test_a_list_of_tensors_validates_and_names_each():
    assert _schedule(tensor="[K, V]").tensors == ("K", "V")
    assert _schedule(tensor="K").tensors == ("K",)


@pytest.mark.parametrize("tensor, pattern, message", [
    ("[K, K]", "all_gather", "schedule:2: tensor: lists 'K' twice; name each communicated argument once"),
    ("[C, D]", "reduce_scatter", "schedule:2: tensor: a list of tensors (C, D) is supported for pattern all_gather only, not "
                                 "reduce_scatter; name one tensor"),
], ids=["twice", "producer"])
def test_a_wrong_list_is_one_line(tensor, pattern, message):
    with pytest.raises(ScheduleError) as err:
        _schedule(tensor=tensor, pattern=pattern)
    assert str(err.value) == message


def test_every_listed_tensor_waits_through_its_own_context_block():
    ks = from_file(Path(syncopy.templates.__file__).parent / "ag_attention" / "kernel.py", "attention")
    code = transform(ks, get("ag_attention").schedule()).code()
    assert "wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)" in code
    assert "chunk_range_masked(V + (rn[:, None] * H + h) * D + rd[None, :], rn[:, None] < N, V, (syncopy_ctx + 8), True)" in code
    assert "wait_chunks(syncopy_signals, (syncopy_ctx + 8), syncopy_lo, syncopy_hi)" in code
    # The online softmax only accumulates: its key/value loop runs in arrival order.
    assert "for syncopy_t in range(0, syncopy_n):" in code


def test_a_listed_tensor_the_kernel_lacks_is_refused_at_decoration():
    from syncopy.templates.ag_attention.kernel import attention

    with pytest.raises(LaunchError, match="kernel 'attention' has no argument 'W' \\(schedule key tensor\\)"):
        syncopy.overlap({"pattern": "all_gather", "tensor": ["K", "W"], "dim": 0})(attention)


@pytest.mark.parametrize("make, message", [
    (lambda k: torch.randn(k.shape[0] + 1, 2, 16), "'V' has 33 rows along dim 0 but 'K' has 32; every tensor listed in "
                                                  "`tensor:` needs the same rows per rank along `dim`"),
    (lambda k: torch.randn(16, 2, k.shape[0]).transpose(0, 2), "'V' must be contiguous; pass V.contiguous()"),
    (lambda k: 3.0, "argument 'V' (listed in `tensor:`) must be this rank's shard as a tensor, got float"),
], ids=["rows", "strided", "scalar"])
def test_a_listed_shard_that_does_not_fit_is_named(make, message):
    from syncopy.templates.ag_attention.kernel import attention

    fused = syncopy.overlap({"pattern": "all_gather", "tensor": ["K", "V"], "dim": 0})(attention)
    q = k = torch.randn(32, 2, 16)
    v = make(k)
    with pytest.raises(LaunchError) as err:
        fused.binder.bind((q, k, v, torch.empty_like(q), 32, 64, 0, 0.25), dict(H=2, D=16, BM=16, BN=16, CAUSAL=False))
    assert str(err.value) == message


def test_a_loop_that_carries_state_keeps_its_order_and_waits_per_iteration():
    code = _fused(ROWS_LOOP, "rows_loop", _schedule())
    assert "    for r0 in range(0, M, BR):" in code and "syncopy_n" not in code
    assert code.index("wait_chunks(") > code.index("for r0 in range")


def test_arrival_forced_where_iterations_carry_state_is_one_located_line():
    with pytest.raises(KernelError) as err:
        _fused(ROWS_LOOP, "rows_loop", _schedule("loop_order: arrival\n"))
    assert str(err.value) == ("k.py:9:5: loop_order: arrival, but the loop at line 9 carries 'acc' from iteration to iteration "
                              "(rescaled by 0.5, which is not the online-softmax rescale exp(max before - max after)), "
                              "so its iterations must keep their order; set loop_order: as_written "
                              "(or drop it)")


def test_as_written_forced_keeps_an_accumulating_loop_in_order():
    text = ROWS_LOOP.replace("acc = acc * 0.5 + v", "acc += v")
    assert "for syncopy_t in range(0, syncopy_n):" in _fused(text, "rows_loop", _schedule())
    code = _fused(text, "rows_loop", _schedule("loop_order: as_written\n"))
    assert "    for r0 in range(0, M, BR):" in code and "syncopy_n" not in code


def test_a_loop_order_with_no_loop_over_the_rows_is_refused():
    text = ROWS_LOOP.replace("for r0 in range(0, M, BR):", "for r0 in range(0, 1, BR):").replace(
        "rows = r0 + tl.arange(0, BR)", "rows = tl.program_id(0) * BR + tl.arange(0, BR)")
    with pytest.raises(KernelError) as err:
        _fused(text, "rows_loop", _schedule("loop_order: as_written\n"))
    assert str(err.value).endswith("loop_order: as_written is set but no loop of kernel 'rows_loop' reads other rows of 'X' "
                                   "at each iteration; drop loop_order")


def _arrival_order(rank: int, world: int, rows_per_rank: int, n: int, r0: int, step: int) -> list[int]:
    """The iterations a loop runs, in turn, under arrival order (device.arrival_iteration, interpreted)."""
    import triton
    import triton.language as tl

    @triton.jit
    def order_of(ctx, out, n, r0, r1):
        for t in range(0, n):
            tl.store(out + t, device.arrival_iteration(t, n, r0, r1, ctx))

    ctx = torch.zeros(device.CTX_LEN, dtype=torch.int64)
    ctx[device.CTX_RANK.value], ctx[device.CTX_WORLD.value], ctx[device.CTX_ROWS.value] = rank, world, rows_per_rank
    out = torch.full((n,), -1, dtype=torch.int64)
    order_of[(1,)](ctx, out, n, r0, r0 + step)
    return out.tolist()


@pytest.mark.parametrize("rank, world, rows, n, step, want", [
    (0, 2, 8, 4, 4, [0, 1, 2, 3]),
    (1, 2, 8, 4, 4, [2, 3, 0, 1]),
    (1, 3, 5, 4, 4, [2, 0, 1, 3]),          # iteration j starts at row 4j: rank 1 owns rows 5..9 (iteration 2)
    (2, 3, 6, 3, 8, [2, 1, 0]),             # blocks wider than a rank: each counts where it starts
    (0, 4, 4, 2, 8, [0, 1]),                # ranks whose rows no iteration starts in are skipped
], ids=["w2-r0", "w2-r1", "w3-ragged", "w3-wide", "w4-empty-ranks"])
def test_arrival_order_runs_own_rows_first_then_the_ring_and_is_a_permutation(rank, world, rows, n, step, want):
    got = _arrival_order(rank, world, rows, n, 0, step)
    assert got == want and sorted(got) == list(range(n))


def test_arrival_order_keeps_a_loop_whose_rows_do_not_grow():
    assert _arrival_order(1, 2, 8, 4, 12, -4) == [0, 1, 2, 3]


def test_a_list_and_a_loop_order_survive_the_yaml_round_trip():
    from syncopy.schedule.expand import to_yaml

    s = _schedule("kernel: attention\nloop_order: as_written\n", tensor="[K, V]")
    assert "tensor: [K, V]" in to_yaml(s) and "loop_order: as_written" in to_yaml(s)
    assert loads(to_yaml(s)) == s


def test_a_loop_order_where_no_loop_waits_is_refused():
    with pytest.raises(ScheduleError) as err:
        _schedule("loop_order: arrival\n", tensor="C", pattern="reduce_scatter")
    assert str(err.value) == ("schedule:5: loop_order: applies to the patterns whose kernel reads `tensor` (all_gather, "
                              "all_to_all), not reduce_scatter; drop loop_order")
    ks = from_file(Path(syncopy.templates.__file__).parent / "ag_gemm_persistent" / "kernel.py", "ag_gemm_persistent_kernel")
    with pytest.raises(KernelError, match="loop_order applies to kernels with one program per tile, but "
                                          "'ag_gemm_persistent_kernel' loops over its tiles \\(line \\d+\\); drop loop_order"):
        transform(ks, _schedule("loop_order: as_written\n", tensor="A"))


def test_the_planner_costs_attention_by_key_rows_with_k_and_v_on_the_wire():
    from syncopy.planner import make_workload

    w = make_workload("ag_attention", 4096, 512, 1024, "bf16")
    assert w.pattern == "all_gather" and w.consumer
    assert w.comm_row_bytes == 2 * 1024 * 2            # a row of K and a row of V, bf16
    assert w.tile_flops(128, 0) == 4.0 * 128 * 512 * 1024  # Q K^T and P V: 128 keys against 512 query rows


@pytest.mark.parametrize("change, problem", [
    (("tl.store(out", "tl.store(out + r0"), "assigns its variable 'r0' in its body or reads it after the loop"),
    (("        acc = acc * 0.5 + v\n", "        acc += v\n        last = v\n"), "carries 'last' from iteration to iteration"),
], ids=["loop-variable-after", "last-value-after"])
def test_arrival_forced_where_the_last_iteration_leaks_out_is_refused(change, problem):
    text = ROWS_LOOP.replace(*change)
    if "last" in change[1]:
        text = text.replace("tl.store(out + tl.arange(0, BR)[:, None] * NC + c[None, :], acc)",
                            "tl.store(out + tl.arange(0, BR)[:, None] * NC + c[None, :], acc + last)")
    assert "syncopy_n" not in _fused(text, "rows_loop", _schedule())  # unforced: kept in order
    with pytest.raises(KernelError, match=problem):
        _fused(text, "rows_loop", _schedule("loop_order: arrival\n"))
