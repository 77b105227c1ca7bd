"""What the policy validators share: a problem list, the generic JSON checks, and ``quote``,
which every message uses to show the value it rejects.

The policy validator (``validation.py``), the condition compiler (``conditions.py``) and each
action executor's ``validate_config`` (``actions/``) import this module; it imports none of
them, so none of them needs another to phrase a problem.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from ticket_dispatcher.errors import Problem

if TYPE_CHECKING:
    from ticket_dispatcher.domain.catalog import NameRule

QUOTE_LIMIT = 100  # characters of a rejected value shown in a message


def printable(text: str, limit: int = QUOTE_LIMIT) -> str:
    """Control characters and lone surrogates escaped so a message prints anywhere; cut at
    ``limit`` characters with "…"."""
    shown = "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text[:limit]
    )
    return shown + ("…" if len(text) > limit else "")


def quote(value: Any) -> str:
    """The rejected value as a message shows it: a string in double quotes as written
    (a regex's backslashes are not doubled), anything else as compact JSON; control characters
    escaped and the text cut at ``QUOTE_LIMIT`` characters, the cut marked with "…"."""
    if isinstance(value, str):
        cut = "…" if len(value) > QUOTE_LIMIT else ""
        return f'"{printable(value[:QUOTE_LIMIT])}"{cut}'
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = type(value).__name__
    return printable(text)


def quoted(values: Any) -> str:
    """Several rejected values: ``"a", "b"``."""
    return ", ".join(quote(value) for value in values)


def reason(exc: ValueError, value: str) -> str:
    """A parser's message with its Python ``repr`` of ``value`` replaced by ``quote(value)``,
    so every message quotes alike (the time helpers word their own errors)."""
    message = str(exc)
    if repr(value) in message:
        return message.replace(repr(value), quote(value), 1)
    return f"{quote(value)}: {message}"


class Problems(list[Problem]):
    """Problems in the order found; ``shape`` makes a body unreadable, ``rule`` only invalid."""

    def shape(self, path: str, message: str) -> None:
        self.append(Problem(path, message, "shape"))

    def rule(self, path: str, message: str) -> None:
        self.append(Problem(path, message, "rule"))


def at(path: str, key: str | int) -> str:
    """The JSON path of ``key`` under ``path``: ``rules[0]``, ``trigger.enable``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_keys(
    raw: dict,
    path: str,
    allowed: tuple[str, ...],
    problems: Problems,
    *,
    required: tuple[str, ...] = (),
    server_keys: frozenset[str] = frozenset(),
) -> None:
    # The key is the last step of the path, so "unknown key" needs no quote of its own.
    for key in raw:
        if key in server_keys:
            problems.shape(at(path, key), "is assigned by the server")
        elif key not in allowed:
            problems.shape(at(path, key), "unknown key")
    for key in required:
        if key not in raw:
            problems.shape(at(path, key), "missing key")


def check_object(value: Any, path: str, problems: Problems) -> bool:
    if not isinstance(value, dict):
        problems.shape(path, "must be a JSON object")
        return False
    return True


def check_config_object(config: Any, path: str, problems: Problems) -> bool:
    """An action's config: present (``None`` means the key is missing) and a JSON object."""
    if config is None:
        problems.shape(path, "missing key")
        return False
    return check_object(config, path, problems)


def check_text(value: Any, path: str, problems: Problems) -> bool:
    """A string (shape) that is not blank (rule)."""
    if not isinstance(value, str):
        problems.shape(path, "must be a string")
        return False
    if not value.strip():
        problems.rule(path, "must not be empty")
        return False
    return True


def check_text_list(
    value: Any, path: str, problems: Problems, *, non_empty: bool = False, unique: bool = False
) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.shape(path, "must be a list of strings")
        return None
    if non_empty and not value:
        problems.rule(path, "must not be empty")
    for index, item in enumerate(value):
        if not item.strip():
            problems.rule(at(path, index), "must not be empty")
    repeated = [item for index, item in enumerate(value) if item in value[:index]]
    if unique and repeated:
        problems.rule(path, f"must not contain duplicates: {quoted(dict.fromkeys(repeated))}")
    return value


def check_name(value: Any, path: str, rule: NameRule, problems: Problems) -> bool:
    """False, with a rule problem, for a non-blank string ``rule`` refuses (a draft may hold it;
    it cannot be activated). A blank or non-string value is ``check_text``'s to report, so each
    mistake is reported once."""
    if not isinstance(value, str) or not value.strip() or rule(value):
        return True
    hint = f" ({rule.hint})" if rule.hint else ""
    problems.rule(path, f"{quote(value)} is not {rule.what}{hint}")
    return False


def check_names(values: Any, path: str, rule: NameRule, problems: Problems) -> None:
    """``check_name`` for each element of a list (a non-list is ``check_text_list``'s)."""
    for index, value in enumerate(values if isinstance(values, list) else ()):
        check_name(value, at(path, index), rule, problems)


# Integers are stored in 32-bit columns (rule priority) or compared in the database; a value
# outside this range would fail there, so it makes the body unreadable, not just invalid.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def check_int(value: Any, path: str, problems: Problems) -> bool:
    if isinstance(value, bool) or not isinstance(value, int):
        problems.shape(path, "must be an integer")
        return False
    if not INT32_MIN <= value <= INT32_MAX:
        problems.shape(path, f"{value} is not between {INT32_MIN} and {INT32_MAX}")
        return False
    return True


def check_enum(value: Any, path: str, choices: type[StrEnum], problems: Problems) -> None:
    allowed = ", ".join(member.value for member in choices)
    if not isinstance(value, str):
        problems.shape(path, f"must be one of {allowed}")
    elif value not in {member.value for member in choices}:
        problems.rule(path, f"{quote(value)} is not one of {allowed}")
