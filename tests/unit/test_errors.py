"""User-facing errors of issue 2 item 8: each is a `SyncopyError` with a location and a fix.

Schedule-file errors live in test_schedule.py, the CLI's one-line/exit-2 behaviour in
test_cli.py; here: the error classes and their rendering, kernel-file errors (unknown kernel,
unknown argument, Python syntax), and launch errors (more chunks than rows, world size).
"""
from __future__ import annotations

import textwrap

import pytest

import syncopy
from syncopy.errors import (
    InferenceError,
    KernelError,
    LaunchError,
    ScheduleError,
    ScheduleLocation,
    SourceLocation,
    SyncopyError,
    SyncopyTimeout,
)
from syncopy.frontend.source import find_kernel, from_file
from syncopy.passes import transform
from syncopy.runtime.state.plan import all_gather
from syncopy.schedule import Schedule

TWO_KERNELS = textwrap.dedent(
    '''\
    import triton
    import triton.language as tl


    def host_helper(n):
        return n


    @triton.jit
    def left_mm(P, Q, R, n, B: tl.constexpr):
        t = tl.program_id(0)
        tl.store(R + t, tl.load(P + t) * tl.load(Q + t))


    @triton.jit(do_not_specialize=["n"])
    def right_mm(P, Q, R, n, B: tl.constexpr):
        t = tl.program_id(0)
        tl.store(R + t, tl.load(P + t) + tl.load(Q + t))
    '''
)


# --- classes and rendering ---------------------------------------------------------------------

def test_hierarchy_and_exports():
    for cls in (ScheduleError, KernelError, InferenceError, LaunchError, SyncopyTimeout):
        assert issubclass(cls, SyncopyError) and getattr(syncopy, cls.__name__) is cls
    assert issubclass(InferenceError, KernelError)


@pytest.mark.parametrize(
    ("location", "rendered"),
    [
        (SourceLocation("k.py", 12, 5), "k.py:12:5"),
        (ScheduleLocation("s.yaml", "chunks_per_rank", 6), "s.yaml:6: chunks_per_rank"),
        (ScheduleLocation("s.yaml", "", 3), "s.yaml:3"),
        (ScheduleLocation("s.yaml", "tensor"), "s.yaml: tensor"),
        (ScheduleLocation(None, "order"), "schedule: order"),
    ],
)
def test_locations_render_like_compilers_do(location, rendered):
    assert str(location) == rendered
    err = KernelError("do this instead", location)
    assert str(err) == f"{rendered}: do this instead" == err.render()
    assert (err.message, err.location) == ("do this instead", location)


def test_error_without_location_is_just_the_message():
    assert str(LaunchError("fix it")) == "fix it"


def test_timeout_names_rank_chunk_epoch_and_what_to_do():
    err = SyncopyTimeout(rank=2, chunk=(1, 3), epoch=7, timeout_s=1.5, detail="rank 1 exited")
    assert str(err) == (
        "rank 2 waited 1.5s for chunk 3 of rank 1 (epoch 7) and it never arrived; rank 1 exited; "
        "check that every rank launched the kernel with the same shapes, or raise timeout_s"
    )
    assert (err.rank, err.chunk, err.epoch) == (2, (1, 3), 7)


# --- kernel file -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "why"),
    [("middle_mm", "is not in this file"), ("host_helper", "is not decorated with @triton.jit")],
)
def test_unknown_kernel_lists_the_kernels_in_the_file(name, why):
    with pytest.raises(KernelError) as info:
        find_kernel(TWO_KERNELS, "pair.py", name)
    assert str(info.value) == (
        f"pair.py:1:1: kernel '{name}' {why}; the @triton.jit kernels here are: left_mm, right_mm; "
        "set `kernel:` to one of them"
    )


def test_unknown_kernel_in_a_file_without_kernels():
    with pytest.raises(KernelError) as info:
        find_kernel("import triton\n", "empty.py", "mm")
    assert "the @triton.jit kernels here are: none" in str(info.value)


def test_no_kernel_named_and_several_in_the_file():
    with pytest.raises(KernelError) as info:
        find_kernel(TWO_KERNELS, "pair.py", None)
    assert str(info.value) == (
        "pair.py:1:1: the schedule names no kernel and the file has 2 @triton.jit functions (left_mm, right_mm); "
        "add `kernel: NAME` to the schedule"
    )


