"""Golden tests: `syncopy transform` on whole kernel files, compared byte for byte.

Each folder `tests/golden/<case>/` holds

    kernel.py       a user's file (our own kernels, written in the styles users write)
    schedule.yaml   the chunk schedule naming the kernel to transform
    expected.py     what `syncopy transform kernel.py -s schedule.yaml -o OUT` must write

To regenerate every expected.py after an intended change to the passes, run

    SYNCOPY_REGEN=1 pytest tests/golden

and review the diff (`git diff tests/golden`) before committing it: the expected files are the
spec of what users get. Besides the byte comparison, every output must parse, define a Triton JIT
function, and leave every byte outside the named kernel as it was (one import line added).
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import re
from pathlib import Path

import pytest

from syncopy.cli import main
from syncopy.schedule import load_schedule
from tests.golden import golden_worlds
from tests.golden.spans import DEVICE_IMPORT, assert_only_kernel_changed, inside, outside
from tests.world import shared

HERE = Path(__file__).parent
REGEN = os.environ.get("SYNCOPY_REGEN") == "1"
CASES = sorted(p.name for p in HERE.iterdir() if (p / "kernel.py").is_file())
PERSISTENT = [c for c in CASES if c.startswith("persistent_") or c == "waits_persistent_index"]
# Kernels whose tiles keep their launch order (issue 10): the first read waits inside its loop, its
# rows depend on loaded data, or a helper asks for the program id; the source says which.
KEEP_ORDER = {"waits_data_rows": "tiles keep their launch order: the rows of its first read depend on loaded data",
              "waits_helper_pid": "tiles keep their launch order: the helper _my_rows calls tl.program_id itself",
              "waits_nested_step": "no bound before the loop (p changes inside the loop",
              "waits_wrapped_rows": "no bound before the loop (the rows read are not affine in the loop counter)",
              "waits_persistent_index": "tiles keep their order: the rows of its first read depend on loaded data",
              "loop_arrival_colsum": "no bound before the loop (each iteration reads other rows of 'X', so each waits",
              "loop_as_written_gemm": "no bound before the loop (each iteration reads other rows of 'B', so each waits",
              "loop_seq_fa2_dim1": "no bound before the loop (each iteration reads other rows of 'K', so each waits",
              "loop_seq_arrival_dim1": "no bound before the loop (each iteration reads other rows of 'K', so each waits",
              "loop_seq_scan_stepped": "no bound before the loop (each iteration reads other rows of 'states_ptr', so each",
              "loop_seq_recurrence_stepped": "no bound before the loop (each iteration reads other rows of 'k', so each waits"}
# Kernels whose loop over the communicated rows runs in chunk-arrival order (issue 13 item 3): its
# `for` header becomes a loop over arrival slots, which reassigns the user's loop variable first.
ARRIVAL = {"loop_arrival_colsum": ("for r0 in range(0, M, BR):", "r0 = 0 + syncopy_device.arrival_iteration("),
           "loop_seq_arrival_dim1": ("for start in range(0, seqlen_k, BN):", "start = 0 + syncopy_device.arrival_iteration(")}
# Kernels whose loop over the communicated rows keeps its written order because its reorder is not
# proven (issue 30 part A, one per numbered case): the comment before the loop says why.
WRITTEN = {"loop_written_decayed_sum": "it carries 'acc' from iteration to iteration (rescaled by 0.5, which is not the "
                                       "online-softmax rescale",
           "loop_written_max_reader": "it carries 'count' from iteration to iteration (its update reads 'top'",
           "loop_written_helper_store": "it calls the helper _save_row, which stores",
           "loop_written_unguarded_softmax": "(rescaled by exp(max before - max after) without the first-block guard",
           # Issue 31 item 6: loops over a sequence gathered along dim 1, FA2's and the scans'.
           "loop_seq_fa2_dim1": "it assigns its variable 'start_n' in its body",
           "loop_seq_scan_stepped": "it calls tl.store (a side effect whose order may matter)",
           "loop_seq_recurrence_stepped": "it calls tl.store (a side effect whose order may matter)"}
# Goldens that list several communicated tensors (issue 30 B): their kernels are tests/kernels/listed.py's,
# which tests/world/test_listed_tensors.py launches with every order of the list on worlds of 2 and 3.
# Listed goldens of tests/kernels/listed.py (tests/world/test_listed_tensors.py runs them); other cases
# that list tensors (the sequence loops, tests/kernels/sequence_loops.py) are launched by their own world tests.
LISTED = [c for c in CASES if len(load_schedule(HERE / c / "schedule.yaml").tensors) > 1 and c.startswith("listed_")]
# Goldens gathered along dim 1 (issue 31 item 6): their kernels are tests/kernels/sequence_loops.py's,
# which tests/world/test_sequence_loops.py launches on worlds of 2 and 3 (the recipes gather along dim 0).
ALONG = [c for c in CASES if load_schedule(HERE / c / "schedule.yaml").dim != 0]
# The listed tensor each reads first, whatever its place in the list: its wait starts the tile and reads the table.
READ_FIRST = {"listed_dequant_scale_first": "S", "listed_layernorm_residual": "X", "listed_swiglu_reversed": "A",
              "listed_three_tensors": "ROWSCALE"}
# Producer kernels whose stores' rows are not bounded before their statement (issue 30 part C): the
# comment before the statement says why, and the program announces the range the probe took at its
# stores, read from the table, after its last store.
AT_STORE = {"producer_store_wrapped_rows": "(the rows written are not affine in the loop counter)",
            "producer_store_loaded_rows": "(the rows written are not affine in the loop counter)",
            "producer_store_while_rows": "(row changes inside the loop in a way inference cannot follow)"}
EXTRA_PARAMS = ["syncopy_ctx", "syncopy_signals", "syncopy_order", "syncopy_trace", "SYNCOPY_TRACE", "SYNCOPY_TABLE"]


def _kernel_name(case: str) -> str:
    return load_schedule(HERE / case / "schedule.yaml").kernel


def _transform(case: str, tmp_path: Path) -> str:
    out = tmp_path / "out.py"
    rc = main(["transform", str(HERE / case / "kernel.py"), "--schedule", str(HERE / case / "schedule.yaml"), "-o", str(out)])
    assert rc == 0
    return out.read_text()


def _expected(case: str) -> str:
    return (HERE / case / "expected.py").read_text()


def _uses_descriptors(case: str) -> bool:
    return "make_tensor_descriptor" in inside((HERE / case / "kernel.py").read_text(), _kernel_name(case))


def _func(text: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_every_case_is_present():
    assert CASES == sorted([
        "defaulted_constexpr",
        "docstring_comments",
        "gemm_2d_launch",
        "grouped_gemm_1d",
        "listed_dequant_scale_first",
        "listed_layernorm_residual",
        "listed_swiglu_reversed",
        "listed_three_tensors",
        "loop_arrival_colsum",
        "loop_as_written_gemm",
        "loop_seq_arrival_dim1",
        "loop_seq_fa2_dim1",
        "loop_seq_recurrence_stepped",
        "loop_seq_scan_stepped",
        "loop_written_decayed_sum",
        "loop_written_helper_store",
        "loop_written_max_reader",
        "loop_written_unguarded_softmax",
        "masked_loads",
        "persistent_desc_helper",
        "persistent_flat_desc",
        "persistent_flat_pointers",
        "persistent_tutorial_two_counters",
        "persistent_while_pointers",
        "producer_early_return",
        "producer_desc_store",
        "producer_gemm_rs",
        "producer_rownorm_allreduce",
        "producer_rows_from_data",
        "producer_store_loaded_rows",
        "producer_store_mixed_corner",
        "producer_store_while_rows",
        "producer_store_wrapped_rows",
        "program_id_axis_kw",
        "ptr_in_loop",
        "rownorm_reassign",
        "two_kernels",
        "waits_data_rows",
        "waits_helper_pid",
        "waits_helper_rows",
        "waits_masked_last",
        "waits_nested_step",
        "waits_persistent_index",
        "waits_wrapped_rows",
    ])
    for case in CASES:
        assert (HERE / case / "schedule.yaml").is_file()
        assert REGEN or (HERE / case / "expected.py").is_file(), f"{case}: run SYNCOPY_REGEN=1 pytest tests/golden"


@pytest.mark.parametrize("case", CASES)
def test_output_matches_expected(case, tmp_path):
    got = _transform(case, tmp_path)
    if REGEN:
        # Comparing the file just written with itself would pass whatever the passes do.
        (HERE / case / "expected.py").write_text(got)
        pytest.skip(f"SYNCOPY_REGEN=1 wrote tests/golden/{case}/expected.py: nothing was compared; "
                    "review `git diff tests/golden`, then run again without SYNCOPY_REGEN")
    assert got == _expected(case)


def test_regen_writes_the_expected_file_and_skips_the_comparison(tmp_path, monkeypatch):
    import shutil
    import sys

    module = sys.modules[__name__]
    case = "two_kernels"
    shutil.copytree(HERE / case, tmp_path / "golden" / case)
    (tmp_path / "golden" / case / "expected.py").write_text("stale\n")
    monkeypatch.setattr(module, "HERE", tmp_path / "golden")
    monkeypatch.setattr(module, "REGEN", True)
    with pytest.raises(pytest.skip.Exception, match="nothing was compared"):
        test_output_matches_expected(case, tmp_path)
    assert (tmp_path / "golden" / case / "expected.py").read_text() == (Path(__file__).parent / case / "expected.py").read_text()


@pytest.mark.parametrize("case", CASES)
def test_input_file_is_never_modified(case, tmp_path):
    path = HERE / case / "kernel.py"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    _transform(case, tmp_path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("case", CASES)
def test_expected_parses_and_defines_a_jit_kernel(case):
    text = _expected(case)
    compile(text, str(HERE / case / "expected.py"), "exec")
    spec = importlib.util.spec_from_file_location(f"golden_{case}", HERE / case / "expected.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fused = getattr(module, _kernel_name(case))
    assert hasattr(fused, "fn"), "the fused kernel must still be a @triton.jit function"
    params = [a.arg for a in _func(text, _kernel_name(case)).args.args]
    # Kernels that use tensor descriptors take one more flag: the target's async proxy (TMA).
    flag = ["SYNCOPY_ASYNC_PROXY"] if _uses_descriptors(case) else []
    assert [p for p in params if p.lower().startswith("syncopy_")] == EXTRA_PARAMS + flag


@pytest.mark.parametrize("case", CASES)
def test_only_the_kernel_changes(case):
    assert_only_kernel_changed((HERE / case / "kernel.py").read_text(), _expected(case), _kernel_name(case))


def _header_lines(lines: list[str]) -> int:
    """Number of lines taken by the decorators and the `def ...:` header."""
    for i in range(len(lines)):
        try:
            ast.parse("\n".join(lines[: i + 1]) + "\n    pass\n")
            return i + 1
        except SyntaxError:
            continue
    raise AssertionError("no function header found")


@pytest.mark.parametrize("case", CASES)
def test_every_user_line_of_the_kernel_survives(case):
    # The passes add lines and rewrite `tl.program_id(...)` and the signature; every other line of
    # the user's kernel, comments included, is still there and in the same order.
    name = _kernel_name(case)
    before = inside((HERE / case / "kernel.py").read_text(), name).splitlines()
    after = inside(_expected(case), name).splitlines()
    body = before[_header_lines(before) :]
    body = [line for line in body if case not in ARRIVAL or line.strip() != ARRIVAL[case][0]]
    if case not in PERSISTENT and case not in KEEP_ORDER:  # persistent loops remap tile ids, not program ids
        body = [re.sub(r"tl\.program_id\((?:axis=)?(\d)\)", r"syncopy_pid\1", line) for line in body]
    it = iter(after)
    missing = [line for line in body if not any(line == other for other in it)]
    assert not missing, f"lost or reordered: {missing}"


def test_loops_over_the_gathered_rows_wait_per_iteration_in_either_order():
    # Arrival order (the loop only accumulates): a loop over arrival slots whose first statement
    # sets the user's loop variable, then the user's body with its own wait; as written: the user's
    # loop header unchanged, a wait inside it before each read.
    header, first = ARRIVAL["loop_arrival_colsum"]
    lines = [line.strip() for line in inside(_expected("loop_arrival_colsum"), "column_stats").splitlines()]
    at = lines.index("for syncopy_t in range(0, syncopy_n):")
    assert header not in lines and lines[at + 1].startswith(first)
    assert lines.index("syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)") > at
    lines = [line.strip() for line in inside(_expected("loop_as_written_gemm"), "mm_k_gathered").splitlines()]
    at = lines.index("for k in range(0, K, BK):")
    assert "syncopy_n" not in " ".join(lines)
    assert lines.index("syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)") > at


@pytest.mark.parametrize("case", sorted(WRITTEN))
def test_a_loop_kept_as_written_says_why_and_waits_per_iteration(case):
    lines = [line.strip() for line in inside(_expected(case), _kernel_name(case)).splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("for ") and " in range(" in line)
    note = "# syncopy: this loop keeps its written order (each iteration waits for its own chunks): "
    assert lines[at - 1].startswith(note) and WRITTEN[case] in lines[at - 1]
    assert lines[at] in inside((HERE / case / "kernel.py").read_text(), _kernel_name(case))  # the user's header
    assert "syncopy_n" not in " ".join(lines) and lines.index(
        "syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)") > at


def test_two_kernels_other_kernels_are_byte_identical():
    before = (HERE / "two_kernels" / "kernel.py").read_text()
    after = _expected("two_kernels")
    for name in ("first_kernel", "third_kernel", "launch_helper"):
        assert inside(after, name) == inside(before, name)
    assert after.endswith("# trailing comment at the end of the file\n")
    assert "@triton.jit\ndef second_kernel(u, v, n, BLOCK: tl.constexpr, syncopy_ctx," in after


def test_docstring_stays_first_and_comments_survive():
    text = _expected("docstring_comments")
    func = _func(text, "gather_sum")
    assert ast.get_docstring(func).startswith("Sum each block of rows")
    comments = [line.strip() for line in (HERE / "docstring_comments" / "kernel.py").read_text().splitlines() if "#" in line]
    for comment in comments:
        assert comment.split("#", 1)[1] in text
    # The wait goes after the user's comments that introduce the read, right before the read.
    lines = text.splitlines()
    read = next(i for i, line in enumerate(lines) if "vals = tl.load(table" in line)
    assert lines[read - 1].strip().startswith("syncopy_device.trace_tile_start(")
    assert lines.index("    # second comment line") < read - 3


def test_defaulted_constexpr_keeps_default_last():
    func = _func(_expected("defaulted_constexpr"), "act_rows")
    names = [a.arg for a in func.args.args]
    assert names[-1] == "USE_RELU" and len(func.args.defaults) == 1
    assert names.index("SYNCOPY_TRACE") == names.index("USE_RELU") - 2
    assert names.index("SYNCOPY_TABLE") == names.index("USE_RELU") - 1
    assert names[:6] == ["inp", "outp", "count", "stride_in", "stride_out", "BLOCK"]


def test_program_id_keyword_form_is_remapped_by_axis():
    body = inside(_expected("program_id_axis_kw"), "col_major_grid")
    assert "tl.program_id" not in body
    assert "    col_tile = syncopy_pid0\n" in body and "    row_tile = syncopy_pid1\n" in body


def test_reassigned_argument_gets_a_base_copy_first():
    func = _func(_expected("rownorm_reassign"), "layer_norm_rows")
    first = func.body[0]
    assert ast.unparse(first) == "syncopy_base = Inp"
    # The wait measures rows against the copy, since Inp itself has moved to the row by then.
    assert "syncopy_device.chunk_range_affine(Inp + " in ast.unparse(func) and ", syncopy_base, syncopy_ctx, True)" in ast.unparse(func)


@pytest.mark.parametrize("case", [c for c in CASES if c not in PERSISTENT])
def test_first_wait_reads_the_probe_table_when_tiles_are_remapped(case):
    # A kernel that asks for its program id gets its tiles reordered and a probe; its first wait
    # (only) reads the probed range from the table when SYNCOPY_TABLE is set.
    # Producer kernels (reduce_scatter, all_reduce) read their write range the same way before the
    # first store, and announce it after the last.
    name = _kernel_name(case)
    schedule = load_schedule(HERE / case / "schedule.yaml")
    producer = schedule.pattern in ("reduce_scatter", "all_reduce")
    remapped = "tl.program_id" in inside((HERE / case / "kernel.py").read_text(), name) and case not in KEEP_ORDER
    body = inside(_expected(case), name)
    if case in AT_STORE:  # its range is read from the table before the announcement (the test above)
        assert "slot_entry(" in body and "tl.program_id(" not in body.replace("tl.num_programs(", "")
        return
    assert (case in KEEP_ORDER) == ("slot_entry(" not in body and "tl.program_id" in body)
    assert body.count("if SYNCOPY_TABLE:") == int(remapped)
    if remapped:
        lines = body.splitlines()
        at = next(i for i, line in enumerate(lines) if line == "    if SYNCOPY_TABLE:")
        what = "writes" if producer else "reads"
        # (A producer's comment may go on: "; its write addresses depend on loaded data: ...".)
        tensor = READ_FIRST.get(case, schedule.tensor)
        assert lines[at - 1].startswith(f"    # syncopy: {'the' if producer else 'wait for the'} chunks of {tensor} this program {what}")
        assert lines[at + 1] == "        syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi"
        assert lines[at + 2] == "    else:"
        use = "syncopy_device.notify_chunks(" if producer else "syncopy_device.wait_chunks("
        after = next(i for i, line in enumerate(lines) if use in line and i > at)  # past counts before early returns
        assert at + 3 < after
        computed = []
        for line in lines[at + 3 : after]:
            if not line.startswith("        "):
                break
            computed.append(line)
        assert computed and all(line.startswith("        syncopy_") for line in computed)
        if producer:
            assert "wait_chunks" not in body
            assert lines[after] == "    syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)"
            assert lines[after - 1] == "    # syncopy: announce the finished chunks"


@pytest.mark.parametrize("case", CASES)
def test_exactly_one_import_is_added(case):
    text = _expected(case)
    assert text.count(DEVICE_IMPORT) == 1
    head, _ = outside(text, _kernel_name(case))
    assert DEVICE_IMPORT in head


@pytest.mark.parametrize("case", sorted(KEEP_ORDER))
def test_a_kernel_that_keeps_its_order_says_why(case):
    body = inside(_expected(case), _kernel_name(case))
    assert f"# syncopy: {KEEP_ORDER[case]}" in body
    assert "slot_entry(" not in body and "tile_of(" not in body and "if SYNCOPY_TABLE:" not in body


def test_fallback_waits_sit_right_before_their_reads():
    # Issue 10 cases 3 and 4: each read waits for the chunks of its own pointers, inside the loop.
    for case, read in (("waits_nested_step", "acc += tl.load(p + c)"), ("waits_wrapped_rows", "v = tl.load(X + rows")):
        lines = inside(_expected(case), _kernel_name(case)).splitlines()
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(read))
        assert lines[at - 1].strip() == "syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)"
        assert len(lines[at - 1]) - len(lines[at - 1].lstrip()) == len(lines[at]) - len(lines[at].lstrip())


def test_a_loop_dependent_mask_counts_each_element_at_the_iterations_that_keep_it():
    # Issue 10 case 1: the first and last iterations' pointers and the mask term `rows - M < 0`.
    body = inside(_expected("waits_masked_last"), "masked_quad")
    assert body.count("syncopy_device.chunk_range_affine(") == 1
    assert "(((pid * 4 + (4 - 1)) * BM + tl.arange(0, BM)) - M)[:, None], 4 - 1, X, syncopy_ctx, True)" in body


def test_a_helper_is_followed_or_waits_for_every_chunk():
    body = inside(_expected("waits_helper_rows"), "two_helpers")
    assert "chunk_range_masked(X + (pid * BR + tl.arange(0, BR))[:, None] * NC" in body
    assert body.index("syncopy_device.all_chunks(syncopy_ctx)") < body.index("w = _wrapped_block(")


# --- persistent loops: the wait is at the start of each tile, inside the loop -------------------

_TILE_ID = {"persistent_desc_helper": "job", "persistent_flat_desc": "tile", "persistent_tutorial_two_counters": "tile_id",
            "persistent_while_pointers": "cur"}


@pytest.mark.parametrize("case", sorted(_TILE_ID))
def test_persistent_wait_is_inside_the_loop_and_reads_the_table_by_tile_id(case):
    name = _kernel_name(case)
    lines = inside(_expected(case), name).splitlines()
    tile = _TILE_ID[case]
    loop = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("for ", "while ")) and "syncopy" not in line)
    depth = len(lines[loop]) - len(lines[loop].lstrip())
    at = next(i for i, line in enumerate(lines) if line.strip() == "if SYNCOPY_TABLE:")
    assert sum(line.strip() == "if SYNCOPY_TABLE:" for line in lines) == 1
    assert at > loop and len(lines[at]) - len(lines[at].lstrip()) > depth
    assert lines[at + 1].strip() == f"syncopy_lo, syncopy_hi = syncopy_device.tile_range(syncopy_order, {tile}, syncopy_ctx)"
    wait = next(i for i, line in enumerate(lines) if "syncopy_device.wait_chunks(" in line)
    if _uses_descriptors(case):
        # Reads through tensor descriptors (TMA on sm_90): the async proxy is fenced right after the wait.
        assert lines[wait + 1].strip() == "syncopy_device.async_proxy_acquire(SYNCOPY_ASYNC_PROXY)"
        wait += 1
    assert lines[wait + 1].strip() == (f"syncopy_device.trace_tile_start_at(syncopy_signals, syncopy_trace, syncopy_ctx, "
                                       f"syncopy_order, {tile}, SYNCOPY_TRACE)")
    body = "\n".join(lines)
    # Tiles are remapped through the tile id; program ids are left alone.
    assert "syncopy_device.slot_entry(" not in body and "tl.program_id(" in body
    assert f"{tile} = syncopy_device.tile_of(syncopy_order, {tile})" in body or f"{tile} = syncopy_device.advance_tile(" in body


def test_persistent_second_counter_follows_the_remapped_tile():
    body = inside(_expected("persistent_tutorial_two_counters"), "matmul_kernel_descriptor_persistent")
    assert ("        tile_id_c += NUM_SMS\n"
            "        tile_id_c = syncopy_device.advance_tile(syncopy_order, tile_id_c, NUM_SMS)\n") in body
    assert "    tile_id_c = syncopy_device.tile_of(syncopy_order, tile_id_c)\n    for tile_id in tl.range(" in body


def test_persistent_descriptor_rows_come_from_the_row_coordinate():
    body = inside(_expected("persistent_desc_helper"), "gemm_persistent")
    assert "syncopy_device.desc_chunk_range(lhs, row0, TR, R, D, (D - 1), lhs, syncopy_ctx)" in body
    # The helper call stays the user's: the wait comes after it, inside the loop.
    assert body.index("rb, cb = block_of(job, n_r, n_c, SWZ)") < body.index("syncopy_device.wait_chunks(")


def test_persistent_flat_loop_with_pointer_reads_waits_before_each_read():
    lines = inside(_expected("persistent_flat_pointers"), "matmul_kernel_persistent").splitlines()
    read = next(i for i, line in enumerate(lines) if line.strip().startswith("a = tl.load(a_ptrs"))
    assert lines[read - 1].strip() == "syncopy_device.wait_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)"
    assert not any("if SYNCOPY_TABLE:" in line or "trace_tile_start" in line or "tile_of(" in line for line in lines)


# --- the expected kernels run: every all-gather golden on a CPU world, against its meaning --------
# (The producer goldens run too: their kernel on zeros or on C, then a reduce over the ranks.)

@pytest.mark.world
def test_recipes_cover_every_all_gather_golden():
    from tests.golden.golden_worlds import RECIPES

    gather = [c for c in CASES if load_schedule(HERE / c / "schedule.yaml").pattern == "all_gather" and c not in LISTED + ALONG]
    assert sorted(RECIPES) == gather
    from tests.golden.golden_worlds import PRODUCER_RECIPES

    producers = [c for c in CASES if load_schedule(HERE / c / "schedule.yaml").pattern in ("reduce_scatter", "all_reduce")]
    assert sorted(PRODUCER_RECIPES) == producers


# Both expected-kernel tests are jobs of the shared world of 2 (tests/world/shared.py: a spawn of their
# own cost seconds); their operators are unchecked (checked=False: expected.py is the unchecked form).
shared.register(__name__, 2, {"consumers": (f"{golden_worlds.__name__}:run_expected_kernels", (sorted(golden_worlds.RECIPES),)),
                              "producers": (f"{golden_worlds.__name__}:run_expected_producers",
                                            (sorted(golden_worlds.PRODUCER_RECIPES),))})


@pytest.mark.world
def test_expected_kernels_equal_all_gather_then_the_users_kernel():
    """Each expected kernel (the one the runtime runs, checked against expected.py) on a world of 2
    with the tests' slow reordering link and poisoned receive buffers, two launches each, equals
    all_gather_into_tensor followed by the user's own kernel.py on the gathered tensor."""
    from tests.golden.golden_worlds import RECIPES

    results = shared.results(__name__, 2, "consumers")
    for rank, r in enumerate(results):
        assert len(r) == golden_worlds.LAUNCHES * len(RECIPES), r
        bad = [f"{label}: {problem or f'error {err:.3g}'}" for label, err, problem in r if problem or not err <= 1e-4]
        assert not bad, f"rank {rank}:\n" + "\n".join(bad)


