"""Checked mode (issue 10 item 3): the read checker catches an unsound wait or count on a CPU world.

The schedule's `binding.rows` is too narrow on purpose (tests/world/read_check_workers.py): the
consumer waits for one chunk of the two each program reads, the producer counts no program against
the second chunk of each rank. Unchecked, every all-gather launch is silently wrong (the
precondition: the wait really misses a chunk that arrives late); the producer's mistake is hidden
by timing here (the early-announced chunk leaves after the link's delay, when the kernel has
stored it), which is the point of an oracle that does not depend on timing. Checked, every launch
raises SyncopyReadError naming the kernel's line, the rank, the chunk and the epoch. These tests
fail with the checker off.
"""
from __future__ import annotations

import re

import pytest

from tests.world import read_check_workers as rw
from tests.world import shared

CASES = [("all_gather", False), ("all_gather", True), ("reduce_scatter", True)]
# Jobs of the shared world of 2 ranks (tests/world/shared.py; spawning costs seconds): the three
# cases, then the gap kernels.
shared.register(__name__, 2, {f"{pattern} checked={checked}": (f"{rw.__name__}:run_case", (pattern, checked))
                              for pattern, checked in CASES})
shared.register(__name__, 2, {"gaps": (f"{rw.__name__}:run_gaps", ())})


def _world(pattern: str, checked: bool) -> list[dict]:
    return shared.results(__name__, 2, f"{pattern} checked={checked}")


def _line(pattern: str) -> int:
    from tests.kernels import read_check

    text = open(read_check.__file__).read().splitlines()
    name = "def double_rows" if pattern == "all_gather" else "def double_into"
    start = next(i for i, line in enumerate(text) if line.startswith(name))
    wanted = "tl.load(X" if pattern == "all_gather" else "tl.store(C"
    return next(i for i in range(start, len(text)) if wanted in text[i]) + 1


@pytest.mark.world
def test_unchecked_the_unsound_wait_is_silently_wrong():
    # The precondition of the checked test: the chunk the wait misses really lands after the read.
    for r in _world("all_gather", False):
        assert all(isinstance(x, float) and x > 1e-3 for x in r["results"]), r["results"]


@pytest.mark.world
def test_checked_a_read_before_its_chunk_arrived_raises_naming_line_rank_chunk_epoch():
    for rank, r in enumerate(_world("all_gather", True)):
        line = f"{r['file']}:{_line('all_gather')}: "
        for epoch, text in enumerate(r["results"], start=1):
            assert isinstance(text, str) and text.startswith(f"SyncopyReadError: {line}"), text
            # Rank r reads the other rank's chunk 1 before it landed (chunk 0 was waited for).
            assert f": rank {rank} read chunk ({1 - rank}, 1) of X before it arrived (epoch {epoch}); " in text, text
            assert "\n" not in text


@pytest.mark.world
def test_checked_a_store_after_its_chunk_was_announced_raises():
    for rank, r in enumerate(_world("reduce_scatter", True)):
        line = f"{r['file']}:{_line('reduce_scatter')}: "
        for epoch, text in enumerate(r["results"], start=1):
            assert isinstance(text, str) and text.startswith(f"SyncopyReadError: {line}"), text
            assert re.search(rf": rank {rank} wrote chunk \(\d, 1\) of C after it was announced \(epoch {epoch}\); ", text), text


# -- reads checked mode used to check at the wrong time or not at all ------------------------------
def _gaps() -> list[dict]:
    return shared.results(__name__, 2, "gaps")


def _line_of(kernel: str, text: str) -> int:
    from tests.kernels import read_check

    lines = open(read_check.__file__).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"def {kernel}("))
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


@pytest.mark.world
@pytest.mark.parametrize("kernel", rw.GAPS)
def test_unchecked_the_gap_cases_are_silently_wrong(kernel):
    # The precondition: each narrow wait really misses a chunk that lands after the read, on the
    # rank that reads the other's block remotely (rank 1 reads rank 0's block only where it reads at all).
    for rank, r in enumerate(_gaps()):
        results = r["results"][(kernel, False)]
        if rank == 0 or kernel != "first_of_block_elif":
            assert all(isinstance(x, float) and x > 1e-3 for x in results), (rank, results)


@pytest.mark.world
@pytest.mark.parametrize("kernel, read", [
    ("first_of_block_elif", "elif tl.sum(tl.load(base"),  # checked where the elif's test runs
    ("finite_rows_while", "while (i < BR)"),               # on the test that reads row 4, not only the first
    ("block_sum_imported", "s = rch.block_sum("),          # inside the imported helper, named at the call
])
def test_checked_a_gap_read_before_its_chunk_arrived_raises(kernel, read):
    for rank, r in enumerate(_gaps()):
        results = r["results"][(kernel, True)]
        if rank == 1 and kernel == "first_of_block_elif":
            # Program 0 takes the `if` (its elif test never runs, so it reads nothing unwaited), program 1
            # reads this rank's own rows: exact, no violation (checked before the `if`, this was one).
            assert results == [0.0, 0.0, 0.0], results  # exact: the sum of one element
            continue
        for epoch, text in enumerate(results, start=1):
            assert isinstance(text, str) and text.startswith(f"SyncopyReadError: {r['file']}:{_line_of(kernel, read)}: "), text
            assert f": rank {rank} read chunk ({1 - rank}, 1) of X before it arrived (epoch {epoch}); " in text, text
