"""Loading schedules from YAML/JSON text, files, dicts, with errors that point at the key and line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from syncopy.errors import ScheduleError, ScheduleLocation
from syncopy.schedule.explicit import PlanError, key_path
from syncopy.schedule.model import Binding, Schedule, Transfer

_KEY_HINTS = {
    "version": "write `version: 1`",
    "pattern": "use one of all_gather, reduce_scatter, all_reduce, all_to_all",
    "kernel": "name the @triton.jit function to transform",
    "tensor": "name the kernel argument that is communicated",
    "dim": "give the sharded dimension of the tensor as a non-negative integer",
    "chunks_per_rank": "write a chunk count no larger than the rows of one shard, or auto to let the planner choose",
    "order": "use ring, local_first, bidirectional_ring, auto, a list of peer offsets, or explicit (with `transfers:`)",
    "binding": "give `binding: {rows: <expression>}`",
    "binding.before_line": "give the kernel file's line of a statement directly in the kernel's body; the wait goes before it",
    "units_per_rank": "give the number of equal units each shard is cut into, a positive integer",
    "chunks": "list each chunk's slice of a shard as [lo, hi] in units (units_per_rank)",
    "world": "give the number of ranks the transfers are written for, a positive integer",
    "transfers": "list transfers as {chunk: [block, index], from: RANK, to: RANK, step: N}",
    # Keys of one transfer, looked up as 'transfers.<key>'.
    "transfers.id": "give the transfer a name (a string) that `after` lists can use",
    "transfers.chunk": "name the chunk as [block, index]: block = the rank it comes from, index < chunks_per_rank",
    "transfers.into": "name the destination region as [block, index]",
    "transfers.from": "give the sending rank, an integer in 0..world-1",
    "transfers.to": "give the receiving rank, an integer in 0..world-1",
    "transfers.step": "give the step as a non-negative integer",
    "transfers.after": "list the ids (or list indices) of transfers that must land on the sending rank first",
    "transfers.mode": "use push or pull",
    "transfers.reduce": "use sum, prod, max, min or avg",
    "transfers.signal": "write true or false",
}


def _aliases(model) -> str:
    return ", ".join(f.alias or n for n, f in model.model_fields.items())


# Unknown-key messages list the keys allowed where the unknown one stands.
_KNOWN_KEYS = {"": f"the schedule keys are {_aliases(Schedule)}", "binding": f"the keys of binding are {_aliases(Binding)}",
               "transfers": f"the keys of a transfer are {_aliases(Transfer)}"}


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
                key = _joined_surrogates(k.value)
                line = k.start_mark.line + 1
                if key in out:
                    # YAML keeps the last value silently; a schedule with two values for a key is a mistake.
                    raise ScheduleError(f"duplicate key (first on line {lines[path + (key,)]}, again on line {line}); "
                                        "keep only one of them", ScheduleLocation(file, _where(path + (key,)), line))
                lines[path + (key,)] = line
                out[key] = walk(v, path + (key,))
            return out
        if isinstance(n, yaml.SequenceNode):
            out = []
            for i, v in enumerate(n.value):
                lines[path + (i,)] = v.start_mark.line + 1
                out.append(walk(v, path + (i,)))
            return out
        return _joined_surrogates(yaml.safe_load(yaml.serialize(n)))

    return walk(node, ()), lines


def _joined_surrogates(value):
    # JSON writes a character beyond U+FFFF as a pair of \\u escapes ("\\ud83d\\ude00"); YAML reads
    # them as two lone surrogates. Join the pairs, so JSON text loads as json.loads would read it.
    if isinstance(value, str):
        try:
            return value.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            return value  # a lone surrogate: from_dict names its key
    return value


def _lone_surrogate(data: Any, path: tuple = ()) -> tuple | None:
    """The key path of the first key or text value that is not valid Unicode (a lone surrogate);
    pydantic would refuse it without saying where."""
    def bad(text):
        return isinstance(text, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)

    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        if bad(key) or bad(value):
            return path + (key,)
        found = _lone_surrogate(value, path + (key,))
        if found is not None:
            return found
    return None


def _explain(err: dict, loc: tuple) -> str:
    kind, got = err["type"], err.get("input")
    names = [str(p) for p in loc if not isinstance(p, int)]
    key = ".".join(names)
    hint = _KEY_HINTS.get(key) or _KEY_HINTS.get(".".join(names[:2])) or _KEY_HINTS.get(names[0] if names else "", "")
    if kind == "extra_forbidden":
        return f"unknown key; {_KNOWN_KEYS.get(names[0] if len(names) > 1 else '', _KNOWN_KEYS[''])}"
    if kind in ("too_short", "too_long", "tuple_type") and key in ("chunks", "transfers.chunk", "transfers.into"):
        return f"{got!r} is not a pair; {hint}"
    if kind == "missing":
        return f"missing required key; {hint}" if hint else "missing required key"
    if kind in ("greater_than_equal", "greater_than"):
        limit = err.get("ctx", {}).get("ge", err.get("ctx", {}).get("gt"))
        return f"must be at least {limit} (got {got!r}); {hint}"
    if kind in ("literal_error",):
        return f"{got!r} is not allowed; {hint}"
    if kind.startswith(("int", "string", "bool", "list", "tuple", "model")):
        return f"{got!r} has the wrong type; {hint}"
    msg = err["msg"].removeprefix("Value error, ")
    return msg if msg.endswith(hint) or not hint else f"{msg}; {hint}" if "; " not in msg else msg


_BRANCHES = {"int", "str", "bool", "list", "tuple"}


def _user_loc(loc: tuple, kind: str) -> tuple:
    # pydantic reports union branches as extra loc parts ('order', 'literal[...]', 'list[int]', 'int');
    # keep the user's keys and list indices (an unknown key is the user's even if it reads 'int' or 'x[').
    return tuple(p for i, p in enumerate(loc)
                 if not (isinstance(p, str) and ("[" in p or p in _BRANCHES) and not (kind == "extra_forbidden" and i == len(loc) - 1)))


def _where(path: tuple) -> str:
    """The key path as messages show it: a key that is no plain name (an unknown key '', 'x[0]', or
    one holding a lone surrogate) quoted and escaped, so that it is seen and the line can be printed."""
    return key_path(tuple(repr(p) if isinstance(p, str) and not p.isidentifier() else p for p in path))


def _line(lines: dict[tuple, int] | None, path: tuple) -> int | None:
    """Line of the deepest prefix of `path` that the file spells out."""
    if not lines:
        return None
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path) if path else None


def from_dict(data: Any, *, file: str | None = None, lines: dict[tuple, int] | None = None) -> Schedule:
    """Validate a plain mapping into a `Schedule`; errors name the key (and line, for files)."""
    if not isinstance(data, dict):
        raise ScheduleError("a schedule must be a mapping of keys to values", ScheduleLocation(file, "", 1 if file else None))
    broken = _lone_surrogate(data)
    if broken is not None:
        raise ScheduleError("holds a lone UTF-16 surrogate, which is not text; remove it or write the character it was meant to be",
                            ScheduleLocation(file, _where(broken), _line(lines, broken)))
    try:
        return Schedule.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = _user_loc(tuple(err["loc"]), err["type"])
        raise ScheduleError(_explain(err, loc), ScheduleLocation(file, _where(loc), _line(lines, loc))) from None
    except PlanError as exc:  # the full form contradicts itself: the key path is known, add file and line
        raise ScheduleError(exc.message, ScheduleLocation(file, key_path(exc.path), _line(lines, exc.path))) from None


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
