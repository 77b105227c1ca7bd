"""Reading untrusted JSON (request bodies, policy, issue and example files): never a
RecursionError, never a non-finite number, every failure an ``InvalidInput`` (a 400, never a
500); and binding a parsed object to the keys and JSON types it must have.

- **Depth.** Nesting beyond ``max_depth`` (``http.max_json_depth``, default 64) is
  refused by a linear scan of the text *before* ``json.loads`` runs.
- **Numbers.** ``NaN``/``Infinity`` (and ``1e400``, which Python reads as infinity) are not JSON
  and PostgreSQL's ``jsonb`` refuses them; integers too long for Python to convert are refused
  instead of escaping as ``ValueError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ticket_dispatcher.errors import InvalidInput, Problem

# The largest id or offset the database can hold (a signed 64-bit integer); anything larger is
# bad input, answered 400/404 before it reaches a query.
MAX_ID = 2**63 - 1

JSON_TYPES: dict[type, str] = {
    str: "a string", bool: "a boolean", int: "an integer", dict: "an object", list: "an array",
}
DEFAULT_JSON_DEPTH = 64  # http.max_json_depth; callers pass the configured value
# Where nesting happens; strings are skipped by the scanner, so brackets inside them never count.
_STRUCTURE = re.compile(r'["\\\[\]{}]')


def parse_json(raw: bytes | str, *, max_depth: int = DEFAULT_JSON_DEPTH,
               what: str = "the body") -> Any:
    """``raw`` as JSON no deeper than ``max_depth``; every failure is ``InvalidInput`` whose
    message starts with ``what`` (and never quotes the content)."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what} is not valid UTF-8: {exc.reason} at byte {exc.start}") \
            from None
    if json_depth_exceeds(text, max_depth):
        raise InvalidInput(f"{what} nests deeper than {max_depth} levels",
                           [Problem("body", f"nests deeper than {max_depth} levels", "shape")])
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:
        # ValueError: a non-finite number, or an integer too long to convert (Python caps
        # int() at 4300 digits). RecursionError cannot happen below the depth cap (at most 512,
        # see HttpConfig); kept as a fence so no body ever becomes a 500.
        raise InvalidInput(f"{what} is not valid JSON: {_number_reason(exc)}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:20]} is too large")
    return value


def _number_reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    message = str(exc)
    return "an integer has too many digits" if "digits" in message else message


def json_depth_exceeds(text: str, max_depth: int) -> bool:
    """Whether the JSON ``text`` nests arrays/objects deeper than ``max_depth``.

    Linear and without recursion: it jumps from one structural character to the next, skipping
    string contents (escapes included). Malformed text is left for ``json.loads`` to report.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return False  # nearly every real body: too few brackets to be too deep
    depth = 0
    in_string = False
    skip_to = 0  # the character after a backslash is escaped, whatever it is
    for match in _STRUCTURE.finditer(text):
        at = match.start()
        if at < skip_to:
            continue
        char = match.group()
        if in_string:
            if char == "\\":
                skip_to = at + 2
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif char in "]}":
            depth -= 1
    return False


def read_json_file(path: str | Path, what: str = "", *,
                   max_depth: int = DEFAULT_JSON_DEPTH) -> Any:
    """A JSON file (policies, issues, examples); ``InvalidInput`` when unreadable."""
    what = what or str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {what}: {exc.strerror}") from None
    return parse_json(raw, max_depth=max_depth, what=what)


def bind_object(raw: Any, *, required: Mapping[str, type], optional: Mapping[str, type],
                path: str = "") -> dict:
    """Check that ``raw`` is an object with exactly these keys of these JSON types.

    Every problem is reported at once; ``bool`` is never accepted as an integer.
    """
    where = path or "body"
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where} must be a JSON object", [Problem(where, "must be an object")])
    problems = [
        Problem(join_path(path, key), "is missing") for key in required if key not in raw
    ]
    fields = {**required, **optional}
    for key, value in raw.items():
        expected = fields.get(key)
        if expected is None:
            problems.append(Problem(join_path(path, key), "is not a known field"))
        elif value is None and key in optional:
            continue
        elif not _is_type(value, expected):
            problems.append(Problem(join_path(path, key),
                                    f"must be {JSON_TYPES[expected]}, not {_shown_json(value)}"))
        elif expected is int and not -MAX_ID <= value <= MAX_ID:
            problems.append(Problem(join_path(path, key), "is out of range"))
    if problems:
        raise InvalidInput(f"{where} is not valid", problems)
    return raw


def _shown_json(value: Any, limit: int = 40) -> str:
    """A value of the wrong JSON type as a message quotes it: a string, number, boolean or
    null as JSON (control characters escaped), cut at ``limit`` characters and the cut marked
    with "…"; an object or an array by its type alone."""
    if isinstance(value, dict | list):
        return JSON_TYPES[type(value)]
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


def _is_type(value: Any, expected: type) -> bool:
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def join_path(path: str, key: str) -> str:
    """``rules[0]`` + ``when`` → ``rules[0].when``; a top-level key stands alone."""
    return f"{path}.{key}" if path else key
