"""Injected faults in the tp_mlp pipeline (issue 15 item 3): a fault names a send of either operator and
goes to each operator that makes it; one naming a send of neither is one line on every rank; the
reliability matrix faults each operator."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from syncopy import templates
from syncopy.errors import FaultError
from syncopy.runtime.transport.link import Faults

REPO = Path(__file__).resolve().parents[2]
mlp = importlib.import_module("syncopy.templates.tp_mlp.template")


def _route(faults, world=4, chunks=2):
    op = templates.get("tp_mlp").fused(chunks_per_rank=chunks)
    return mlp.route_faults(faults, op.up.schedule, op.down.schedule, world)


def test_each_fault_goes_to_the_operators_that_make_its_send():
    # World 4, 2 chunks per rank: rank 1 sends chunks 0, 1 of its X (up) and partials of Y's global
    # chunks 0, 1, 4, 5, 6, 7 (down).
    up, down = _route(Faults.of(drop=[(1, 4)], delay={(1, 0): 0.3}, corrupt=[(1, 1)]))
    assert up == Faults.of(delay={(1, 0): 0.3}, corrupt=[(1, 1)])
    assert down == Faults.of(drop=[(1, 4)], delay={(1, 0): 0.3}, corrupt=[(1, 1)])
    assert _route(Faults.of(kill=(1, 5))) == (None, Faults.of(kill=(1, 5)))


@pytest.mark.parametrize("faults, message", [
    pytest.param(Faults.of(kill=(1, 3)), "injected fault kill=1:3 names a send no operator of tp_mlp makes: CHUNK is a chunk of "
                 "rank 1's shard of X (the up projection sends 0, 1) or a global chunk id of Y (the down projection sends 0, 1, "
                 "4, 5, 6, 7); name one of those", id="chunk-of-neither"),
    pytest.param(Faults.of(drop=[(4, 0)]), "injected fault drop=4:0 names rank 4, but the group has 4 rank(s); name a rank 0..3",
                 id="rank-past-group"),
])
def test_a_fault_on_a_send_of_neither_operator_is_refused_in_one_line(faults, message):
    with pytest.raises(FaultError) as err:
        _route(faults)
    assert str(err.value) == message


@pytest.mark.world
def test_the_cli_refuses_a_fault_no_operator_of_the_pipeline_makes_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "syncopy.cli", "run", "tp_mlp", "--world", "2", "--shape", "4,16,32",
                           "--inject", "corrupt=1:3", "--verify-chunks"], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO)))
    assert proc.returncode == 2 and proc.stdout == ""
    # Refused before any rank starts: one line, the same whichever rank would have reported first.
    assert proc.stderr == ("injected fault corrupt=1:3 names a send no operator of tp_mlp makes: CHUNK is a chunk of "
                           "rank 1's shard of X (the up projection sends 0, 1) or a global chunk id of Y (the down projection "
                           "sends 0, 1); name one of those\n")


def test_the_reliability_matrix_faults_each_operator_of_the_pipeline():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import reliability

    cases = [c for c in reliability.plan(["tp_mlp"], [2, 4], list(reliability.KINDS)) if c[2] != "soak"]
    assert len(cases) == 16
    for _, world, kind, where in cases:
        src, chunk = (int(x) for x in where.split(":"))
        up, down = _route(Faults.of(**{"drop": {"drop": [(src, chunk)]}, "delay": {"delay": {(src, chunk): 0.3}},
                                       "kill": {"kill": (src, chunk)}, "corrupt": {"corrupt": [(src, chunk)]}}[kind]), world)
        assert down is not None and (up is None) == (where != "1:0"), (world, kind, where)
