"""`syncopy run`'s soak and fault options, what needs no ranks: --inject syntax (one line naming the
option, exit 2, before any rank starts), the shapes a soak draws, the summary of per-rank records,
the corrupt fault, and chunk checksums."""
from __future__ import annotations

import random

import pytest
import torch

from syncopy.cli import main
from syncopy.run import RunResult, _draw_shape, first_failure, parse_inject, summarize
from syncopy.runtime.transport.backends import checksum
from syncopy.runtime.transport.link import Faults
from tests.unit.test_cli_args import _fails, no_ranks  # noqa: F401  (the fixture)

INJECT_HELP = "KIND=SRC:CHUNK, KIND one of drop, kill, corrupt, or delay=SRC:CHUNK:MS; e.g. --inject drop=0:1,delay=1:0:500"


def test_inject_parses_every_fault_kind():
    f = parse_inject("drop=0:1,drop=2:0,delay=1:0:250,kill=3:1,corrupt=1:1")
    assert f == Faults.of(drop=[(0, 1), (2, 0)], delay={(1, 0): 0.25}, kill=(3, 1), corrupt=[(1, 1)])
    assert f.extra_delay(1, 0) == 0.25 and f.kill == (3, 1) and (1, 1) in f.corrupt


@pytest.mark.parametrize(("text", "item"), [
    pytest.param("drop=0", "drop=0", id="missing-chunk"),
    pytest.param("delay=0:1", "delay=0:1", id="delay-without-ms"),
    pytest.param("kill=0:1:5", "kill=0:1:5", id="kill-with-ms"),
    pytest.param("flip=0:1", "flip=0:1", id="unknown-kind"),
    pytest.param("drop=a:1", "drop=a:1", id="not-a-number"),
    pytest.param("drop=-1:1", "drop=-1:1", id="negative"),
    pytest.param("drop=0:1,", "", id="trailing-comma"),
])
def test_bad_inject_is_one_line_naming_the_option_before_any_rank_starts(no_ranks, capsys, text, item):  # noqa: F811
    assert _fails(["run", "ag_gemm", "--inject", text], capsys) == f"--inject {text}: {item!r} is not {INJECT_HELP}"


