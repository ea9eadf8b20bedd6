"""Checked mode (passes/read_check.py): where the checks go, what they check, how a violation reads.

Noop first: without checked mode nothing changes (the goldens in tests/golden stay byte-identical,
tests/golden/test_golden.py); the checked variant of one golden is pinned here. The device side
runs under the interpreter in one process: a read of a chunk whose flag is behind the epoch (or a
store into one already announced) leaves its line in the error slot. The world test that catches an
unsound wait with it is tests/world/test_read_check.py.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import syncopy
from syncopy import device as dev
from syncopy.cli import main
from syncopy.errors import KernelError, LaunchError, SyncopyReadError
from syncopy.frontend.source import find_kernel
from syncopy.passes import read_check, transform
from syncopy.schedule import Schedule

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "gemm_2d_launch"
CHECK = "syncopy_device.check_"
HEAD = "import triton\nimport triton.language as tl\n\n\n"  # the kernel's body starts at line 7 (without helpers)


def _fused(body: str, pattern: str = "all_gather", tensor: str = "X", helpers: str = "", **keys) -> str:
    """The checked kernel `k` of a file kern.py (its body starts at line 7 without helpers)."""
    text = HEAD + helpers + "@triton.jit\ndef k(X, Y, idx, n, BLOCK: tl.constexpr):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    t = read_check.apply(transform(find_kernel(text, "kern.py", "k"), Schedule(pattern=pattern, tensor=tensor, **keys)))
    assert t.checked
    return t.code()


def _checks(code: str) -> list[str]:
    return [line.strip() for line in code.splitlines() if CHECK in line]


def test_checked_golden_matches_and_only_adds_checks(tmp_path):
    out = tmp_path / "out.py"
    assert main(["transform", str(GOLDEN / "kernel.py"), "-s", str(GOLDEN / "schedule.yaml"), "--checked", "-o", str(out)]) == 0
    got = out.read_text()
    assert got == (GOLDEN / "expected_checked.py").read_text()
    # Without the check lines (and their comment) it is the unchecked golden, byte for byte.
    kept = [line for line in got.splitlines(True) if CHECK not in line and "# syncopy: checked:" not in line]
    assert "".join(kept) == (GOLDEN / "expected.py").read_text()
    # The check names the read's own line in the user's file (15: `pv = tl.load(P + ...)`).
    assert "pv = tl.load(P" in (GOLDEN / "kernel.py").read_text().splitlines()[14]
    assert _checks(got) == ["syncopy_device.check_read(syncopy_signals, syncopy_ctx, P + ia[:, None] * p0 + ik[None, :] * p1, True, P, 15, True)"]


def test_every_read_gets_its_own_check_from_its_own_pointers():
    code = _fused('''\
        pid = tl.program_id(0)
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        a = tl.load(X + rows, mask=rows < n, other=0.0)
        for i in range(3):
            r = tl.load(idx + i)
            b = tl.load(X + r * BLOCK + tl.arange(0, BLOCK))
            if tl.load(X + i) > 0:
                b += tl.load(X + r, mask=None)
        tl.store(Y + rows, a + b, mask=rows < n)
    ''')
    assert _checks(code) == [
        "syncopy_device.check_read(syncopy_signals, syncopy_ctx, X + rows, rows < n, X, 9, True)",
        "syncopy_device.check_read(syncopy_signals, syncopy_ctx, X + r * BLOCK + tl.arange(0, BLOCK), True, X, 12, True)",
        "syncopy_device.check_read(syncopy_signals, syncopy_ctx, X + i, True, X, 13, True)",  # an if's test: before the if
        "syncopy_device.check_read(syncopy_signals, syncopy_ctx, X + r, True, X, 14, True)",
    ]
    assert "tl.load(idx" not in " ".join(_checks(code))


def test_producer_checks_stores_and_atomics_not_reads_of_its_partial():
    code = _fused('''\
        pid = tl.program_id(0)
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        old = tl.load(Y + rows, mask=rows < n)
        tl.atomic_add(Y + rows, old, mask=rows < n)
        tl.store(Y + rows, old, rows < n)
    ''', pattern="all_reduce", tensor="Y")
    assert _checks(code) == [
        "syncopy_device.check_store(syncopy_signals, syncopy_ctx, Y + rows, rows < n, Y, 10, True)",
        "syncopy_device.check_store(syncopy_signals, syncopy_ctx, Y + rows, rows < n, Y, 11, True)",
    ]


def test_a_helper_handed_the_tensor_is_called_through_a_checked_copy_naming_its_own_lines():
    helper = ("@triton.jit\ndef block_of(p, pid, BLOCK: tl.constexpr):\n    return tl.load(p + pid * BLOCK + tl.arange(0, BLOCK))\n\n\n"
              "@triton.jit\ndef twice(q, pid, BLOCK: tl.constexpr):\n    return block_of(q, pid, BLOCK) * 2\n\n\n")
    text = HEAD + helper + "@triton.jit\ndef k(X, Y, idx, n, BLOCK: tl.constexpr):\n" + textwrap.indent(textwrap.dedent('''\
        pid = tl.program_id(0)
        v = twice(X + 0, pid, BLOCK) + tl.load(Y + pid)
        tl.store(Y + pid * BLOCK + tl.arange(0, BLOCK), v)
    '''), "    ")
    t = read_check.apply(transform(find_kernel(text, "kern.py", "k"), Schedule(pattern="all_gather", tensor="X")))
    assert [f.name.value for f in t.checked_helpers] == ["syncopy_checked_twice", "syncopy_checked_block_of"]
    code = t.stages["fused"]
    assert "v = syncopy_checked_twice(X + 0, pid, BLOCK, syncopy_signals=syncopy_signals, syncopy_ctx=syncopy_ctx, syncopy_check_base=X)" in code
    assert "return syncopy_checked_block_of(q, pid, BLOCK, syncopy_signals=syncopy_signals, syncopy_ctx=syncopy_ctx, " \
           "syncopy_check_base=syncopy_check_base) * 2" in code
    # The read is block_of's, at line 7 of kern.py, measured from the tensor's base the kernel passes down.
    assert _checks(code) == ["syncopy_device.check_read(syncopy_signals, syncopy_ctx, p + pid * BLOCK + tl.arange(0, BLOCK), True, "
                             "syncopy_check_base, 7, True)"]
    assert "def syncopy_checked_block_of(p, pid, BLOCK: tl.constexpr, syncopy_signals, syncopy_ctx, syncopy_check_base):" in code


def test_a_helper_from_another_file_is_said_to_be_unchecked():
    code = _fused('''\
        pid = tl.program_id(0)
        v = other_module.block_of(X, pid, BLOCK)
        tl.store(Y + pid * BLOCK + tl.arange(0, BLOCK), v)
    ''')
    assert ("# syncopy: checked mode cannot look inside other_module.block_of (not a @triton.jit function it can find in this "
            "file or its imports): its accesses of this tensor are not checked") in code
    assert _checks(code) == []


def test_a_block_pointer_is_refused_in_one_line(monkeypatch):
    from syncopy.frontend import infer

    monkeypatch.setattr(infer, "block_pointers_removed", lambda: False)  # a Triton before 3.9, which still runs them
    with pytest.raises(KernelError) as info:
        _fused('''\
            pid = tl.program_id(0)
            bp = tl.make_block_ptr(X, shape=(n, BLOCK), strides=(BLOCK, 1), offsets=(pid * BLOCK, 0), block_shape=(BLOCK, BLOCK), order=(1, 0))
            tl.store(Y + tl.arange(0, BLOCK), tl.sum(tl.load(bp), 1))
        ''', binding={"rows": "pid * BLOCK + tl.arange(0, BLOCK)"})
    text = str(info.value)
    assert text.startswith("kern.py:8:") and "\n" not in text
    assert ": checked mode cannot check the accesses of 'X' through tl.make_block_ptr (the rows a block pointer touches after " \
           "tl.advance are not known where it is used); use tl.make_tensor_descriptor(X, ...) with desc.load([row, col]), or " \
           "plain pointers (X + rows[:, None] * stride + cols[None, :]), or launch without checked mode" in text


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("0", False), ("", False), ("off", False)])
def test_environment_variable(monkeypatch, value, on):
    monkeypatch.setenv(read_check.ENV, value)
    assert read_check.enabled_by_env() is on


def test_environment_variable_that_says_neither_is_refused(monkeypatch):
    monkeypatch.setenv(read_check.ENV, "maybe")
    with pytest.raises(LaunchError, match=r"^SYNCOPY_CHECKED='maybe' is neither on nor off; set SYNCOPY_CHECKED=1"):
        read_check.enabled_by_env()


def test_checked_and_unchecked_kernels_live_in_different_cache_files():
    from syncopy.emit.source import cache_key
    from syncopy.frontend.source import from_file
    from syncopy.schedule import load_schedule

    t = transform(from_file(GOLDEN / "kernel.py", "tiled_product"), load_schedule(GOLDEN / "schedule.yaml"))
    assert cache_key(t) != cache_key(read_check.apply(t))


class _Plan:
    chunks_per_rank = 2

    @staticmethod
    def chunk_of_flag(flag):
        return flag


class _Ctx:
    plan, epoch = _Plan(), 3

    class schedule:
        tensor, tensors = "A", ("A",)

    def unwrap(self, word):
        return word


def test_a_violation_reads_as_one_line_naming_line_rank_chunk_epoch():
    assert read_check.violation(_Ctx(), [0, 0, 0, 0], "k.py") is None
    assert read_check.violation(_Ctx(), [1, 1, 5, 3], "k.py") is None  # a timeout: SyncopyTimeout's business
    err = read_check.violation(_Ctx(), [dev.CHECK_BASE.value + 2 * 42, 1, 4, 3], "kernel.py")
    assert isinstance(err, SyncopyReadError)
    assert str(err).startswith("kernel.py:42: rank 1 read chunk (2, 0) of A before it arrived (epoch 3); ")
    store = read_check.violation(_Ctx(), [dev.CHECK_BASE.value + 2 * 7 + 1, 0, 3, 3], "kernel.py")
    assert str(store).startswith("kernel.py:7: rank 0 wrote chunk (1, 1) of A after it was announced (epoch 3); ")
    assert "\n" not in str(err) + str(store)


@triton.jit
def _check_kernel(A, signals, ctx, lo, hi, READ: tl.constexpr):
    r = tl.arange(0, 8)
    ptrs = A + r[:, None] * 4 + tl.arange(0, 4)[None, :]
    keep = (r[:, None] >= lo) & (r[:, None] < hi)
    if READ:
        dev.check_read(signals, ctx, ptrs, keep, A, 42, True)
    else:
        dev.check_store(signals, ctx, ptrs, keep, A, 42, True)


def _run_check(flags: list[int], read: bool, rows: tuple[int, int]) -> list[int]:
    """One program checks a read (or store) of rows [lo, hi) of a 2-rank x 2-chunk tensor of 8
    rows, 4 columns; returns the error words it left."""
    a = torch.zeros(8, 4)
    ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64)
    for key, value in ((dev.CTX_EPOCH, 3), (dev.CTX_RANK, 1), (dev.CTX_ROWS, 4), (dev.CTX_CHUNKS, 2),
                       (dev.CTX_STRIDE_BYTES, 16), (dev.CTX_SIZE, 8), (dev.CTX_WORLD, 2)):
        ctx[key.value] = value
    signals = torch.zeros(dev.SIG_HEADER + 4, dtype=torch.int32)
    signals[dev.SIG_HEADER:] = torch.tensor(flags, dtype=torch.int32)
    _check_kernel[(1,)](a, signals, ctx, rows[0], rows[1], READ=read)
    return signals[: dev.SIG_HEADER].tolist()


@pytest.fixture(params=[True, False], ids=["on_host", "device_code"], autouse=False)
def both_checks(request, monkeypatch):
    """The interpreter checks on the host (device.CHECK_ON_HOST); compiled kernels run the device code."""
    monkeypatch.setattr(dev, "CHECK_ON_HOST", request.param)


@pytest.mark.usefixtures("both_checks")
def test_device_check_read_flags_the_first_chunk_behind_the_epoch():
    assert _run_check([3, 3, 2, 3], True, (0, 4)) == [0, 0, 0, 0]    # rows 0..3: chunks 0, 1, both arrived
    assert _run_check([3, 3, 2, 3], True, (2, 8)) == [dev.CHECK_BASE.value + 84, 1, 2, 3]  # chunk 2 is behind
    assert _run_check([3, 3, 2, 3], True, (6, 8)) == [0, 0, 0, 0]    # masked rows do not count
    assert _run_check([4, 3, 3, 3], True, (0, 8)) == [0, 0, 0, 0]    # a later epoch counts as arrived


@pytest.mark.usefixtures("both_checks")
def test_device_check_store_flags_a_chunk_announced_already():
    assert _run_check([2, 2, 2, 2], False, (0, 8)) == [0, 0, 0, 0]
    assert _run_check([2, 3, 2, 2], False, (0, 4)) == [dev.CHECK_BASE.value + 85, 1, 1, 3]
    assert _run_check([2, 3, 2, 2], False, (4, 8)) == [0, 0, 0, 0]


# -- issue 10 item 4: caches of the launch path ----------------------------------------------------
def test_the_cache_file_of_a_fused_kernel_depends_on_the_helpers_inference_followed():
    # Same kernel text, same schedule, a helper with other row arithmetic: other waits, so another
    # file (keyed by kernel text alone, the second would overwrite the first's file, which Triton
    # reads the source of the first kernel back from).
    from syncopy.emit.source import cache_key, standalone_module

    kernel = ("@triton.jit\ndef k(X, Y, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"
              "    v = block_of(X, pid, BLOCK)\n    tl.store(Y + pid * BLOCK + tl.arange(0, BLOCK), v)\n")
    helper = "@triton.jit\ndef block_of(p, pid, BLOCK: tl.constexpr):\n    return tl.load(p + {} + tl.arange(0, BLOCK))\n\n\n"
    made = [transform(find_kernel(HEAD + helper.format(rows) + kernel, "kern.py", "k"), Schedule(pattern="all_gather", tensor="X"))
            for rows in ("pid * BLOCK", "(pid + 1) * BLOCK")]
    assert standalone_module(made[0]) != standalone_module(made[1])
    assert cache_key(made[0]) != cache_key(made[1])


def test_a_launch_on_another_gpu_gets_its_own_context(monkeypatch):
    # A context's buffers and signal pad live on one device: keyed by the device type alone, a
    # launch with tensors on cuda:1 ran its kernel on the buffers of an earlier launch on cuda:0.
    import types

    import syncopy
    from syncopy.runtime.launch import contexts

    fused = syncopy.overlap({"pattern": "all_gather", "tensor": "A", "dim": 0, "chunks_per_rank": 1, "order": "ring"})(_check_kernel)
    monkeypatch.setattr(contexts.dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(contexts.dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(contexts.control, "group_token", lambda group: 7)
    monkeypatch.setattr(contexts.control, "live_tokens", lambda: {7})  # group 7 is alive: its contexts stay
    monkeypatch.setattr(fused.contexts, "make", lambda shard, rank, world, choice: types.SimpleNamespace(device=shard.device, nbytes=0))
    made = [fused.contexts.get(types.SimpleNamespace(shape=(4, 4), dtype=torch.float32, device=torch.device("cuda", i)), None, {})[0]
            for i in (0, 1, 0)]
    assert [m.device.index for m in made] == [0, 1, 0]
    assert made[0] is made[2]


def test_a_deferred_launch_reports_the_violation_through_the_error_ring():
    # The GPU path (errors read off the launch path, runtime/streams/error_ring.py), run by the loopback world
    # on CPU: a too-narrow binding.rows waits for the first chunk of each tile's rows only, and
    # chunk 1 of rank 1 is withheld; the read of it is named by synchronize(), not lost.
    from syncopy.runtime.worlds.loopback import LoopbackWorld
    from syncopy.templates.ag_gemm.kernel import ag_gemm_kernel

    schedule = dict(pattern="all_gather", tensor="A", dim=0, chunks_per_rank=2, order="ring",
                    binding={"rows": "pid_m * BLOCK_M + tl.arange(0, 1)"})
    fused = syncopy.overlap(schedule, timeout_s=5.0, checked=True)(ag_gemm_kernel)
    world, rows, n, k = 3, 16, 16, 16
    g = torch.Generator().manual_seed(3)
    shards, b = [torch.randn(rows, k, generator=g) for _ in range(world)], torch.randn(k, n, generator=g)
    lw = LoopbackWorld(fused, world, 0, device="cpu")
    m, a = rows * world, shards[0]
    c = torch.empty(m, n)
    lw.launch((m // 16,), (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
              dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2), shards, sync=False, withhold=frozenset({3}))
    with pytest.raises(SyncopyReadError) as info:
        lw.synchronize()
    line = next(i for i, text in enumerate(Path(ag_gemm_kernel.fn.__code__.co_filename).read_text().splitlines(), 1)
                if "a = tl.load(a_ptrs" in text)
    assert str(info.value).startswith(f"{ag_gemm_kernel.fn.__code__.co_filename}:{line}: rank 0 read chunk (1, 1) of A "
                                      "before it arrived (epoch 1); ")


# -- reads checked where they are evaluated (elif tests, every while test), imported helpers --------
def test_an_elif_test_is_checked_in_the_else_it_becomes_only_after_the_earlier_tests_were_false():
    code = _fused('''\
        pid = tl.program_id(0)
        if pid == 0:
            v = 1.0
        elif tl.load(X + pid) > 0:
            v = 2.0
        else:
            v = 3.0
        tl.store(Y + pid, v)
    ''', binding={"rows": "pid + tl.arange(0, 1)"})
    assert textwrap.dedent('''\
        if pid == 0:
            v = 1.0
        else:
            # syncopy: checked: the chunks of X this read touches have arrived
            syncopy_device.check_read(syncopy_signals, syncopy_ctx, X + pid, True, X, 10, True)
            if tl.load(X + pid) > 0:
                v = 2.0
            else:
                v = 3.0
        ''') in textwrap.dedent(code[code.index("    if pid == 0:"):])


def test_a_while_test_is_checked_before_the_loop_and_before_every_later_test():
    code = _fused('''\
        pid = tl.program_id(0)
        i = 0
        while tl.load(X + i) > 0:
            i += 1
        tl.store(Y + pid, i)
    ''', binding={"rows": "pid + tl.arange(0, 1)"})
    check = "syncopy_device.check_read(syncopy_signals, syncopy_ctx, X + i, True, X, 9, True)"
    assert textwrap.dedent(f'''\
        # syncopy: checked: the chunks of X this read touches have arrived
        {check}
        while tl.load(X + i) > 0:
            i += 1
            # syncopy: checked: the chunks of X this read touches have arrived (the next test)
            {check}
        ''') in textwrap.dedent(code[code.index("    # syncopy: checked"):])


def _imported(tmp_path, monkeypatch, kernel_body: str):
    """A kernel in kern.py calling helpers of a package `hpkg` (hpkg/rows.py) in tmp_path."""
    (tmp_path / "hpkg").mkdir()
    (tmp_path / "hpkg" / "__init__.py").write_text("")
    (tmp_path / "hpkg" / "rows.py").write_text(HEAD + textwrap.dedent('''\
        SCALE = 2.0


        @triton.jit
        def block_of(p, pid, BLOCK: tl.constexpr):
            return first(p + pid * BLOCK, BLOCK)


        @triton.jit
        def first(q, BLOCK: tl.constexpr):
            return tl.load(q + tl.arange(0, BLOCK))


        @triton.jit
        def scaled(p, pid, BLOCK: tl.constexpr):
            return tl.load(p + pid * BLOCK + tl.arange(0, BLOCK)) * SCALE
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    text = HEAD.replace("\n\n\n", "\nimport hpkg.rows as hr\nfrom hpkg.rows import block_of as bo\n\n\n") + \
        "@triton.jit\ndef k(X, Y, idx, n, BLOCK: tl.constexpr):\n" + textwrap.indent(textwrap.dedent(kernel_body), "    ")
    return read_check.apply(transform(find_kernel(text, "kern.py", "k"), Schedule(pattern="all_gather", tensor="X")))


def test_a_helper_imported_from_another_file_is_called_through_a_checked_copy_naming_the_call_line(tmp_path, monkeypatch):
    t = _imported(tmp_path, monkeypatch, '''\
        pid = tl.program_id(0)
        v = hr.block_of(X, pid, BLOCK) + bo(X, pid, BLOCK)
        tl.store(Y + pid * BLOCK + tl.arange(0, BLOCK), v)
    ''')
    # Both names reach the same function: one copy (and one of the helper it calls).
    assert [f.name.value for f in t.checked_helpers] == ["syncopy_checked_block_of", "syncopy_checked_first"]
    code = t.stages["fused"]
    assert ("v = syncopy_checked_block_of(X, pid, BLOCK, syncopy_signals=syncopy_signals, syncopy_ctx=syncopy_ctx, "
            "syncopy_check_base=X) + syncopy_checked_block_of(X, pid, BLOCK, ") in code
    # The read is in hpkg/rows.py; its check names line 10 of kern.py, where the kernel calls the helper.
    assert _checks(code) == ["syncopy_device.check_read(syncopy_signals, syncopy_ctx, q + tl.arange(0, BLOCK), True, "
                             "syncopy_check_base, 10, True)"]


def test_an_imported_helper_whose_copy_would_not_run_here_is_said_to_be_unchecked(tmp_path, monkeypatch):
    t = _imported(tmp_path, monkeypatch, '''\
        pid = tl.program_id(0)
        v = hr.scaled(X, pid, BLOCK)
        tl.store(Y + pid * BLOCK + tl.arange(0, BLOCK), v)
    ''')
    assert t.checked_helpers == []
    assert ("# syncopy: checked mode cannot look inside hr.scaled (it uses SCALE, which this file does not import as "
            "rows.py does): its accesses of this tensor are not checked") in t.code()


@pytest.mark.usefixtures("both_checks")
def test_device_check_counts_rows_of_an_inner_dimension_and_wraps_epochs():
    # DIM_OUTER=False: rows are (offset // stride) % size; and a flag past 2^31 launches still compares cyclically.
    a = torch.zeros(8, 4)
    ctx = torch.zeros(dev.CTX_LEN, dtype=torch.int64)
    for key, value in ((dev.CTX_EPOCH, -2**31 + 1), (dev.CTX_RANK, 0), (dev.CTX_ROWS, 4), (dev.CTX_CHUNKS, 2),
                       (dev.CTX_STRIDE_BYTES, 16), (dev.CTX_SIZE, 8), (dev.CTX_WORLD, 2)):
        ctx[key.value] = value
    signals = torch.zeros(dev.SIG_HEADER + 4, dtype=torch.int32)
    # Chunk 0 carries the epoch, chunk 1 a later one (across the wrap), chunk 2 an earlier one (2^31 - 1).
    signals[dev.SIG_HEADER:] = torch.tensor([-2**31 + 1, -2**31 + 2, 2**31 - 1, 5], dtype=torch.int32)
    _inner_kernel[(1,)](a, signals, ctx)
    assert signals[: dev.SIG_HEADER].tolist() == [dev.CHECK_BASE.value + 2 * 9, 0, 2, -2**31 + 1]


@triton.jit
def _inner_kernel(A, signals, ctx):
    r = tl.arange(0, 8)
    dev.check_read(signals, ctx, A + (r + 8) * 4, r >= 1, A, 9, False)  # rows (r + 8) % 8 = 1..7: chunks 0..3
