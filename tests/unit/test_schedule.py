"""Schedule v1: loading from YAML/JSON/dict/Python, and every schedule error with its key and line."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from syncopy.errors import ScheduleError, ScheduleLocation
from syncopy.schedule import Binding, Schedule, from_dict, json_schema, load_schedule, loads

GOOD = textwrap.dedent(
    """\
    version: 1
    pattern: all_gather
    kernel: my_mm
    tensor: lhs
    dim: 0
    chunks_per_rank: 3
    order: ring
    """
)
KEYS = ["version", "pattern", "kernel", "tensor", "dim", "chunks_per_rank", "order", "binding", "loop_order", "units_per_rank", "chunks", "world", "transfers"]


def _error(text: str, file: str | None = "s.yaml") -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        loads(text, file=file)
    return info.value


# --- loading -----------------------------------------------------------------------------------

def test_the_minimal_user_form_loads():
    s = loads(GOOD, file="s.yaml")
    assert s == Schedule(pattern="all_gather", kernel="my_mm", tensor="lhs", dim=0, chunks_per_rank=3, order="ring")


def test_defaults_for_optional_keys():
    s = loads("pattern: all_gather\ntensor: X\n")
    assert (s.version, s.kernel, s.dim, s.chunks_per_rank, s.order, s.binding) == (1, None, 0, 1, "ring", None)


def test_json_is_accepted_too():
    s = loads(json.dumps({"version": 1, "pattern": "all_gather", "tensor": "X", "order": [2, 1, 3]}), file="s.json")
    assert s.order == [2, 1, 3]


def test_explicit_binding_loads():
    s = loads(GOOD + "binding:\n  rows: r * B + tl.arange(0, B)\n  before_line: 12\n")
    assert s.binding == Binding(rows="r * B + tl.arange(0, B)", before_line=12)


@pytest.mark.parametrize("order", ["ring", "local_first", "bidirectional_ring"])
def test_named_orders(order):
    assert loads(GOOD.replace("order: ring", f"order: {order}")).order == order


def test_auto_chunks_and_order_load_from_yaml_json_and_dicts():
    text = GOOD.replace("chunks_per_rank: 3", "chunks_per_rank: auto").replace("order: ring", "order: auto")
    s = loads(text, file="s.yaml")
    assert (s.chunks_per_rank, s.order, s.planned) == ("auto", "auto", True)
    assert loads(json.dumps(s.model_dump()), file="s.json") == s
    assert load_schedule({"pattern": "all_gather", "tensor": "lhs", "chunks_per_rank": "auto"}).chunks_per_rank == "auto"
    # Either key alone asks the planner; neither does not.
    assert loads(GOOD.replace("order: ring", "order: auto")).planned
    assert loads(GOOD.replace("chunks_per_rank: 3", "chunks_per_rank: auto")).planned
    assert not loads(GOOD).planned
    # The cache key tells auto from a number.
    assert s.key() != loads(GOOD).key()


def test_auto_is_spelt_in_lower_case():
    err = _error(GOOD.replace("chunks_per_rank: 3", "chunks_per_rank: Auto"))
    assert (err.location.key, err.location.line) == ("chunks_per_rank", 6)
    assert err.message.startswith("must be a positive integer or auto (got 'Auto')")


def test_load_schedule_from_every_kind_of_source(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    expected = loads(GOOD)
    assert load_schedule(path) == expected
    assert load_schedule(str(path)) == expected
    assert load_schedule(GOOD) == expected
    assert load_schedule({"pattern": "all_gather", "kernel": "my_mm", "tensor": "lhs", "chunks_per_rank": 3}) == expected
    assert load_schedule(expected) is expected
    json_path = tmp_path / "s.json"
    json_path.write_text(json.dumps(expected.model_dump()))
    assert load_schedule(json_path) == expected


def test_schedules_are_frozen_and_have_a_stable_key():
    s = loads(GOOD)
    with pytest.raises(Exception):
        s.chunks_per_rank = 4
    assert s.key() == loads(GOOD).key() != loads(GOOD.replace("3", "2")).key()


# --- errors: key, line, and what to change -----------------------------------------------------

ERRORS = [
    pytest.param(
        GOOD.replace("all_gather", "all_scatter"),
        ("pattern", 2),
        "'all_scatter' is not allowed; use one of all_gather, reduce_scatter, all_reduce, all_to_all",
        id="unknown-pattern",
    ),
    pytest.param(
        GOOD.replace("chunks_per_rank: 3", "chunks_per_rank: 0"),
        ("chunks_per_rank", 6),
        "must be a positive integer or auto (got 0); write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
        id="chunks-zero",
    ),
    pytest.param(
        GOOD.replace("chunks_per_rank: 3", "chunks_per_rank: -2"),
        ("chunks_per_rank", 6),
        "must be a positive integer or auto (got -2); write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
        id="chunks-negative",
    ),
    pytest.param(
        GOOD.replace("chunks_per_rank: 3", "chunks_per_rank: three"),
        ("chunks_per_rank", 6),
        "must be a positive integer or auto (got 'three'); write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
        id="chunks-not-a-number",
    ),
    pytest.param(
        GOOD.replace("chunks_per_rank: 3", "chunks_per_rank: many"),
        ("chunks_per_rank", 6),
        "must be a positive integer or auto (got 'many'); " + "write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
        id="chunks-a-word-other-than-auto",
    ),
    pytest.param(
        GOOD.replace("chunks_per_rank: 3", "chunks_per_rank: 2.5"),
        ("chunks_per_rank", 6),
        "must be a positive integer or auto (got 2.5); write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
        id="chunks-fractional",
    ),
    pytest.param(
        GOOD.replace("dim: 0", "dim: -1"),
        ("dim", 5),
        "must be at least 0 (got -1); give the sharded dimension of the tensor as a non-negative integer",
        id="dim-negative",
    ),
    pytest.param(
        GOOD + "chunk_per_rank: 2\n",
        ("chunk_per_rank", 8),
        "unknown key; the schedule keys are version, pattern, kernel, tensor, dim, chunks_per_rank, order, binding, "
        "loop_order, units_per_rank, chunks, world, transfers",
        id="unknown-key-at-end",
    ),
    pytest.param(
        GOOD.replace("dim: 0\n", "dim: 0\nstreams: 2\n"),
        ("streams", 6),
        "unknown key; the schedule keys are version, pattern, kernel, tensor, dim, chunks_per_rank, order, binding, "
        "loop_order, units_per_rank, chunks, world, transfers",
        id="unknown-key-in-the-middle",
    ),
    pytest.param(
        GOOD.replace("order: ring", "order: [1, 1, 3]"),
        ("order", 7),
        "explicit order [1, 1, 3] is not a permutation of the peer offsets 1..3; list every peer offset exactly once",
        id="order-repeats-a-peer",
    ),
    pytest.param(
        GOOD.replace("order: ring", "order:\n  - 0\n  - 1\n"),
        ("order", 7),
        "explicit order [0, 1] is not a permutation of the peer offsets 1..2; list every peer offset exactly once",
        id="order-includes-self",
    ),
    pytest.param(
        GOOD.replace("order: ring", "order: [2, 3]"),
        ("order", 7),
        "explicit order [2, 3] is not a permutation of the peer offsets 1..2; list every peer offset exactly once",
        id="order-skips-a-peer",
    ),
    pytest.param(
        GOOD.replace("order: ring", "order: tree"),
        ("order", 7),
        "'tree' is not allowed; use ring, local_first, bidirectional_ring, auto, a list of peer offsets, or explicit (with `transfers:`)",
        id="unknown-named-order",
    ),
    pytest.param(
        GOOD.replace("version: 1", "version: 2"),
        ("version", 1),
        "2 is not allowed; write `version: 1`",
        id="unknown-version",
    ),
    pytest.param(
        GOOD + "binding:\n  rows: r\n  before_line: 0\n",
        ("binding.before_line", 10),  # the line of the nested key itself
        "must be at least 1 (got 0); give the kernel file's line of a statement directly in the kernel's body; the wait goes before it",
        id="binding-subkey",
    ),
    pytest.param(
        GOOD + "binding:\n  before_line: 4\n",
        ("binding.rows", 8),
        "missing required key; give `binding: {rows: <expression>}`",
        id="binding-without-rows",
    ),
]


@pytest.mark.parametrize(("text", "where", "message"), ERRORS)
def test_schedule_error_names_key_line_and_fix(text, where, message):
    err = _error(text)
    key, line = where
    assert err.location == ScheduleLocation("s.yaml", key, line)
    assert err.message == message
    assert str(err) == f"s.yaml:{line}: {key}: {message}"


def test_missing_required_key_has_no_line_but_names_the_key():
    err = _error(GOOD.replace("tensor: lhs\n", ""))
    assert str(err) == "s.yaml: tensor: missing required key; name the kernel argument that is communicated"


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        pytest.param(GOOD.replace("dim: 0", "dim: [0"), 6, "expected ',' or ']', but got ':'", id="unclosed-flow-list"),
        pytest.param(GOOD + "  stray: 1\n", 8, "mapping values are not allowed here", id="bad-indentation"),
        pytest.param(GOOD.replace("dim: 0", "dim:\t0 :"), 5, "found character '\\t' that cannot start any token", id="tab"),
        pytest.param("pattern: all_gather\ntensor: 'A\n", 3, "found unexpected end of stream", id="unterminated-quote"),
    ],
)
def test_yaml_syntax_error_has_the_line(text, line, problem):
    err = _error(text)
    assert err.location == ScheduleLocation("s.yaml", "", line)
    assert str(err) == f"s.yaml:{line}: YAML syntax error: {problem}; fix the syntax"


@pytest.mark.parametrize("text", ["- pattern: all_gather\n", "just a string\n", ""], ids=["list", "scalar", "empty"])
def test_a_schedule_must_be_a_mapping(text):
    assert str(_error(text)) == "s.yaml:1: a schedule must be a mapping of keys to values"


def test_errors_without_a_file_name_the_key_only():
    with pytest.raises(ScheduleError) as info:
        from_dict({"pattern": "all_gather", "tensor": "A", "chunks_per_rank": 0})
    assert str(info.value) == "schedule: chunks_per_rank: must be a positive integer or auto (got 0); write a chunk count no larger than the rows of one shard, or auto to let the planner choose"


def test_unreadable_schedule_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ScheduleError) as info:
        load_schedule(missing)
    assert str(info.value) == f"{missing}: cannot read the schedule: No such file or directory; check the path"


def test_unsupported_source_type():
    with pytest.raises(ScheduleError, match="cannot make a schedule from int; pass a path, a dict or a Schedule"):
        load_schedule(3)


@pytest.mark.parametrize(("key", "old", "value"), [("chunks_per_rank", "3", "true"), ("chunks_per_rank", "3", "yes"), ("dim", "0", "false"), ("dim", "0", "true")])
def test_a_boolean_is_not_a_count(key, old, value):
    err = _error(GOOD.replace(f"{key}: {old}", f"{key}: {value}"))
    assert err.location.key == key


# --- the published JSON Schema -----------------------------------------------------------------

def test_json_schema_describes_exactly_the_schedule_keys():
    schema = json.loads(json_schema())
    assert sorted(schema["properties"]) == sorted(KEYS)
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["pattern", "tensor"]
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["properties"]["pattern"]["enum"] == ["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]


def test_json_schema_offers_auto_for_chunks_and_order():
    props = json.loads(json_schema())["properties"]
    assert props["chunks_per_rank"]["anyOf"] == [{"minimum": 1, "type": "integer"}, {"const": "auto", "type": "string"}]
    assert props["chunks_per_rank"]["default"] == 1
    assert {"const": "auto", "type": "string"} in props["order"]["anyOf"]
    assert "planner" in props["chunks_per_rank"]["description"]


def test_the_json_schema_accepts_what_loads_accepts():
    # A light structural check without a validator dependency: every key of a good schedule is a property.
    schema = json.loads(json_schema())
    for key in loads(GOOD + "binding:\n  rows: r\n").model_dump(exclude_none=True):
        assert key in schema["properties"]


def test_repository_templates_validate():
    root = Path(__file__).resolve().parents[2]
    paths = sorted((root / "templates").glob("*/schedule.yaml"))
    assert len(paths) >= 6  # the library's folder, not an empty glob
    for path in paths:
        assert load_schedule(path).pattern in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
