"""Rule conditions: compile operator JSON into a typed tree, then evaluate it.

The language is documented in docs/policies.md, "Conditions".

``compile_condition`` is the only place that reads condition JSON. It reports every problem at
once (the validator relies on that) and compiles regexes, zones and times exactly once, so
``evaluate`` cannot meet an expression error the validator could have prevented.

Semantics settled here:
- A field is *missing* when it is ``None`` or an empty collection. ``""`` is a present string,
  except ``issue.reporter_email``, which is missing when the reporter is ``None`` or Jira hides
  the email (an empty email names nobody).
- Every text operator on a collection is applied per element and any-matches, ``contains``
  included: ``issue.labels contains "db"`` is true for the label ``"db-outage"``. Membership is
  ``eq`` / ``in``. ``ne``, ``not_in`` and ``not_contains`` negate the positive any-match.
- ``time_window`` is half-open ``[start, end)`` in local wall-clock time of its zone, so it follows
  DST changes; ``end`` may be ``"24:00"`` to reach midnight.

Hostile policies and issues: neither can stall the process.
- ``regex`` runs on RE2 (``google-re2``): linear in the text, no backtracking, and RE2 releases
  the GIL while it matches. What RE2 cannot run (backreferences, lookaround, possessive
  quantifiers, atomic groups, ...) is rejected at compile time with the construct named. Patterns
  use RE2 syntax and search semantics: ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII-only, and
  ``$`` matches only at the end of the text (no trailing-newline exception).
- As a second fence a regex searches at most the first ``MAX_REGEX_SUBJECT`` characters of a
  value (of each element of a collection): a match must end within them. ``$`` and ``\\b`` still
  see that the value goes on, so ``x$`` does not match a long value cut after an ``x``.
- ``all``/``any``/``not`` nest at most ``MAX_CONDITION_DEPTH`` levels. Compile stops descending at
  the limit (so no input can reach ``RecursionError``) and reports a shape problem there;
  ``evaluate`` refuses a deeper hand-built tree with ``ConditionError``.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from zoneinfo import ZoneInfo

import re2

from ticket_dispatcher.domain.catalog import FIELDS, OPERATORS, WEEKDAYS, FieldKind
from ticket_dispatcher.domain.checks import printable, quote, quoted, reason
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.errors import DispatcherError, Problem
from ticket_dispatcher.timeutil import format_time, parse_rfc3339, zone_named


class ConditionError(DispatcherError):
    """A condition reached evaluation with a defect the validator should have caught."""


# A regex sees at most this many characters of a value: a second fence behind RE2's linear time
# (a Jira summary is at most 255 characters; descriptions are not a condition field).
MAX_REGEX_SUBJECT = 10_000
# Levels of all/any/not nesting. Real policies use two or three; the cap keeps every walk over
# a condition (compile, evaluate, reasons) far from Python's recursion limit.
MAX_CONDITION_DEPTH = 16
MAX_REASON_VALUE = 200  # characters of an issue's value quoted in a reason
_DEPTH_MESSAGE = f"conditions nest deeper than {MAX_CONDITION_DEPTH} levels of all, any and not"


class Regex(typing.Protocol):
    """What a compiled RE2 pattern offers here (google-re2 ships no type stubs)."""

    def search(self, text: bytes, pos: int, endpos: int) -> object | None: ...


# --- the typed tree -------------------------------------------------------------------------


@dataclass(frozen=True)
class Always:
    pass


@dataclass(frozen=True)
class All:
    children: tuple[Condition, ...]


@dataclass(frozen=True)
class Any:
    children: tuple[Condition, ...]


@dataclass(frozen=True)
class Not:
    child: Condition


@dataclass(frozen=True)
class TimeWindow:
    zone: ZoneInfo
    weekdays: frozenset[int]  # 0 = Monday, as datetime.weekday()
    start_minute: int  # minutes after local midnight, inclusive
    end_minute: int  # exclusive; 1440 for "24:00"

    def describe(self) -> str:
        days = ",".join(day for i, day in enumerate(WEEKDAYS) if i in self.weekdays)
        return f"{days} {_hhmm(self.start_minute)}-{_hhmm(self.end_minute)} {self.zone.key}"


@dataclass(frozen=True)
class Leaf:
    field: str
    operator: str
    value: str | None = None
    values: tuple[str, ...] = ()
    ignore_case: bool = False
    pattern: Regex | None = None  # regex, compiled once with RE2
    moment: datetime | None = None  # before / after
    window: TimeWindow | None = None  # time_window


Condition = Always | All | Any | Not | Leaf

_COMPOSITE_KEYS = ("always", "all", "any", "not")
_LEAF_KEYS = frozenset({"field", "operator", "value", "values", "ignore_case", "time_window"})
_VALUE_OPERATORS = frozenset({"eq", "ne", "contains", "not_contains", "regex"})
_VALUES_OPERATORS = frozenset({"in", "not_in"})
_TIME_OPERATORS = frozenset({"before", "after"})
_PRESENCE_OPERATORS = frozenset({"exists", "not_exists"})
_NEGATIONS = {"ne": "eq", "not_in": "in", "not_contains": "contains"}
_WINDOW_KEYS = ("timezone", "weekdays", "start", "end")
_HHMM = re.compile(r"([0-9]{2}):([0-9]{2})")  # fullmatch: "$" would take a final "\n"


# --- compile --------------------------------------------------------------------------------


def compile_condition(
    raw: typing.Any, path: str = "when"
) -> tuple[Condition | None, list[Problem]]:
    """Turn condition JSON into a tree; the tree is ``None`` whenever any problem was found."""
    problems: list[Problem] = []
    condition = _compile_node(raw, path, problems, 0)
    return (None if problems else condition), problems


def _shape(problems: list[Problem], path: str, message: str) -> None:
    problems.append(Problem(path, message, "shape"))


def _rule(problems: list[Problem], path: str, message: str) -> None:
    problems.append(Problem(path, message, "rule"))


def _compile_node(
    raw: typing.Any, path: str, problems: list[Problem], depth: int
) -> Condition | None:
    """``depth`` counts the all/any/not nodes above ``raw``; the walk never passes the cap."""
    if not isinstance(raw, dict):
        _shape(problems, path, "a condition must be a JSON object")
        return None
    composite = [key for key in _COMPOSITE_KEYS if key in raw]
    if composite and len(raw) == 1:
        if composite[0] != "always" and depth >= MAX_CONDITION_DEPTH:
            # A shape problem: the body is refused (HTTP 400), never stored, never walked.
            _shape(problems, path, _DEPTH_MESSAGE)
            return None
        return _compile_composite(composite[0], raw[composite[0]], path, problems, depth + 1)
    if not composite and ("field" in raw or "operator" in raw):
        return _compile_leaf(raw, path, problems)
    _shape(problems, path, "a condition must be exactly one of always, all, any, not, "
                           "or a leaf with field and operator")
    return None


def _compile_composite(
    key: str, body: typing.Any, path: str, problems: list[Problem], depth: int
) -> Condition | None:
    sub = f"{path}.{key}"
    if key == "always":
        if not isinstance(body, bool):
            _shape(problems, sub, "always must be true")
        elif body is not True:
            _rule(problems, sub, "always must be true; to never match, remove the rule")
        return Always()
    if key == "not":
        child = _compile_node(body, sub, problems, depth)
        return Not(child) if child is not None else None
    if not isinstance(body, list):
        _shape(problems, sub, f"{key} must be a list of conditions")
        return None
    if not body:
        _rule(problems, sub, f"{key} needs at least one condition; "
                             'use {"always": true} for a rule that always matches')
        return None
    compiled = [
        _compile_node(item, f"{sub}[{i}]", problems, depth) for i, item in enumerate(body)
    ]
    children = tuple(child for child in compiled if child is not None)
    if len(children) < len(compiled):
        return None
    return (All if key == "all" else Any)(children)


def _compile_leaf(raw: dict, path: str, problems: list[Problem]) -> Leaf | None:
    before = len(problems)
    for key in raw:
        if key not in _LEAF_KEYS:
            _shape(problems, f"{path}.{key}", "unknown key")
    field = _required_string(raw, "field", path, problems)
    operator = _required_string(raw, "operator", path, problems)
    ignore_case = raw.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        _shape(problems, f"{path}.ignore_case", "ignore_case must be true or false")
        ignore_case = False
    if field is not None and field not in FIELDS:
        _rule(problems, f"{path}.field", f"unknown field {quote(field)}; see GET /dispatch/options")
        field = None
    if field is not None and operator is not None:
        allowed = OPERATORS[FIELDS[field]]
        if operator not in allowed:
            _rule(problems, f"{path}.operator", f"operator {quote(operator)} is not allowed on "
                  f"{field} ({FIELDS[field].value}); allowed: {', '.join(allowed)}")
            operator = None
    if field is None or operator is None:
        return None
    if ignore_case and operator not in _VALUE_OPERATORS | _VALUES_OPERATORS:
        _rule(problems, f"{path}.ignore_case", f"ignore_case does not apply to {quote(operator)}")
    leaf = _compile_operands(raw, Leaf(field, operator, ignore_case=ignore_case), path, problems)
    return leaf if len(problems) == before else None


def _required_string(raw: dict, key: str, path: str, problems: list[Problem]) -> str | None:
    if key not in raw:
        _shape(problems, f"{path}.{key}", "missing key")
        return None
    if not isinstance(raw[key], str):
        _shape(problems, f"{path}.{key}", f"{key} must be a string")
        return None
    return raw[key]


def _compile_operands(raw: dict, leaf: Leaf, path: str, problems: list[Problem]) -> Leaf | None:
    """Check that exactly the operands the operator needs are present, and compile them."""
    operator = leaf.operator
    needs = {
        "value": operator in _VALUE_OPERATORS | _TIME_OPERATORS,
        "values": operator in _VALUES_OPERATORS,
        "time_window": operator == "time_window",
    }
    for key, needed in needs.items():
        if key in raw and not needed:
            _rule(problems, f"{path}.{key}", f"{operator} does not take {key}")
        elif needed and key not in raw:
            _rule(problems, f"{path}.{key}", f"{operator} needs {key}")
    if operator in _VALUES_OPERATORS:
        if "values" not in raw:  # reported above
            return None
        values = _compile_values(raw["values"], f"{path}.values", problems)
        return replace(leaf, values=values) if values else None
    if operator in _PRESENCE_OPERATORS:
        return leaf
    if operator == "time_window":
        if "time_window" not in raw:  # reported above
            return None
        window = _compile_window(raw["time_window"], f"{path}.time_window", problems)
        return replace(leaf, window=window) if window else None
    value = raw.get("value")
    if not isinstance(value, str):
        if "value" in raw:
            _shape(problems, f"{path}.value", "value must be a string")
        return None
    return _compile_value(replace(leaf, value=value), f"{path}.value", problems)


def _compile_values(raw: typing.Any, path: str, problems: list[Problem]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        _shape(problems, path, "values must be a list of strings")
        return ()
    if not raw:
        _rule(problems, path, "values must not be empty")
    return tuple(raw)


def _compile_value(leaf: Leaf, path: str, problems: list[Problem]) -> Leaf | None:
    assert leaf.value is not None
    if leaf.operator == "regex":
        pattern, problem = compile_regex(leaf.value, ignore_case=leaf.ignore_case)
        if problem is not None:
            _rule(problems, path, problem)
            return None
        return replace(leaf, pattern=pattern)
    if leaf.operator in _TIME_OPERATORS:
        try:
            return replace(leaf, moment=parse_rfc3339(leaf.value))
        except ValueError as exc:
            _rule(problems, path, reason(exc, leaf.value))
            return None
    return leaf


# --- regular expressions (RE2) --------------------------------------------------------------

# RE2 reports what it cannot run as "<reason>: <the text at fault>"; these prefixes of that text
# name the construct a Python or PCRE author most likely meant, so the validation message names
# it. Longest prefixes first.
_UNSUPPORTED = (
    ("(?P=", "backreferences are not supported"),
    ("(?P>", "recursive patterns are not supported"),
    ("(?<=", "lookbehind assertions are not supported"),
    ("(?<!", "negative lookbehind assertions are not supported"),
    ("(?=", "lookahead assertions are not supported"),
    ("(?!", "negative lookahead assertions are not supported"),
    ("(?>", "atomic groups are not supported"),
    ("(?#", "inline comments are not supported"),
    ("(?(", "conditional groups are not supported"),
    ("(?R", "recursive patterns are not supported"),
    ("(?&", "recursive patterns are not supported"),
    ("\\k", "backreferences are not supported"),
    ("\\g", "backreferences are not supported"),
    ("\\Z", "\\Z is not supported, use \\z for the end of the text"),
)
_BACKREFERENCE = re.compile(r"\\[1-9]")  # RE2's fault text for \1 .. \9 (our own pattern)


def compile_regex(pattern: str, *, ignore_case: bool = False) -> tuple[Regex | None, str | None]:
    """Compile with RE2 → ``(regex, None)``, or ``(None, message)`` naming what is wrong and
    quoting the pattern."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern to stderr
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options), None
    except UnicodeEncodeError:
        return None, f"invalid regular expression {quote(pattern)}: not valid Unicode text"
    except re2.error as exc:
        return None, _regex_message(pattern, exc)


