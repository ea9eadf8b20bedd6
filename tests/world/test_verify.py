"""`syncopy verify` (issue 26): the kernels the suite fuses go through the verifier's conditions, and the
command itself runs end to end on a user's kernel file.

In the shared worlds (tests/world/shared.py), each kernel against its own unfused kernel (templates:
against torch) under every condition: a slow link landing chunks one at a time in random order, a
link that holds each chunk until a program is seen polling its flag, checked mode; buffers poisoned
until their chunk lands; producers' chunks compared, as taken at their flag, with their final rows.
Besides agreeing, each condition must have seen what it is there for: tiles that truly blocked on
held chunks (consumers), chunks taken at their flag (producers).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.golden import golden_worlds
from tests.world import listed_workers, shared
from tests.world import verify_workers as vw

ROOT = Path(__file__).resolve().parents[2]
#: Every golden case but those of tests/world/test_verify_sentinels.py (the mutants' killers run them).
SENTINELS = {"loop_written_decayed_sum", "loop_written_max_reader", "loop_written_unguarded_softmax",
             "producer_store_mixed_corner", "producer_store_wrapped_rows"}
GOLDEN = [c for c in sorted(golden_worlds.RECIPES) + sorted(golden_worlds.PRODUCER_RECIPES) if c not in SENTINELS]
#: Every listed-tensor kernel with its list as the kernel reads it and reversed (list order never matters).
LISTED = [(k, order) for k, (names, _) in sorted(listed_workers.CASES.items()) for order in (names, names[::-1])]
TEMPLATES = ["a2a_gemm", "ag_attention", "ag_gemm", "ag_gemm_persistent", "ag_rmsnorm", "gemm_ar", "gemm_rs", "tp_mlp"]

shared.register(__name__, 2, {"golden": (f"{vw.__name__}:run_golden", (GOLDEN,)),
                              "templates": (f"{vw.__name__}:run_templates", (TEMPLATES,)),
                              "assigned jit": (f"{vw.__name__}:run_assigned_jit", ())})
shared.register(__name__, 3, {"listed": (f"{vw.__name__}:run_listed", (LISTED,))})


def _check(results: list[dict], names: list[str], producer=lambda name: False) -> None:
    problems = []
    for rank, per_name in enumerate(results):
        assert sorted(per_name) == sorted(names), (rank, sorted(per_name))
        for name in names:
            conds = per_name[name]
            want = ["reordered", "checked"] if producer(name) else ["reordered", "held", "checked"]
            assert list(conds) == want, (rank, name, list(conds))
            for cond, s in conds.items():
                where = f"rank {rank} {name} {cond}"
                if s["differences"]:
                    problems.append(f"{where}: {s['differences'][0]}")
                if s["launches"] != vw.LAUNCHES:
                    problems.append(f"{where}: {s['launches']} launches of {vw.LAUNCHES}")
                if cond == "held" and s["waited"] == 0:
                    problems.append(f"{where}: no remote chunk landed while a program was polling its flag")
                if producer(name) and s["taken"] == 0:
                    problems.append(f"{where}: no chunk was taken at its flag")
    assert not problems, "\n".join(problems)


@pytest.mark.world
def test_every_golden_kernel_agrees_with_its_unfused_kernel_under_every_condition():
    producers = set(golden_worlds.PRODUCER_RECIPES)
    _check(shared.results(__name__, 2, "golden"), GOLDEN, lambda name: name in producers)


@pytest.mark.world
def test_every_listed_tensor_kernel_agrees_in_every_list_order_on_three_ranks():
    _check(shared.results(__name__, 3, "listed"), [f"{k} [{', '.join(o)}]" for k, o in LISTED])


@pytest.mark.world
def test_every_template_agrees_with_torch_under_every_condition():
    from syncopy import templates

    assert sorted(templates.available()) == TEMPLATES  # a new template is verified too
    _check(shared.results(__name__, 2, "templates"), TEMPLATES, lambda name: name in ("gemm_rs", "gemm_ar"))


@pytest.mark.world
def test_a_kernel_made_by_triton_jit_of_a_function_is_found_under_either_name():
    """`copy_rows = triton.jit(_copy_rows)` (issue 31, item 8): found and fused like a decorated kernel."""
    _check(shared.results(__name__, 2, "assigned jit"), ["copy_rows", "_copy_rows"])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "syncopy.cli", "verify", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.world
def test_syncopy_verify_passes_the_examples_kernel_and_says_what_each_condition_saw():
    """The command as the docs give it, on a world of 2: three launches whose shard rows change."""
    r = _cli("examples/verify/mm.py", "--schedule", "examples/verify/mm.yaml", "--example",
             "examples/verify/mm_example.py:make", "--world", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert [line.split()[:4] for line in lines[:3]] == [["world", "2", "reordered", "ok"], ["world", "2", "held", "ok"],
                                                         ["world", "2", "checked", "ok"]], r.stdout
    # 2 ranks x 3 launches x 2 remote chunks, each landed while a program polled its flag.
    assert "12 remote chunks held until a program polled them, 0 released unpolled" in lines[1], r.stdout
    assert lines[-1].startswith("verdict: every rank agrees with the unfused kernel under every condition"), r.stdout
