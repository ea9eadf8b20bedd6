"""Fuzzer (a): random schedule dictionaries are either valid or rejected with a `ScheduleError`
naming a key, never another exception; what loads also round-trips through YAML and `expand`.

The dictionaries mix well-formed values of every schedule key (so that many of them validate and the
full-form checks run deep) with garbage of every YAML type, unknown keys and broken transfers. Each is
fed to `from_dict`, to `loads` as YAML and as JSON text, and, when valid, written back with `to_yaml`
and expanded for a few worlds.

Budget: see tests/fuzz/profiles.py. Long run: `SYNCOPY_FUZZ=long python -m pytest tests/fuzz/<this file>`.
"""
from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from syncopy.errors import ScheduleError
from syncopy.schedule import Schedule, expand, from_dict, loads, to_yaml
from tests.fuzz.profiles import fuzz

SCHEDULE_KEYS = ["version", "pattern", "kernel", "tensor", "dim", "chunks_per_rank", "order", "binding", "units_per_rank",
                 "chunks", "world", "transfers"]
TRANSFER_KEYS = ["id", "chunk", "from", "to", "step", "after", "mode", "into", "reduce", "signal"]

# Anything YAML or JSON can hold, small.
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 6), st.integers(), st.floats(allow_nan=True), st.text(max_size=6),
                    st.sampled_from(["auto", "ring", "explicit", "sum", "push", "1", "A", "", " ", "x[", "tl.arange(0, 4)"]))
garbage = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=8)
small = st.integers(-1, 5)
pair = st.one_of(st.tuples(small, small).map(list), st.lists(small, max_size=3), garbage)


def _maybe(strategy):
    """Mostly `strategy`, one time in eight garbage: most keys are well formed, so checks run deep."""
    return st.integers(0, 7).flatmap(lambda k: garbage if k == 0 else strategy)


@st.composite
def transfers(draw):
    keys = draw(st.lists(st.sampled_from(TRANSFER_KEYS + ["junk"]), unique=True, max_size=4))
    values = {
        "id": _maybe(st.sampled_from(["a", "b", "c"])), "chunk": pair, "from": _maybe(small), "to": _maybe(small),
        "step": _maybe(small), "after": _maybe(st.lists(st.one_of(small, st.sampled_from(["a", "b", "zz"])), max_size=3)),
        "mode": _maybe(st.sampled_from(["push", "pull"])), "into": pair, "reduce": _maybe(st.sampled_from(["sum", "max", "avg"])),
        "signal": _maybe(st.booleans()), "junk": garbage,
    }
    base = {"chunk": draw(pair), "from": draw(small), "to": draw(small)}  # most transfers have the required keys
    return {**base, **{k: draw(values[k]) for k in keys}}