def _regex_message(pattern: str, exc: re2.error) -> str:
    detail = exc.args[0] if exc.args else ""
    if isinstance(detail, bytes):  # google-re2 passes RE2's message through as bytes
        detail = detail.decode("utf-8", "replace")
    reason, _, fault = str(detail).partition(": ")
    construct = _unsupported_construct(pattern, reason, fault)
    if construct is not None:
        return f"{construct} (RE2 syntax): {quote(pattern)}"
    shown = f"{reason}: {printable(fault)}" if fault else (reason or "rejected by RE2")
    return f"invalid regular expression {quote(pattern)}: {shown}"


def _unsupported_construct(pattern: str, reason: str, fault: str) -> str | None:
    if fault == "(?P":  # RE2 cuts (?P=name) and (?P>name) to "(?P"
        fault = next((p for p in ("(?P=", "(?P>") if p in pattern), fault)
    construct = next((text for prefix, text in _UNSUPPORTED if fault.startswith(prefix)), None)
    if construct is None and _BACKREFERENCE.fullmatch(fault):
        construct = "backreferences are not supported"
    if construct is None and reason == "bad repetition operator" and fault.endswith("+"):
        construct = "possessive quantifiers are not supported"  # a++, a*+, a?+, a{2}+
    return construct


def _regex_search(regex: Regex, text: str) -> bool:
    """Search the first ``MAX_REGEX_SUBJECT`` characters. One more character goes along as
    context only, so ``$`` and ``\\b`` know the value goes on. ``surrogatepass`` keeps a lone
    surrogate from Jira JSON searchable (RE2 reads it as one character) instead of raising."""
    head = text[:MAX_REGEX_SUBJECT].encode("utf-8", "surrogatepass")
    more = text[MAX_REGEX_SUBJECT:MAX_REGEX_SUBJECT + 1].encode("utf-8", "surrogatepass")
    return regex.search(head + more, 0, len(head)) is not None


