"""Reading request bodies and query strings into checked values (400/413/415, never 500).

Every body passes three fences before a resource sees it:

- **Depth and numbers**: ``safejson.parse_json`` (no ``RecursionError``, no non-finite number).
- **Text.** Every string, object keys included, is checked for C0 control characters
  (U+0000–U+001F) and lone surrogates (U+D800–U+DFFF). PostgreSQL refuses both (NUL in ``text``,
  surrogates are not UTF-8) and SQLite would store a NUL, so they are refused here, the same on
  both engines, with the JSON path of each offender (the first ``MAX_TEXT_PROBLEMS``).
  Single-line text (names, emails, labels, keys, sources, ids, condition values) takes no control
  character at all. The caller names the few multi-line free-text paths (a policy
  ``description``) where TAB, LF and CR are allowed: they are ordinary in prose, and harmless
  to both engines.

Query and path parameters get the single-line text check in ``TextParameters`` (a middleware:
one place for every route, present and future).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Protocol, TypeVar, overload

import falcon

from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.safejson import (  # noqa: F401 - bind_object is part of this API
    DEFAULT_JSON_DEPTH,
    MAX_ID,
    bind_object,
    join_path,
    parse_json,
)

MAX_TEXT_PROBLEMS = 10  # offending strings reported per body; the rest would only repeat them

# C0 controls and lone surrogates; the multi-line variant spares TAB, LF and CR.
# Control characters, lone surrogates, and the bidirectional embeddings, overrides and
# isolates, which would show a name reversed or out of place to whoever reads it.
_BIDI = "\u202a-\u202e\u2066-\u2069"
_BAD_SINGLE_LINE = re.compile(f"[\x00-\x1f{_BIDI}\ud800-\udfff]")
_BAD_MULTI_LINE = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f{_BIDI}\ud800-\udfff]")
_INDEX = re.compile(r"\[\d+\]")


def read_json(req: falcon.Request, limit: int, *, required: bool = True,
              max_depth: int = DEFAULT_JSON_DEPTH,
              multiline: Collection[str] = ()) -> Any:
    """The request body as checked JSON, refusing bodies over ``limit`` bytes before reading them.

    ``max_depth`` is ``http.max_json_depth``; ``multiline`` lists the JSON paths of multi-line
    free text, array indices written ``[]`` (``"description"``); everything below such a path
    may hold TAB, LF and CR.
    """
    _refuse_declared_over(req, limit)
    if not req.content_length and req.get_header("Transfer-Encoding") is None:
        if required:
            raise InvalidInput("a JSON body is required")
        return None
    content_type = (req.content_type or "").split(";")[0].strip().lower()
    if content_type != falcon.MEDIA_JSON:
        raise ApiError(falcon.HTTP_415, "send the body as application/json")
    value = parse_json(read_bounded(req, limit), max_depth=max_depth)
    problems = text_problems(value, multiline=multiline)
    if problems:
        raise InvalidInput("the body holds control characters, bidirectional controls or lone "
                           "surrogates", problems)
    return value


def read_bounded(req: falcon.Request, limit: int, setting: str = "") -> bytes:
    """The raw request body, refused with a 413 when it is over ``limit`` bytes: by its
    declared length before anything is read, else once more than ``limit`` bytes came.
    ``setting`` names the setting the limit comes from, for the message."""
    _refuse_declared_over(req, limit, setting)
    raw = req.bounded_stream.read(limit + 1)
    if len(raw) > limit:
        raise ApiError(falcon.HTTP_413, f"the body exceeds the limit of {limit} bytes"
                                        f"{_named(setting)}")
    return raw


def _refuse_declared_over(req: falcon.Request, limit: int, setting: str = "") -> None:
    length = req.content_length
    if length is not None and length > limit:
        raise ApiError(falcon.HTTP_413, f"the body is {length} bytes; the limit is {limit}"
                                        f"{_named(setting)}")


def _named(setting: str) -> str:
    return f" ({setting})" if setting else ""


def text_problems(value: Any, *, multiline: Collection[str] = (),
                  limit: int = MAX_TEXT_PROBLEMS) -> list[Problem]:
    """The first ``limit`` strings of a parsed JSON value (keys and values) that hold a control
    character or a lone surrogate, each at its JSON path. Iterative: depth is no concern here."""
    problems: list[Problem] = []
    for path, text, is_key in _strings(value):
        found = _BAD_SINGLE_LINE.search(text)
        if found is not None and not is_key and _in_multiline(path, multiline):
            found = _BAD_MULTI_LINE.search(text, found.start())
        if found is None:
            continue
        what = "the key" if is_key else "the text"
        problems.append(Problem(path or "body", f"{what} must not contain "
                                                f"{_describe(found.group())}", "shape"))
        if len(problems) >= limit:
            break
    return problems


def check_text(text: str, path: str) -> str:
    """``text`` if it is single-line text without control characters or lone surrogates."""
    found = _BAD_SINGLE_LINE.search(text)
    if found is not None:
        message = f"must not contain {_describe(found.group())}"
        raise InvalidInput(f"{safe_text(path)} {message}", [Problem(safe_text(path), message)])
    return text


def safe_text(text: str) -> str:
    """``text`` with control characters and lone surrogates written as ``\\uXXXX``, so that
    an error message can name what was sent (a lone surrogate cannot even be encoded)."""
    return _BAD_SINGLE_LINE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _describe(char: str) -> str:
    code = f"U+{ord(char):04X}"
    if ord(char) >= 0xD800:
        return f"{code} (a lone surrogate)"
    if ord(char) >= 0x2000:
        return f"{code} (a bidirectional control)"
    return f"{code} (a control character)"


def _strings(value: Any) -> Iterator[tuple[str, str, bool]]:
    """Every string in ``value`` in document order as (path, text, is_key), without recursion."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            yield path, item, False
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                child_path = join_path(path, safe_text(key))
                yield child_path, key, True
                children.append((child_path, child))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend((f"{path}[{index}]", child) for index, child in reversed(
                list(enumerate(item))))