@pytest.mark.world
def test_expected_producer_kernels_equal_the_users_kernel_then_a_reduce():
    """Each producer golden's expected kernel on a world of 2, two launches with new data each,
    equals the user's kernel.py on zeros (reduce_scatter) or on the rank's C (all_reduce), then an
    all_reduce over the ranks (this rank's rows for reduce_scatter)."""
    from tests.golden.golden_worlds import PRODUCER_RECIPES

    results = shared.results(__name__, 2, "producers")
    for rank, r in enumerate(results):
        assert len(r) == golden_worlds.LAUNCHES * len(PRODUCER_RECIPES), r
        bad = [f"{label}: {problem or f'error {err:.3g}'}" for label, err, problem in r if problem or not err <= 1e-4]
        assert not bad, f"rank {rank}:\n" + "\n".join(bad)


@pytest.mark.parametrize("case", LISTED)
def test_listed_goldens_are_the_kernels_the_listed_worlds_run(case, tmp_path):
    """A listed golden's kernel is tests/kernels/listed.py's, and its expected.py is what the decorator
    runs (tests/world/test_listed_tensors.py launches it with every order of its list)."""
    import syncopy
    from tests.kernels import listed

    name = _kernel_name(case)
    assert inside((HERE / case / "kernel.py").read_text(), name) == inside(Path(listed.__file__).read_text(), name)
    fused = syncopy.overlap(load_schedule(HERE / case / "schedule.yaml"), checked=False)(getattr(listed, name))
    assert inside(fused.source, name) == inside(_expected(case), name)


