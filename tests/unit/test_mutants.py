"""The mutants of tests/mutants.py still apply to the product as it is (each text occurs once in its
file), so `make mutants` cannot pass by mutating nothing; and each names the tests that must kill it."""
import pytest

from tests import mutants


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_applies_once_and_changes_something(mutant):
    assert mutants.check(mutant) == ""
    assert mutant.old != mutant.new and mutant.tests
    assert all((mutants.ROOT / t.split("::")[0]).is_file() for t in mutant.tests)  # a file, or a node id in one


def test_the_list_names_every_mutant(capsys):
    assert mutants.main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [m.name for m in mutants.MUTANTS]
    assert {"skip-a-wait", "wait-one-short", "announce-early", "flag-before-data", "nan-from-launch-2",
            "drop-listed-wait", "loop-order-unproven", "corners-without-affinity", "autotune-unpruned"} <= set(listed)