def _compile_window(raw: typing.Any, path: str, problems: list[Problem]) -> TimeWindow | None:
    if not isinstance(raw, dict):
        _shape(problems, path, "time_window must be an object")
        return None
    before = len(problems)
    for key in raw:
        if key not in _WINDOW_KEYS:
            _shape(problems, f"{path}.{key}", "unknown key")
    for key in _WINDOW_KEYS:
        if key not in raw:
            _shape(problems, f"{path}.{key}", "missing key")
    # A missing key is reported above; each part is compiled (and a null refused) only if given.
    zone = (_compile_zone(raw["timezone"], f"{path}.timezone", problems)
            if "timezone" in raw else None)
    weekdays = (_compile_weekdays(raw["weekdays"], f"{path}.weekdays", problems)
                if "weekdays" in raw else None)
    start = (_compile_hhmm(raw["start"], f"{path}.start", problems, allow_24=False)
             if "start" in raw else None)
    end = (_compile_hhmm(raw["end"], f"{path}.end", problems, allow_24=True)
           if "end" in raw else None)
    if start is not None and end is not None and start >= end:
        _rule(problems, f"{path}.end", f"end {quote(raw['end'])} must be later than start "
                                       f"{quote(raw['start'])} (windows do not wrap midnight; "
                                       "use two windows under any)")
    if len(problems) > before or zone is None or weekdays is None or start is None or end is None:
        return None
    return TimeWindow(zone, weekdays, start, end)


