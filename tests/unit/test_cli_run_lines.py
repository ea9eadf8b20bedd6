"""What `syncopy run` prints for each rank and in its summary: the first launch (which builds the
kernel) apart from the later ones, the later ones' median per rank measured as the summary's
percentiles are, and failed launches counted, never timed (a failed launch's time is how long it took to fail)."""
from __future__ import annotations

from syncopy.cli import _summary_times, rank_line
from syncopy.run import RunResult, rank_times, summarize


def _launch(it, outcome, s, **extra):
    return {"it": it, "outcome": outcome, "s": s, **extra}


def test_the_first_launch_is_shown_apart_and_the_later_median_is_the_summarys_measure():
    launches = [_launch(0, "ok", 1.318), _launch(1, "ok", 0.0984), _launch(2, "ok", 0.120), _launch(3, "ok", 0.110)]
    r = {"rank": 0, "launches": launches, "max_err": 3.95e-7}
    assert rank_line(r) == ("rank 0: OK; max relative error 3.95e-07; first launch 1318 ms (builds the kernel); "
                            "later launches median 110.0 ms (3 launches)")
    s = summarize(RunResult([r]))
    assert s["p50_ms"] == 110.0  # the same launches, the same middle one
    assert _summary_times(s) == "launches after the first p50 110 ms, p99 120 ms"


def test_failed_launches_are_counted_not_timed():
    # --inject drop: the launch fails after the timeout; 3.0 s is not a launch time.
    r = {"rank": 1, "launches": [_launch(0, "timeout", 3.0, error="rank 1 waited 3s ...")], "max_err": 0.0}
    assert rank_times(r["launches"]) == {"first_s": None, "later_s": None, "later": 0, "failed": {"timeout": 1}}
    assert rank_line(r) == "rank 1: TIMEOUT; 1 of 1 launches failed (1 timeout), not timed"
    s = summarize(RunResult([r]))
    assert _summary_times(s) == ("no launch time (failed launches are not timed; the first, which builds the kernel, "
                                 "is left out)")


def test_a_run_that_fails_later_keeps_the_times_of_the_launches_that_returned():
    launches = [_launch(0, "ok", 2.0), _launch(1, "wrong", 0.2, wrong_elements=3), _launch(2, "corrupt", 1.5, error="...")]
    r = {"rank": 2, "launches": launches, "max_err": float("inf")}
    assert rank_line(r) == ("rank 2: WRONG; max relative error inf; first launch 2000 ms (builds the kernel); "
                            "later launches median 200.0 ms (1 launch); 1 of 3 launches failed (1 corrupt), not timed")


def test_a_single_launch_has_no_later_time():
    r = {"rank": 0, "launches": [_launch(0, "ok", 0.9)], "max_err": 0.0}
    assert rank_line(r) == "rank 0: OK; max relative error 0.00e+00; first launch 900.0 ms (builds the kernel)"
    assert _summary_times(summarize(RunResult([r]))) == ("no launch time (the first launch, which builds the kernel, "
                                                          "is left out; run --iters 2 or more)")


def _resolution(fused_s, sequential_s):
    from syncopy.planner.auto import Resolution

    return Resolution(chunks_per_rank=1, order="ring", hardware="cpu-gloo", template="ag_gemm", shape=(192, 64, 64),
                      dtype="fp32", world=2, fused_s=fused_s, sequential_s=sequential_s, reason="...")


def test_auto_says_why_it_runs_fused_where_sequential_is_predicted_faster():
    from syncopy.run import planner_lines

    slower = planner_lines(_resolution(0.0836, 0.0693)).split("\n")
    assert slower == [
        "planner (cpu-gloo, ag_gemm M,N,K=192,64,64 fp32, world 2): chunks_per_rank 1, order ring; predicted fused "
        "83.6 ms vs sequential 69.3 ms",
        "planner: sequential is predicted faster at this size (overlap does not pay); auto chooses among fused plans "
        "only, and 1 chunk(s) per rank is the fastest of them; `syncopy run` runs it fused anyway, since checking the "
        "fused kernel is its job; in your own code launch the unfused sequence at this size (fused.reference[grid](...): "
        "the collective, then your kernel)"]
    assert planner_lines(_resolution(0.05, 0.0693)) == slower[0].replace("83.6", "50")


def _fake_run(monkeypatch):
    import syncopy.run

    ranks = [{"rank": 0, "launches": [_launch(0, "ok", 1.0), _launch(1, "ok", 0.1)], "max_err": 0.0, "ok": True,
              "inputs": {"a": (8, 4)}, "output": (16, 4), "planner": None}]
    monkeypatch.setattr(syncopy.run, "run", lambda *a, **k: RunResult(ranks))


def test_a_trace_on_an_instant_link_says_why_every_chunk_is_at_the_start(monkeypatch, tmp_path, capsys):
    from syncopy.cli import INSTANT_LINK_NOTE, main

    _fake_run(monkeypatch)
    assert main(["run", "ag_gemm", "--trace", str(tmp_path / "run.json")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == INSTANT_LINK_NOTE == (
        "trace: without --slow-link the link is instant and every chunk lands as its launch starts; add --slow-link 30 "
        "(how docs/timeline.png was drawn) to see tiles wait for chunks in flight")
    assert main(["run", "ag_gemm", "--trace", str(tmp_path / "run.json"), "--slow-link", "30"]) == 0
    assert INSTANT_LINK_NOTE not in capsys.readouterr().out