@pytest.mark.parametrize("case", sorted(AT_STORE))
def test_a_store_kept_as_written_says_why_and_announces_what_the_probe_took(case):
    text = inside(_expected(case), _kernel_name(case))
    assert "# syncopy: the rows of Out stored at line" in text and AT_STORE[case] in text, text
    assert "taken at the store, announced after the last store" in text
    tail = ["syncopy_lo, syncopy_hi = syncopy_table_lo, syncopy_table_hi",
            "# syncopy: announce the finished chunks",
            "syncopy_device.notify_chunks(syncopy_signals, syncopy_ctx, syncopy_lo, syncopy_hi)"]
    assert [line.strip() for line in text.splitlines()[-3:]] == tail
    assert "if SYNCOPY_TABLE" not in text  # nothing bounded before the loop


def test_a_store_loop_nest_is_bounded_at_every_corner():
    # rows = band + (HALVES - 1 - h) * PARTS * BLOCK_M + p * BLOCK_M: the extremes sit at the mixed
    # corners (h last, p first) and (h first, p last), so all four corners are counted.
    text = inside(_expected("producer_store_mixed_corner"), "reversed_halves")
    assert text.count("syncopy_device.chunk_range_clamped(") == 4
    assert "a mask that changes with the loop is left out of this bound" in text