def _compile_zone(raw: typing.Any, path: str, problems: list[Problem]) -> ZoneInfo | None:
    if not isinstance(raw, str):
        _shape(problems, path, "timezone must be a string")
        return None
    zone = zone_named(raw)
    if zone is None:
        _rule(problems, path, f"unknown time zone {quote(raw)}; use an IANA name like "
                              '"Asia/Shanghai"')
    return zone


def _compile_weekdays(
    raw: typing.Any, path: str, problems: list[Problem]
) -> frozenset[int] | None:
    if not isinstance(raw, list) or not all(isinstance(day, str) for day in raw):
        _shape(problems, path, "weekdays must be a list of strings")
        return None
    if not raw:
        _rule(problems, path, "weekdays must not be empty")
    unknown = [day for day in raw if day not in WEEKDAYS]
    if unknown:
        noun = "weekday" if len(unknown) == 1 else "weekdays"
        _rule(problems, path, f"unknown {noun} {quoted(unknown)}; use {', '.join(WEEKDAYS)}")
    repeated = [day for index, day in enumerate(raw) if day in raw[:index]]
    if repeated:
        _rule(problems, path, f"weekdays must not repeat: {quoted(dict.fromkeys(repeated))}")
    return frozenset(WEEKDAYS.index(day) for day in raw if day in WEEKDAYS)


