"""The little JQL the sandbox's Jira understands: enough for ``assign``'s ``balanced`` counts.

Clauses joined by ``AND`` (any case), each ``field = value`` or ``field != value``:

- ``assignee``: a Jira account id (``!=`` also leaves out unassigned issues, as Jira does);
- ``statusCategory``: ``"To Do"``, ``"In Progress"`` or ``Done`` (or their ids 2, 4, 3);
- ``status``, ``project``: a name or key, case-insensitive.

A value is a bare word or a double- or single-quoted string, in which a backslash escapes the
next character. The sandbox has no workflows: a status is in ``Done`` when its name is one of
``DONE_STATUSES``, in ``To Do`` when it is one of ``TO_DO_STATUSES``, else ``In Progress``.
Anything else (``OR``, ``IN``, ``ORDER BY``, other fields or functions) is ``UnsupportedJql``,
which the fake answers with Jira's 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DONE_STATUSES = frozenset({"done", "closed", "resolved", "cancelled", "canceled", "won't do",
                           "declined", "rejected"})
TO_DO_STATUSES = frozenset({"to do", "todo", "open", "new", "backlog", "reopened",
                            "waiting for first response", "waiting for support"})
CATEGORIES = {"to do": "To Do", "2": "To Do", "new": "To Do",
              "in progress": "In Progress", "4": "In Progress", "indeterminate": "In Progress",
              "done": "Done", "3": "Done"}
FIELDS = ("assignee", "statusCategory", "status", "project")

_TOKEN = re.compile(r"""\s*(?:(?P<op>!=|=)|"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>(?:[^'\\]|\\.)*)'"""
                    r"""|(?P<word>[A-Za-z0-9_.@:\-]+))""")


_KEYS_IN = re.compile(r"""\s*key\s+in\s*\((?P<keys>.*)\)\s*""", re.IGNORECASE | re.DOTALL)


def keys_in(jql: str) -> list[str]:
    """The keys of ``key in ("A-1", B-2, ...)``, the one search the sandbox answers (the ACK
    watcher reads its waits' issues so); anything else is ``UnsupportedJql``."""
    found = _KEYS_IN.fullmatch(jql)
    if found is None:
        raise UnsupportedJql("only key in (...) can be searched")
    keys: list[str] = []
    for part in found.group("keys").split(","):
        tokens = _tokens(part)
        if len(tokens) != 1 or tokens[0][0] not in ("word", "string"):
            raise UnsupportedJql(f"not one issue key: {part.strip()!r}")
        keys.append(tokens[0][1])
    return keys


class UnsupportedJql(ValueError):
    """A JQL the sandbox cannot read; the message says why."""


def status_category(status: str | None) -> str:
    """The sandbox's status category of a status name."""
    name = (status or "").strip().lower()
    if name in DONE_STATUSES:
        return "Done"
    return "To Do" if name in TO_DO_STATUSES or not name else "In Progress"


@dataclass(frozen=True)
class Clause:
    field: str
    negated: bool
    value: str

    def matches(self, issue: Any) -> bool:
        """``issue``: anything with ``assignee``, ``status`` and ``project_key``."""
        if self.field == "assignee":
            if issue.assignee is None:
                return False  # Jira: "!=" never matches an empty field either
            return (issue.assignee == self.value) != self.negated
        if self.field == "statusCategory":
            return (status_category(issue.status) == self.value) != self.negated
        actual = issue.status if self.field == "status" else issue.project_key
        return ((actual or "").lower() == self.value.lower()) != self.negated


def parse(jql: str) -> Callable[[Any], bool]:
    """A predicate on sandbox issues for ``jql``, or ``UnsupportedJql``."""
    tokens = _tokens(jql)
    if not tokens:
        raise UnsupportedJql("the JQL query is empty; a count needs a bounded query")
    clauses = []
    while True:
        clauses.append(_clause(tokens))
        if not tokens:
            break
        kind, text = tokens.pop(0)
        if kind != "word" or text.upper() != "AND":
            raise UnsupportedJql(f"expected AND after a clause, found {text!r} (the sandbox "
                                 f"reads only clauses joined by AND)")
    return lambda issue: all(clause.matches(issue) for clause in clauses)


def _tokens(jql: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while position < len(jql):
        if not jql[position:].strip():
            break
        found = _TOKEN.match(jql, position)
        if found is None:
            raise UnsupportedJql(f"the sandbox cannot read the JQL from {jql[position:]!r}")
        kind = found.lastgroup or ""
        text = found.group(kind)
        if kind in ("dq", "sq"):
            kind, text = "string", re.sub(r"\\(.)", r"\1", text)
        tokens.append((kind, text))
        position = found.end()
    return tokens


def _clause(tokens: list[tuple[str, str]]) -> Clause:
    if len(tokens) < 3:
        raise UnsupportedJql("a clause is 'field = value' or 'field != value'")
    (field_kind, field), (op_kind, op), (value_kind, value) = tokens[:3]
    del tokens[:3]
    name = {f.lower(): f for f in FIELDS}.get(field.lower()) if field_kind == "word" else None
    if name is None:
        raise UnsupportedJql(f"Field {field!r} is not supported by the sandbox (it reads "
                             f"{', '.join(FIELDS)})")
    if op_kind != "op" or value_kind not in ("word", "string"):
        raise UnsupportedJql(f"after {field!r} the sandbox reads only = or != and one value")
    if name == "statusCategory":
        category = CATEGORIES.get(value.lower())
        if category is None:
            raise UnsupportedJql(f"The value {value!r} does not exist for the field "
                                 f"'statusCategory'.")
        value = category
    return Clause(name, op == "!=", value)