def test_jit_with_arguments_is_found():
    assert find_kernel(TWO_KERNELS, "pair.py", "right_mm").name == "right_mm"


def test_unknown_argument_points_at_the_kernel_and_lists_its_arguments():
    with pytest.raises(KernelError) as info:
        transform(find_kernel(TWO_KERNELS, "pair.py", "right_mm"), Schedule(pattern="all_gather", tensor="A"))
    assert str(info.value) == (
        "pair.py:16:1: kernel 'right_mm' has no argument 'A'; its arguments are P, Q, R, n, B; "
        "set `tensor:` to the communicated one"
    )


def test_unreadable_kernel_file(tmp_path):
    with pytest.raises(KernelError) as info:
        from_file(tmp_path / "gone.py", "k")
    assert str(info.value) == f"{tmp_path / 'gone.py'}:1:1: cannot read the kernel file: No such file or directory; check the path"


SYNTAX = [
    pytest.param("    for i in range(n)\n        pass\n", id="missing-colon"),
    pytest.param("    v = tl.load(X + pid,, mask=pid < n)\n", id="double-comma"),
    pytest.param("    v = 1 +* 2\n", id="bad-operator"),
    pytest.param("    return $\n", id="bad-character"),
]
_SYNTAX_HEAD = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(X, n, B: tl.constexpr):\n    pid = tl.program_id(0)\n"


@pytest.mark.parametrize("bad", SYNTAX)
def test_python_syntax_error_is_a_located_kernel_error(bad, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(_SYNTAX_HEAD + bad)
    with pytest.raises(KernelError) as info:
        from_file(path, "k")
    err = info.value
    assert err.location.file == str(path)
    assert "Python syntax error" in err.message and err.message.endswith("; fix the kernel file")
    assert "\n" not in str(err)


@pytest.mark.parametrize("bad", SYNTAX)
def test_python_syntax_error_points_where_python_does(bad, tmp_path):
    path = tmp_path / "broken.py"
    text = _SYNTAX_HEAD + bad
    path.write_text(text)
    with pytest.raises(SyntaxError) as py:
        compile(text, str(path), "exec")
    with pytest.raises(KernelError) as info:
        from_file(path, "k")
    assert (info.value.location.line, info.value.location.col) == (py.value.lineno, py.value.offset)


# --- launch ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("chunks", "rows"), [(2, 1), (5, 4), (4092, 4091)])
def test_more_chunks_than_shard_rows(chunks, rows):
    s = Schedule(pattern="all_gather", tensor="Lhs", dim=1, chunks_per_rank=chunks)
    with pytest.raises(LaunchError) as info:
        all_gather(s, 0, 2, rows)
    assert str(info.value) == (
        f"chunks_per_rank is {chunks} but each shard of 'Lhs' has only {rows} rows along dim 1; "
        f"use chunks_per_rank <= {rows}"
    )


@pytest.mark.parametrize("rows", [4091, 4, 3])
def test_ragged_shards_are_not_errors(rows):
    s = Schedule(pattern="all_gather", tensor="Lhs", chunks_per_rank=3)
    plans = [all_gather(s, r, 3, rows) for r in range(3)]
    assert all(len(p.recvs()) == 6 for p in plans)


def test_explicit_order_for_another_world_size():
    s = Schedule(pattern="all_gather", tensor="Lhs", order=[2, 1])
    assert len(all_gather(s, 0, 3, 8).recvs()) == 2
    with pytest.raises(LaunchError) as info:
        all_gather(s, 0, 4, 8)
    assert str(info.value) == (
        "the explicit order [2, 1] lists 2 peer offsets but the world has 4 ranks; list each of the offsets 1..3 once"
    )


def test_errors_do_not_leak_internal_file_names():
    messages = []
    for call in (
        lambda: find_kernel(TWO_KERNELS, "pair.py", "nope"),
        lambda: all_gather(Schedule(pattern="all_gather", tensor="A", chunks_per_rank=9), 0, 2, 3),
        lambda: transform(find_kernel(TWO_KERNELS, "pair.py", "left_mm"), Schedule(pattern="all_gather", tensor="Z")),
    ):
        with pytest.raises(SyncopyError) as info:
            call()
        messages.append(str(info.value))
    assert not any("syncopy/" in m or "Traceback" in m for m in messages)