def _compile_hhmm(
    raw: typing.Any, path: str, problems: list[Problem], *, allow_24: bool
) -> int | None:
    if not isinstance(raw, str):
        _shape(problems, path, "must be a string like 09:00")
        return None
    match = _HHMM.fullmatch(raw)
    minutes = int(match[1]) * 60 + int(match[2]) if match else -1
    valid = match and int(match[2]) < 60 and (minutes < 1440 or (allow_24 and minutes == 1440))
    if not valid:
        limit = "00:00..24:00" if allow_24 else "00:00..23:59"
        _rule(problems, path, f"{quote(raw)} is not a time HH:MM in {limit}")
        return None
    return minutes


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


# --- evaluate -------------------------------------------------------------------------------


def evaluate(
    condition: Condition | dict, issue: Issue, now: datetime
) -> tuple[bool, str]:
    """Evaluate against the issue snapshot at business time ``now`` → (matched, reason)."""
    matched, reason, _ = evaluate_explained(condition, issue, now)
    return matched, reason


def explain(condition: Condition | dict, issue: Issue, now: datetime) -> dict:
    """The whole condition with every node evaluated, for a reader who wants each leaf's
    verdict and not only the ones the reason names (``evaluate_explained``)."""
    return evaluate_explained(condition, issue, now)[2]


def evaluate_explained(
    condition: Condition | dict, issue: Issue, now: datetime
) -> tuple[bool, str, dict]:
    """``evaluate``'s (matched, reason) and the tree behind them, from one walk.

    The tree mirrors the condition: ``{"all"|"any"|"not": [children], "matched"}``,
    ``{"always": true, "matched": true}``, and per leaf ``{"field", "operator", "expected",
    "actual", "matched", "reason"}`` (``"ignore_case": true`` where set). ``expected`` is the
    operand as the rule wrote it (the value, the values, the pattern, the moment; a time window
    as its description; None for exists/not_exists); ``actual`` is the issue's value as the
    leaf's reason shows it, cut like it (``MAX_REASON_VALUE``), None when the field is missing.
    Every child is evaluated (they are pure and cheap), so the tree is complete whichever child
    decided; it is stored with each rule execution, and a leaf's reason is the text ``evaluate``
    joins into its own."""
    if isinstance(condition, dict):
        compiled, problems = compile_condition(condition)
        if compiled is None:
            raise ConditionError("condition is invalid", problems)
        condition = compiled
    if now.tzinfo is None:
        raise ConditionError("business time must be timezone-aware")
    tree, reason = _evaluate(condition, issue, now, 0)
    return tree["matched"], reason, tree


def _evaluate(condition: Condition, issue: Issue, now: datetime, depth: int) -> tuple[dict, str]:
    """→ (the node explained, its reason)."""
    if isinstance(condition, Always):
        return {"always": True, "matched": True}, "always"
    if isinstance(condition, Leaf):
        return _evaluate_leaf(condition, issue, now)
    if not isinstance(condition, Not | All | Any):
        # The type name only: repr() of a foreign object could itself be deep or large.
        raise ConditionError(f"not a condition: {type(condition).__name__}")
    if depth >= MAX_CONDITION_DEPTH:  # only a hand-built tree gets here; compile stops earlier
        raise ConditionError(_DEPTH_MESSAGE)
    if isinstance(condition, Not):
        child, reason = _evaluate(condition.child, issue, now, depth + 1)
        return {"not": [child], "matched": not child["matched"]}, f"not ({reason})"
    return _evaluate_composite(condition, issue, now, depth + 1)


