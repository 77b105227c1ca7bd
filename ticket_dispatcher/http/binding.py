"""Reading request bodies and query strings into checked values (400/413/415, never 500)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import falcon

from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.http.errors import ApiError

# The largest id or offset the database can hold (a signed 64-bit integer); anything larger is
# bad input, answered 400/404 before it reaches a query.
MAX_ID = 2**63 - 1

JSON_TYPES: dict[type, str] = {
    str: "a string", bool: "a boolean", int: "an integer", dict: "an object", list: "an array",
}


def read_json(req: falcon.Request, limit: int, *, required: bool = True) -> Any:
    """The request body as JSON, refusing bodies over ``limit`` bytes before reading them."""
    length = req.content_length
    if length is not None and length > limit:
        raise ApiError(falcon.HTTP_413, f"the body is {length} bytes; the limit is {limit}")
    if not length and req.get_header("Transfer-Encoding") is None:
        if required:
            raise InvalidInput("a JSON body is required")
        return None
    content_type = (req.content_type or "").split(";")[0].strip().lower()
    if content_type != falcon.MEDIA_JSON:
        raise ApiError(falcon.HTTP_415, "send the body as application/json")
    raw = req.bounded_stream.read(limit + 1)
    if len(raw) > limit:
        raise ApiError(falcon.HTTP_413, f"the body exceeds the limit of {limit} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from None


def bind_object(raw: Any, *, required: dict[str, type], optional: dict[str, type],
                path: str = "") -> dict:
    """Check that ``raw`` is an object with exactly these keys of these JSON types.

    Every problem is reported at once; ``bool`` is never accepted as an integer.
    """
    where = path or "body"
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where} must be a JSON object", [Problem(where, "must be an object")])
    problems = [
        Problem(_join(path, key), "is missing") for key in required if key not in raw
    ]
    fields = {**required, **optional}
    for key, value in raw.items():
        expected = fields.get(key)
        if expected is None:
            problems.append(Problem(_join(path, key), "is not a known field"))
        elif value is None and key in optional:
            continue
        elif not _is_type(value, expected):
            problems.append(Problem(_join(path, key), f"must be {JSON_TYPES[expected]}"))
        elif expected is int and not -MAX_ID <= value <= MAX_ID:
            problems.append(Problem(_join(path, key), "is out of range"))
    if problems:
        raise InvalidInput(f"{where} is not valid", problems)
    return raw


def _is_type(value: Any, expected: type) -> bool:
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def query_int(req: falcon.Request, name: str, *, default: int | None, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    text = req.get_param(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise InvalidInput(f"query parameter {name} must be an integer {bounds}",
                           [Problem(name, f"must be an integer {bounds}")])
    return value


def query_choice(req: falcon.Request, name: str, parse: Callable[[str], Any],
                 allowed: str) -> Any:
    text = req.get_param(name)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError:
        raise InvalidInput(f"query parameter {name} must be {allowed}",
                           [Problem(name, f"must be {allowed}")]) from None


def paging(req: falcon.Request) -> tuple[int, int]:
    """``limit`` (1..200, default 50) and ``offset`` (>= 0) of a list endpoint (SPEC §10)."""
    return (query_int(req, "limit", default=50, minimum=1, maximum=200),
            query_int(req, "offset", default=0, maximum=MAX_ID))


def page(items: list, total: int) -> dict:
    return {"items": [item.to_json() for item in items], "total": total}