def _in_multiline(path: str, multiline: Collection[str]) -> bool:
    general = _INDEX.sub("[]", path)
    return any(general == prefix or general.startswith((prefix + ".", prefix + "["))
               for prefix in multiline)


class TextParameters:
    """Falcon middleware: query parameters (names and values) and string path parameters are
    single-line text, or the request is a 400 naming the parameter.

    ``GET /dispatch/policies?family_id=%00`` was once a 500 on PostgreSQL; checking here
    covers every route, present and future. Register it after ``ApiKeyAuth`` (an unknown
    caller learns nothing but 401) and before ``DatabaseConnection`` (a refusal takes no
    connection).
    """

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         params: dict[str, Any]) -> None:
        if resource is None:
            return
        problems = [problem for name, text in _parameters(req, params)
                    for problem in text_problems({name: text}, limit=1)]
        if problems:
            raise InvalidInput("a query or path parameter holds control characters or lone "
                               "surrogates", problems[:MAX_TEXT_PROBLEMS])


def _parameters(req: falcon.Request, params: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for name, value in params.items():
        if isinstance(value, str):
            yield name, value
    for name, value in req.params.items():
        for text in value if isinstance(value, list) else [value]:
            yield name, text


class QueryParams(Protocol):
    """What the query readers below read: a ``falcon.Request``, or the console's ``Query``."""

    def get_param(self, name: str, /) -> str | None: ...


class JsonShown(Protocol):
    """An item of a list answer: it shows itself as JSON."""

    def to_json(self) -> dict[str, Any]: ...


T = TypeVar("T")
_DIGITS = re.compile(r"[0-9]{1,19}")


@overload
def query_int(req: QueryParams, name: str, *, default: int, minimum: int = 0,
              maximum: int | None = None) -> int: ...
@overload
def query_int(req: QueryParams, name: str, *, default: int | None, minimum: int = 0,
              maximum: int | None = None) -> int | None: ...


def query_int(req: QueryParams, name: str, *, default: int | None, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    text = req.get_param(name)
    if text is None:
        return default
    # ASCII digits only: int() would also take "+5", " 5", "1_0" and other scripts' digits
    value = int(text) if _DIGITS.fullmatch(text) else None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise InvalidInput(f"query parameter {name} must be an integer {bounds}",
                           [Problem(name, f"must be an integer {bounds}")])
    return value


def query_choice(req: QueryParams, name: str, parse: Callable[[str], T],
                 allowed: str) -> T | None:
    text = req.get_param(name)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError:
        raise InvalidInput(f"query parameter {name} must be {allowed}",
                           [Problem(name, f"must be {allowed}")]) from None


def flag(text: str) -> bool:
    """A boolean query parameter's value (``query_choice``'s ``parse``): true, false, 1 or 0."""
    lowered = text.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise ValueError(text)


def paging(req: QueryParams) -> tuple[int, int]:
    """``limit`` (1..200, default 50) and ``offset`` (>= 0) of a list endpoint."""
    return (query_int(req, "limit", default=50, minimum=1, maximum=200),
            query_int(req, "offset", default=0, maximum=MAX_ID))


def page(items: Sequence[JsonShown], total: int) -> dict[str, Any]:
    return {"items": [item.to_json() for item in items], "total": total}