def _evaluate_composite(
    condition: All | Any, issue: Issue, now: datetime, depth: int
) -> tuple[dict, str]:
    # Every child is evaluated (they are pure and cheap) so the reason names each deciding one.
    results = [_evaluate(child, issue, now, depth) for child in condition.children]
    if isinstance(condition, All):
        matched = all(node["matched"] for node, _ in results)
        shown = results if matched else [r for r in results if not r[0]["matched"]]
        key, label = "all", "all" if matched else "all failed on"
    else:
        matched = any(node["matched"] for node, _ in results)
        shown = [r for r in results if r[0]["matched"]] if matched else results
        key, label = "any", "any matched" if matched else "any: none of"
    node = {key: [child for child, _ in results], "matched": matched}
    return node, f"{label} [{'; '.join(reason for _, reason in shown)}]"


def field_value(field: str, issue: Issue, now: datetime) -> typing.Any:
    """The value of a catalog field; ``None`` or ``()`` when missing."""
    getter = _FIELD_GETTERS.get(field)
    if getter is None:
        raise ConditionError(f"unknown field {quote(field)}")
    return getter(issue, now)


def _reporter_email(issue: Issue, now: datetime) -> str | None:
    return issue.reporter.email if issue.reporter and issue.reporter.email else None


_FIELD_GETTERS: dict[str, Callable[[Issue, datetime], typing.Any]] = {
    "issue.project_key": lambda issue, now: issue.project_key,
    "issue.environment": lambda issue, now: issue.environment,
    "issue.reporter_email": _reporter_email,
    "issue.summary": lambda issue, now: issue.summary,
    "issue.primary_component": lambda issue, now: (issue.components or (None,))[0],
    "issue.priority": lambda issue, now: issue.priority,
    "issue.status": lambda issue, now: issue.status,
    "issue.custom_fields.severity": lambda issue, now: issue.severity,
    "issue.components": lambda issue, now: tuple(issue.components),
    "issue.component": lambda issue, now: tuple(issue.components),  # alias
    "issue.labels": lambda issue, now: tuple(issue.labels),
    "issue.created_at": lambda issue, now: issue.created_at,
    "now": lambda issue, now: now,
}


def _evaluate_leaf(leaf: Leaf, issue: Issue, now: datetime) -> tuple[dict, str]:
    actual = field_value(leaf.field, issue, now)
    missing = actual is None or actual == ()
    shown = None if missing else _show(leaf, actual)
    if leaf.operator in _PRESENCE_OPERATORS:
        exists = not missing
        reason = f"{leaf.field} exists" if exists else f"{leaf.field} is missing"
        return _leaf_node(leaf, shown, exists == (leaf.operator == "exists"), reason)
    negated = leaf.operator in _NEGATIONS
    if missing:
        # Positive operators are false on a missing field, their negations true.
        suffix = f", so {leaf.operator} holds" if negated else ""
        return _leaf_node(leaf, shown, negated, f"{leaf.field} is missing{suffix}")
    if FIELDS[leaf.field] is FieldKind.TIME:
        return _leaf_node(leaf, shown, *_evaluate_time(leaf, actual, shown))
    positive = _NEGATIONS.get(leaf.operator, leaf.operator)
    elements = actual if isinstance(actual, tuple) else (actual,)
    hit = any(_text_test(positive, leaf, element) for element in elements)
    matched = hit != negated
    return _leaf_node(leaf, shown, matched, _text_reason(leaf, actual, shown, matched))


def _leaf_node(leaf: Leaf, shown: str | None, matched: bool, reason: str) -> tuple[dict, str]:
    node = {"field": leaf.field, "operator": leaf.operator, "expected": _expected(leaf),
            "actual": shown, "matched": matched, "reason": reason}
    if leaf.ignore_case:
        node["ignore_case"] = True
    return node, reason