VALUES = {
    "version": _maybe(st.sampled_from([1, 1, 1, 2])),
    "pattern": _maybe(st.sampled_from(["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "gather"])),
    "kernel": _maybe(st.sampled_from(["mm", "k2"])),
    "tensor": _maybe(st.sampled_from(["A", "x"])),
    "dim": _maybe(small),
    "chunks_per_rank": _maybe(st.one_of(small, st.just("auto"))),
    "order": _maybe(st.one_of(st.sampled_from(["ring", "local_first", "bidirectional_ring", "auto", "explicit"]),
                              st.permutations([1, 2, 3]), st.lists(small, max_size=4))),
    "binding": _maybe(st.fixed_dictionaries({"rows": _maybe(st.sampled_from(["pid * B + tl.arange(0, B)", "a, b", "x)", "# c"]))},
                                            optional={"before_line": _maybe(small), "junk": garbage})),
    "units_per_rank": _maybe(small),
    "chunks": _maybe(st.lists(pair, max_size=4)),
    "world": _maybe(small),
    "transfers": _maybe(st.lists(transfers(), max_size=6)),
}


@st.composite
def slices(draw, max_units: int = 6):
    """(units_per_rank, chunks): a valid cut of [0, U) into slices, listed in any order."""
    units = draw(st.integers(1, max_units))
    cuts = sorted(draw(st.sets(st.integers(1, units - 1), max_size=units - 1))) if units > 1 else []
    bounds = [0, *cuts, units]
    return units, draw(st.permutations([[lo, hi] for lo, hi in zip(bounds, bounds[1:])]))


@st.composite
def schedule_dicts(draw):
    """A mapping with (usually) the required keys, a random subset of the others and sometimes an unknown key."""
    keys = draw(st.lists(st.sampled_from(SCHEDULE_KEYS), unique=True, max_size=len(SCHEDULE_KEYS)))
    data = {"pattern": draw(st.sampled_from(["all_gather", "all_to_all", "reduce_scatter", "all_reduce"])), "tensor": "A"}
    if draw(st.integers(0, 9)) == 0:
        data.pop(draw(st.sampled_from(["pattern", "tensor"])))
    data.update({k: draw(VALUES[k]) for k in keys})
    if draw(st.integers(0, 3)) == 0:
        data["units_per_rank"], data["chunks"] = draw(slices())
    if draw(st.integers(0, 19)) == 0:
        data[draw(st.text(min_size=1, max_size=5))] = draw(garbage)
    return data


@st.composite
def full_forms(draw):
    """A named order written out for a small world (`expand`), then a few edits of its transfers:
    what a user porting a plan gets slightly wrong (a transfer dropped, duplicated or re-routed, a
    step, an `after`, an `into` or a `reduce` changed). Reaches the full-form checks behind the keys."""
    pattern = draw(st.sampled_from(["all_gather", "all_to_all", "reduce_scatter", "all_reduce"]))
    world = draw(st.integers(2, 4))
    order = draw(st.sampled_from(["ring", "local_first", "bidirectional_ring"]))
    chunks = draw(st.integers(1, 2))
    data = expand(Schedule(pattern=pattern, tensor="A", chunks_per_rank=chunks, order=order), world).model_dump(
        by_alias=True, exclude_none=True, mode="json")
    moves = data["transfers"]
    for _ in range(draw(st.integers(0, 3))):
        if not moves:
            break
        i = draw(st.integers(0, len(moves) - 1))
        edit = draw(st.sampled_from(["drop", "copy", "field"]))
        if edit == "drop":
            moves.pop(i)
        elif edit == "copy":
            moves.insert(draw(st.integers(0, len(moves))), dict(moves[i]))
        else:
            key = draw(st.sampled_from(TRANSFER_KEYS))
            moves[i] = {**moves[i], key: draw({"id": st.sampled_from(["a", "b"]), "chunk": pair, "from": small, "to": small,
                                                "step": small, "after": st.lists(st.one_of(st.integers(0, 8), st.just("a")), max_size=2),
                                                "mode": st.sampled_from(["push", "pull"]), "into": pair,
                                                "reduce": st.sampled_from(["sum", "max"]), "signal": st.booleans()}[key])}
    if draw(st.booleans()):
        data["world"] = draw(st.integers(1, 5))
    return data


def _check_rejection(exc: ScheduleError, data: dict) -> None:
    """The error renders on one line and names a key path (the schedule has keys, so some key is wrong)."""
    assert "\n" not in str(exc), str(exc)
    key = exc.location.key if exc.location is not None else ""
    assert key, f"no key named: {exc}"
    if not key.startswith(("'", '"')):  # a quoted key is an unknown one that is no plain name
        top = key.split(".")[0].split("[")[0]
        assert top in data or top in SCHEDULE_KEYS, f"names {top!r}, not a key of the schedule: {exc}"


def _load_all_ways(data: dict) -> Schedule | ScheduleError:
    """from_dict, and the same mapping as YAML and JSON text: all three agree."""
    outcomes = []
    texts = [yaml.safe_dump(data, sort_keys=False)]
    try:
        texts.append(json.dumps(data, allow_nan=False))
    except ValueError:
        pass  # NaN and infinities have no JSON spelling
    for load in [lambda: from_dict(data)] + [lambda t=t: loads(t, file="s.yaml") for t in texts]:
        try:
            outcomes.append(load())
        except ScheduleError as exc:
            _check_rejection(exc, data)
            outcomes.append(exc)
    kinds = {type(o) for o in outcomes}
    assert len(kinds) == 1, f"from_dict and loads disagree: {outcomes}"
    return outcomes[0]


def _round_trips(s: Schedule) -> None:
    assert loads(to_yaml(s)) == s, to_yaml(s)
    for world in (1, 2, 3):
        try:
            full = expand(s, world)
        except ScheduleError as exc:
            assert "\n" not in str(exc)
            continue
        assert loads(to_yaml(full)) == full


@fuzz(ci=300, long=20_000)
@given(st.one_of(schedule_dicts(), full_forms()))
# JSON spells a character beyond U+FFFF as two \\u escapes, which YAML read as two lone surrogates:
# pydantic refused the key without naming it (now joined on load; a lone one is named).
@example(data={"pattern": "all_gather", "tensor": "A", "\U00010000": None})
@example(data={"pattern": "all_gather", "tensor": "A\U00010000"})
# An unknown key with a bracket was dropped from the path as if it were a pydantic union branch.
@example(data={"pattern": "all_gather", "tensor": "A", "[": None})
@example(data={"pattern": "all_gather", "tensor": "A", "": None})
@example(data={"pattern": "all_gather", "tensor": "A", "'": None})
def test_random_schedule_dicts_load_or_name_a_key(data):
    outcome = _load_all_ways(data)
    if isinstance(outcome, Schedule):
        _round_trips(outcome)


# What the fuzzer found, pinned with the exact text users see.
KEYS_ARE = "the schedule keys are version, pattern, kernel, tensor, dim, chunks_per_rank, order, binding, loop_order, units_per_rank, chunks, world, transfers"


def test_json_surrogate_pair_escapes_load_as_the_character():
    text = json.dumps({"pattern": "all_gather", "tensor": "A\U0001F600"})  # "A\ud83d\ude00" in the file
    assert loads(text, file="s.json").tensor == "A\U0001F600"


def test_a_lone_surrogate_is_named_by_its_key():
    with pytest.raises(ScheduleError) as info:
        loads('{"pattern": "all_gather", "tensor": "A", "kernel": "k\\ud800"}', file="s.json")
    assert str(info.value) == ("s.json:1: kernel: holds a lone UTF-16 surrogate, which is not text; remove it or write the "
                               "character it was meant to be")


@pytest.mark.parametrize("key, shown", [("[", "'['"), ("", "''"), ("x[0]", "'x[0]'"), ("int", "int")])
def test_an_unknown_key_is_named_whatever_it_reads(key, shown):
    with pytest.raises(ScheduleError) as info:
        from_dict({"pattern": "all_gather", "tensor": "A", key: 1})
    assert str(info.value) == f"schedule: {shown}: unknown key; {KEYS_ARE}"