def test_inject_of_a_rank_outside_the_world_two_kills_and_bad_numbers_are_refused(no_ranks, capsys, tmp_path,  # noqa: F811
                                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _fails(["run", "ag_gemm", "--world", "2", "--inject", "corrupt=2:0"], capsys) == (
        "--inject: rank 2 is not in a world of 2 ranks; name a rank 0..1")
    assert _fails(["run", "ag_gemm", "--inject", "kill=0:0,kill=1:0"], capsys) == (
        "--inject kill=0:0,kill=1:0: one kill per run (a killed rank sends nothing more); keep one kill=SRC:CHUNK")
    assert _fails(["run", "ag_gemm", "--timeout", "0"], capsys) == "--timeout 0: give a positive number of seconds, e.g. --timeout 10"
    assert _fails(["run", "ag_gemm", "--json", "no-such-dir/x.json"], capsys) == (
        "--json no-such-dir/x.json: the directory 'no-such-dir' does not exist; create it first or choose another path")
    assert _fails(["run", "ag_gemm", "--slow-link", "-1"], capsys) == (
        "--slow-link -1: give a chunk's cost in milliseconds, 0 or more, e.g. --slow-link 4")


def test_random_shapes_draw_one_row_small_shards_and_stay_within_the_limit():
    rng = random.Random(0)
    per_rank = [_draw_shape(rng, (8, 32, 16), "all_gather", 2) for _ in range(400)]
    assert {s[1:] for s in per_rank} == {(32, 16)}
    rows = [s[0] for s in per_rank]
    assert min(rows) == 1 and max(rows) == 8 and rows.count(1) > 40 and set(rows) == set(range(1, 9))
    # reduce_scatter's M is the output's rows: world equal shards of 1..M/world rows.
    totals = [_draw_shape(rng, (24, 32, 16), "reduce_scatter", 3)[0] for _ in range(200)]
    assert all(m % 3 == 0 and 3 <= m <= 24 for m in totals) and 3 in totals
    # The same seed draws the same shapes: every rank of a soak agrees without a word.
    assert [_draw_shape(random.Random(5), (96, 1, 1), "all_gather", 4) for _ in range(3)] == \
           [_draw_shape(random.Random(5), (96, 1, 1), "all_gather", 4) for _ in range(3)]


def _launch(it, outcome, s=0.1, **extra):
    return {"it": it, "outcome": outcome, "s": s, **extra}


def test_summary_counts_launches_once_over_ranks_and_skips_the_first_launch_in_percentiles():
    ranks = [
        {"rank": 0, "launches": [_launch(0, "ok", 5.0), _launch(1, "ok", 0.1), _launch(2, "ok", 0.2, refused="..."),
                                 _launch(3, "ok", 0.3)]},
        {"rank": 1, "launches": [_launch(0, "ok", 5.0), _launch(1, "wrong", 0.1, wrong_elements=7),
                                 _launch(2, "ok", 0.2, refused="..."), _launch(3, "timeout", 9.0, error="rank 1 waited")]},
    ]
    s = summarize(RunResult(ranks))
    assert {k: s[k] for k in ("launches", "wrong", "wrong_elements", "timeouts", "refused", "corrupt", "errors")} == {
        "launches": 4, "wrong": 1, "wrong_elements": 7, "timeouts": 1, "refused": 1, "corrupt": 0, "errors": 0}
    assert (s["p50_ms"], s["p99_ms"]) == (200.0, 300.0)  # 0.1, 0.1, 0.2, 0.2, 0.3: launch 0 built the kernel
    assert first_failure(RunResult(ranks)) == {"it": 1, "rank": 1, "outcome": "wrong", "s": 0.1, "error": ""}


def test_corrupt_fault_flips_a_copy_and_never_the_senders_data():
    f = Faults.of(corrupt=[(1, 0)])
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        data = torch.tensor([[0.5, 2.0], [0.0, -1.0]], dtype=dtype)
        sent = f.corrupted(1, 0, data)
        assert torch.equal(data, torch.tensor([[0.5, 2.0], [0.0, -1.0]], dtype=dtype)), "the sender's chunk changed"
        assert sent[0, 0] != data[0, 0] and not (sent[0, 0] > 0), f"{dtype}: {sent[0, 0]}"  # sign flipped (or NaN)
        assert torch.equal(sent.flatten()[1:], data.flatten()[1:])
        assert f.corrupted(0, 0, data) is data and f.corrupted(1, 1, data) is data


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_checksum_message_round_trips_and_catches_a_flipped_byte(dtype):
    data = torch.randn(3, 5).to(dtype)
    message = checksum.pack(data, checksum.crc(data))
    assert message.numel() == data.numel() * data.element_size() + checksum.TRAILER
    word, ok = checksum.check(message)
    assert ok and word == checksum.crc(data) and torch.equal(checksum.payload(message, data), data)
    message[7] ^= 0x10  # one bit of one element in flight
    assert checksum.check(message) == (word, False)
    tainted = checksum.pack(data, checksum.crc(data) | checksum.TAINTED)
    assert checksum.check(tainted) == (checksum.crc(data) | checksum.TAINTED, True)  # intact, but built from a bad part


def test_run_help_documents_the_soak_and_fault_options(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--random-shapes", "--seed S", "--inject FAULTS", "--timeout S", "--verify-chunks", "--slow-link MS",
                   "--json OUT"):
        assert option in text, option
    assert "corrupt=SRC:CHUNK (bytes flipped in flight)" in text


def test_verify_chunks_is_refused_on_a_backend_without_checksums():
    from syncopy.errors import LaunchError
    from syncopy.runtime.transport import backends
    from syncopy.runtime.transport.backends.gloo import GlooBackend

    class NoChecks:
        name = "p2p"

    with pytest.raises(LaunchError) as err:
        backends.verify_chunks(NoChecks(), True)
    assert str(err.value) == "verify_chunks=True checks chunks on the gloo backend (CPU tensors) only, not p2p; drop verify_chunks on GPUs"
    backends.verify_chunks(NoChecks(), False)  # off: nothing to refuse
    gloo = GlooBackend.__new__(GlooBackend)
    backends.verify_chunks(gloo, True)
    assert gloo.verify_chunks is True and GlooBackend.verify_chunks is False


def test_gpu_backends_refuse_a_corrupt_fault_they_cannot_inject():
    from syncopy.errors import LaunchError
    from syncopy.runtime.transport.backends.p2p import refuse_emulation

    with pytest.raises(LaunchError, match=r"^the p2p backend cannot inject corrupt chunks; use backend='gloo' \(CPU\) for fault injection$"):
        refuse_emulation("p2p", None, Faults.of(corrupt=[(0, 1)]), drop=True)