def _expected(leaf: Leaf) -> str | list[str] | None:
    """The leaf's operand as the rule wrote it; a time window by its description."""
    if leaf.operator in _VALUES_OPERATORS:
        return list(leaf.values)
    if leaf.window is not None:
        return leaf.window.describe()
    return leaf.value  # None for exists / not_exists


def _show(leaf: Leaf, actual: typing.Any) -> str:
    """The issue's value (present) as a reason quotes it."""
    if isinstance(actual, datetime):
        if leaf.window is None:
            return format_time(actual)
        local = _local(actual, leaf.window.zone)
        if local is None:
            return f"{format_time(actual)} (past the calendar's end in {leaf.window.zone.key})"
        return f"{format_time(actual)} ({local.strftime('%a %H:%M').lower()} local)"
    return _shown(_json(list(actual) if isinstance(actual, tuple) else actual))


def _fold(text: str, leaf: Leaf) -> str:
    return text.casefold() if leaf.ignore_case else text


def _text_test(operator: str, leaf: Leaf, element: str) -> bool:
    if operator == "regex":
        if leaf.pattern is None:
            raise ConditionError("regex leaf was not compiled")
        return _regex_search(leaf.pattern, element)
    actual = _fold(element, leaf)
    if operator == "eq":
        return actual == _fold(leaf.value or "", leaf)
    if operator == "in":
        return actual in {_fold(value, leaf) for value in leaf.values}
    if operator == "contains":
        return _fold(leaf.value or "", leaf) in actual
    raise ConditionError(f"unknown operator {quote(operator)}")


_PHRASES = {  # operator → (phrase when it holds, phrase when it does not)
    "eq": ("==", "!="), "ne": ("!=", "=="), "in": ("in", "not in"), "not_in": ("not in", "in"),
    "contains": ("contains", "does not contain"),
    "not_contains": ("does not contain", "contains"),
    "regex": ("matches", "does not match"),
    "before": ("is before", "is not before"), "after": ("is after", "is not after"),
    "time_window": ("is within", "is outside"),
}


def _text_reason(leaf: Leaf, actual: typing.Any, shown: str | None, matched: bool) -> str:
    phrase = _PHRASES[leaf.operator][0 if matched else 1]
    if leaf.operator in _VALUES_OPERATORS:
        operand = _json(list(leaf.values))
    elif leaf.operator == "regex":
        operand = f"/{leaf.value}/"
    else:
        operand = _json(leaf.value)
    case = " (ignoring case)" if leaf.ignore_case else ""
    return f"{leaf.field} {shown} {phrase} {operand}{case}{_cut_note(leaf, actual)}"


def _cut_note(leaf: Leaf, actual: typing.Any) -> str:
    elements = actual if isinstance(actual, tuple) else (actual,)
    if leaf.operator != "regex" or all(len(e) <= MAX_REGEX_SUBJECT for e in elements):
        return ""
    return f" (searched in the first {MAX_REGEX_SUBJECT} characters)"


def _json(value: typing.Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _shown(text: str) -> str:
    """The issue's value as a reason shows it: a summary of 100k characters must not be stored
    whole on every rule execution."""
    if len(text) <= MAX_REASON_VALUE:
        return text
    return f"{text[:MAX_REASON_VALUE]}… ({len(text)} characters)"


def _local(moment: datetime, zone: ZoneInfo) -> datetime | None:
    """``moment`` in ``zone``; None for the hours at either end of years 1 to 9999 that the
    zone's offset moves off the calendar (such a moment is in no window)."""
    try:
        return moment.astimezone(zone)
    except OverflowError:
        return None


def _evaluate_time(leaf: Leaf, actual: datetime, shown: str | None) -> tuple[bool, str]:
    if leaf.operator == "time_window":
        assert leaf.window is not None
        local = _local(actual, leaf.window.zone)
        minute = -1 if local is None else local.hour * 60 + local.minute  # whole minutes
        matched = (
            local is not None and local.weekday() in leaf.window.weekdays
            and leaf.window.start_minute <= minute < leaf.window.end_minute
        )
        operand = leaf.window.describe()
    else:
        assert leaf.moment is not None
        matched = actual < leaf.moment if leaf.operator == "before" else actual > leaf.moment
        operand = format_time(leaf.moment)
    phrase = _PHRASES[leaf.operator][0 if matched else 1]
    return matched, f"{leaf.field} {shown} {phrase} {operand}"
