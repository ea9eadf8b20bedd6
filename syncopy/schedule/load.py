"""Loading schedules from YAML/JSON text, files, dicts, with errors that point at the key and line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from syncopy.errors import ScheduleError, ScheduleLocation
from syncopy.schedule.model import Schedule

_KEY_HINTS = {
    "version": "write `version: 1`",
    "pattern": "use one of all_gather, reduce_scatter, all_reduce, all_to_all",
    "kernel": "name the @triton.jit function to transform",
    "tensor": "name the kernel argument that is communicated",
    "dim": "give the sharded dimension of the tensor as a non-negative integer",
    "chunks_per_rank": "write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
    "order": "use ring, local_first, bidirectional_ring, auto or a list of peer offsets",
    "binding": "give `binding: {rows: <expression>}`",
}
_KNOWN_KEYS = ", ".join(Schedule.model_fields)


def _compose_with_lines(text: str, file: str | None) -> tuple[Any, dict[tuple, int]]:
    """Parse YAML (JSON is YAML) keeping the line of every key, keyed by its path."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScheduleError(f"YAML syntax error: {problem}; fix the syntax", ScheduleLocation(file, "", line)) from None
    lines: dict[tuple, int] = {}

    def walk(n, path):
        if n is None:
            return None
        if isinstance(n, yaml.MappingNode):
            out = {}
            for k, v in n.value:
                key = k.value
                lines[path + (key,)] = k.start_mark.line + 1
                out[key] = walk(v, path + (key,))
            return out
        if isinstance(n, yaml.SequenceNode):
            out = []
            for i, v in enumerate(n.value):
                lines[path + (i,)] = v.start_mark.line + 1
                out.append(walk(v, path + (i,)))
            return out
        return yaml.safe_load(yaml.serialize(n))

    return walk(node, ()), lines


def _explain(err: dict) -> str:
    kind, loc, got = err["type"], err["loc"], err.get("input")
    key = str(loc[0]) if loc else ""
    hint = _KEY_HINTS.get(key, "")
    if kind == "extra_forbidden":
        return f"unknown key; the schedule keys are {_KNOWN_KEYS}"
    if kind == "missing":
        return f"missing required key; {hint}" if hint else "missing required key"
    if kind in ("greater_than_equal", "greater_than"):
        limit = err.get("ctx", {}).get("ge", err.get("ctx", {}).get("gt"))
        return f"must be at least {limit} (got {got!r}); {hint}"
    if kind in ("literal_error",):
        return f"{got!r} is not allowed; {hint}"
    if kind.startswith("int") or kind.startswith("string"):
        return f"{got!r} has the wrong type; {hint}"
    msg = err["msg"].removeprefix("Value error, ")
    return msg if msg.endswith(hint) or not hint else f"{msg}; {hint}" if "; " not in msg else msg


def _error_key(loc: tuple) -> str:
    # pydantic reports union branches as extra loc parts ('order', 'literal[...]'); keep user keys.
    parts = [str(p) for p in loc if not (isinstance(p, str) and ("[" in p or p in ("list[int]", "int")))]
    return ".".join(parts)


def from_dict(data: Any, *, file: str | None = None, lines: dict[tuple, int] | None = None) -> Schedule:
    """Validate a plain mapping into a `Schedule`; errors name the key (and line, for files)."""
    if not isinstance(data, dict):
        raise ScheduleError("a schedule must be a mapping of keys to values", ScheduleLocation(file, "", 1 if file else None))
    try:
        return Schedule.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        key = _error_key(loc)
        line = None
        if lines:
            probe = tuple(p for p in loc if (p in data) or isinstance(p, int) or key.startswith(str(p)))
            while probe and probe not in lines:
                probe = probe[:-1]
            line = lines.get(probe) if probe else None
        raise ScheduleError(_explain(err), ScheduleLocation(file, key, line)) from None


def loads(text: str, *, file: str | None = None) -> Schedule:
    """Parse and validate schedule text (YAML or JSON)."""
    data, lines = _compose_with_lines(text, file)
    return from_dict(data, file=file, lines=lines)


def load_schedule(source: "Schedule | dict | str | Path") -> Schedule:
    """A `Schedule` from a `Schedule`, a dict, a path to a .yaml/.yml/.json file, or YAML text."""
    if isinstance(source, Schedule):
        return source
    if isinstance(source, dict):
        return from_dict(source)
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and source.endswith((".yaml", ".yml", ".json"))):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ScheduleError(f"cannot read the schedule: {exc.strerror}; check the path", ScheduleLocation(str(path), "")) from None
        except UnicodeDecodeError as exc:
            raise ScheduleError(f"the schedule is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8", ScheduleLocation(str(path), "")) from None
        return loads(text, file=str(path))
    if isinstance(source, str):
        return loads(source)
    raise ScheduleError(f"cannot make a schedule from {type(source).__name__}; pass a path, a dict or a Schedule")


def json_schema() -> str:
    """The published JSON Schema of schedule version 1."""
    schema = Schedule.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "syncopy chunk schedule (version 1)"
    return json.dumps(schema, indent=2, sort_keys=True)
