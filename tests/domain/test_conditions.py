"""Condition compile and evaluate (docs/policies.md, "Conditions")."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

import pytest

from ticket_dispatcher.domain import conditions
from ticket_dispatcher.domain.conditions import (
    All,
    Always,
    ConditionError,
    Leaf,
    Not,
    compile_condition,
    evaluate,
)
from ticket_dispatcher.domain.model import Issue, JiraUser

NOW = datetime(2026, 3, 9, 2, 0, tzinfo=UTC)  # Monday 10:00 in Asia/Shanghai


def make_issue(**overrides) -> Issue:
    issue = Issue(
        key="TCID-1",
        project_key="TCID",
        summary="Database is down",
        environment="prod",
        reporter=JiraUser("acc-r", "reporter@example.com", "Reporter"),
        assignee=None,
        created_at=datetime(2026, 3, 1, 8, 0, tzinfo=UTC),
        components=("Billing", "DB"),
        labels=("auto-dispatch", "db-outage"),
        priority="P1",
        status="Todo",
        severity="S1",
    )
    return dataclasses.replace(issue, **overrides)


def leaf(field: str, operator: str, **operands) -> dict:
    return {"field": field, "operator": operator, **operands}


def check(condition: dict, issue: Issue | None = None, now: datetime = NOW) -> bool:
    return evaluate(condition, issue or make_issue(), now)[0]


# --- fields ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("issue.project_key", "TCID"),
        ("issue.environment", "prod"),
        ("issue.reporter_email", "reporter@example.com"),
        ("issue.summary", "Database is down"),
        ("issue.primary_component", "Billing"),
        ("issue.priority", "P1"),
        ("issue.status", "Todo"),
        ("issue.custom_fields.severity", "S1"),
        ("issue.components", "DB"),
        ("issue.component", "DB"),
        ("issue.labels", "db-outage"),
    ],
)
def test_every_text_field_reads_its_issue_attribute(field, value):
    assert check(leaf(field, "eq", value=value))
    assert not check(leaf(field, "eq", value=value + "-other"))


def test_primary_component_is_the_first_component_only():
    assert not check(leaf("issue.primary_component", "eq", value="DB"))


def test_time_fields_read_created_at_and_business_now():
    assert check(leaf("issue.created_at", "before", value="2026-03-01T08:00:01Z"))
    assert not check(leaf("issue.created_at", "before", value="2026-03-01T08:00:00Z"))
    assert check(leaf("now", "after", value="2026-03-09T01:59:59Z"))
    assert not check(leaf("now", "after", value="2026-03-09T02:00:00Z"))


# --- operators ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "operands", "expected"),
    [
        ("eq", {"value": "P1"}, True),
        ("eq", {"value": "P2"}, False),
        ("ne", {"value": "P2"}, True),
        ("ne", {"value": "P1"}, False),
        ("in", {"values": ["P0", "P1"]}, True),
        ("in", {"values": ["P2"]}, False),
        ("not_in", {"values": ["P2", "P3"]}, True),
        ("not_in", {"values": ["P1"]}, False),
        ("contains", {"value": "1"}, True),
        ("contains", {"value": "2"}, False),
        ("not_contains", {"value": "2"}, True),
        ("not_contains", {"value": "1"}, False),
        ("regex", {"value": "^P[01]$"}, True),
        ("regex", {"value": "^P2"}, False),
        ("exists", {}, True),
        ("not_exists", {}, False),
    ],
)
def test_string_operators(operator, operands, expected):
    assert check(leaf("issue.priority", operator, **operands)) is expected


@pytest.mark.parametrize(
    ("operator", "operands", "expected"),
    [
        ("eq", {"value": "db-outage"}, True),
        ("ne", {"value": "db-outage"}, False),  # negation of any-match, not "some label differs"
        ("ne", {"value": "other"}, True),
        ("in", {"values": ["other", "db-outage"]}, True),
        ("in", {"values": ["other"]}, False),
        ("not_in", {"values": ["db-outage", "x"]}, False),
        ("not_in", {"values": ["x"]}, True),
        ("contains", {"value": "outage"}, True),  # substring of one element
        ("contains", {"value": "missing"}, False),
        ("not_contains", {"value": "outage"}, False),
        ("not_contains", {"value": "missing"}, True),
        ("regex", {"value": "^db-"}, True),
        ("regex", {"value": "^outage"}, False),
        ("exists", {}, True),
        ("not_exists", {}, False),
    ],
)
def test_collection_operators_any_match_and_negations_negate_it(operator, operands, expected):
    assert check(leaf("issue.labels", operator, **operands)) is expected


def test_regex_searches_anywhere_in_the_value():
    assert check(leaf("issue.summary", "regex", value="is do+wn"))


# --- missing fields -------------------------------------------------------------------------


MISSING_CASES = [
    ("issue.environment", {"environment": None}),
    ("issue.priority", {"priority": None}),
    ("issue.custom_fields.severity", {"severity": None}),
    ("issue.reporter_email", {"reporter": None}),
    ("issue.reporter_email", {"reporter": JiraUser("acc-r", "")}),  # Jira hid the email
    ("issue.components", {"components": ()}),
    ("issue.component", {"components": ()}),
    ("issue.primary_component", {"components": ()}),
    ("issue.labels", {"labels": ()}),
]


@pytest.mark.parametrize(("field", "overrides"), MISSING_CASES)
@pytest.mark.parametrize(
    ("operator", "operands", "expected"),
    [
        ("eq", {"value": "x"}, False),
        ("in", {"values": ["x"]}, False),
        ("contains", {"value": "x"}, False),
        ("regex", {"value": ".*"}, False),
        ("exists", {}, False),
        ("ne", {"value": "x"}, True),
        ("not_in", {"values": ["x"]}, True),
        ("not_contains", {"value": "x"}, True),
        ("not_exists", {}, True),
    ],
)
def test_missing_field_fails_positive_operators_and_passes_negations(
    field, overrides, operator, operands, expected
):
    matched, reason = evaluate(leaf(field, operator, **operands), make_issue(**overrides), NOW)
    assert matched is expected
    assert reason.startswith(f"{field} is missing")


def test_missing_created_at_fails_time_operators():
    issue = make_issue(created_at=None)
    assert not check(leaf("issue.created_at", "exists"), issue)
    assert not check(leaf("issue.created_at", "after", value="2000-01-01T00:00:00Z"), issue)
    assert not check(leaf("issue.created_at", "before", value="2100-01-01T00:00:00Z"), issue)


def test_empty_string_is_a_present_value():
    issue = make_issue(summary="")
    assert check(leaf("issue.summary", "exists"), issue)
    assert check(leaf("issue.summary", "eq", value=""), issue)


def test_missing_reason_reads_plainly():
    assert evaluate(leaf("issue.environment", "eq", value="prod"),
                    make_issue(environment=None), NOW) == (False, "issue.environment is missing")


# --- ignore_case ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "operator", "operands"),
    [
        ("issue.priority", "eq", {"value": "p1"}),
        ("issue.priority", "in", {"values": ["p0", "p1"]}),
        ("issue.summary", "contains", {"value": "DATABASE"}),
        ("issue.summary", "regex", {"value": "^database"}),
        ("issue.labels", "eq", {"value": "DB-OUTAGE"}),
    ],
)
def test_ignore_case_matches_other_case_only_when_asked(field, operator, operands):
    assert not check(leaf(field, operator, **operands))
    assert check(leaf(field, operator, ignore_case=True, **operands))


@pytest.mark.parametrize(
    ("operator", "operands"),
    [("ne", {"value": "p1"}), ("not_in", {"values": ["p1"]}),
     ("not_contains", {"value": "p"})],
)
def test_ignore_case_applies_to_negations(operator, operands):
    assert check(leaf("issue.priority", operator, **operands))
    assert not check(leaf("issue.priority", operator, ignore_case=True, **operands))


def test_ignore_case_uses_casefold():
    issue = make_issue(environment="STRASSE")
    assert check(leaf("issue.environment", "eq", value="straße", ignore_case=True), issue)


# --- composites -----------------------------------------------------------------------------


P1 = leaf("issue.priority", "eq", value="P1")
P2 = leaf("issue.priority", "eq", value="P2")


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ({"always": True}, True),
        ({"all": [P1]}, True),
        ({"all": [P1, P2]}, False),
        ({"any": [P2, P1]}, True),
        ({"any": [P2]}, False),
        ({"not": P2}, True),
        ({"not": P1}, False),
        ({"not": {"not": P1}}, True),
        ({"all": [{"any": [P2, {"not": P2}]}, {"not": {"all": [P1, P2]}}, {"always": True}]}, True),
        ({"any": [{"all": [P1, P2]}, {"not": {"any": [P1]}}]}, False),
    ],
)
def test_nested_composites(condition, expected):
    assert check(condition) is expected


def test_leaf_reason_shows_value_and_operand():
    condition = leaf("issue.priority", "in", values=["P0", "P1"])
    assert evaluate(condition, make_issue(), NOW) == (True, 'issue.priority "P1" in ["P0","P1"]')
    assert evaluate(condition, make_issue(priority="P3"), NOW) == (
        False, 'issue.priority "P3" not in ["P0","P1"]')


def test_composite_reason_names_the_deciding_children():
    matched, reason = evaluate({"all": [P1, P2]}, make_issue(), NOW)
    assert not matched
    assert reason == 'all failed on [issue.priority "P1" != "P2"]'
    assert evaluate({"any": [P2, P1]}, make_issue(), NOW)[1] == (
        'any matched [issue.priority "P1" == "P1"]')
    assert evaluate({"not": P2}, make_issue(), NOW)[1] == 'not (issue.priority "P1" != "P2")'


# --- time -----------------------------------------------------------------------------------


def window(zone: str, weekdays: list[str], start: str, end: str, field: str = "now") -> dict:
    return leaf(field, "time_window", time_window={
        "timezone": zone, "weekdays": weekdays, "start": start, "end": end})


SHANGHAI_OFFICE = window("Asia/Shanghai", ["mon", "tue", "wed", "thu", "fri"], "09:00", "18:00")


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (datetime(2026, 3, 9, 0, 59, 59, tzinfo=UTC), False),  # Mon 08:59:59 local
        (datetime(2026, 3, 9, 1, 0, tzinfo=UTC), True),  # Mon 09:00 local: start inclusive
        (datetime(2026, 3, 9, 9, 59, 59, tzinfo=UTC), True),  # Mon 17:59:59 local
        (datetime(2026, 3, 9, 10, 0, tzinfo=UTC), False),  # Mon 18:00 local: end exclusive
        (datetime(2026, 3, 7, 2, 0, tzinfo=UTC), False),  # Saturday
        (datetime(2026, 3, 8, 17, 0, tzinfo=UTC), False),  # Sunday in UTC, Monday 01:00 local
        (datetime(2026, 3, 9, 9, 0, tzinfo=UTC), True),  # UTC weekday and local weekday agree
    ],
)
def test_time_window_edges_in_shanghai(now, expected):
    assert check(SHANGHAI_OFFICE, now=now) is expected


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (datetime(2026, 3, 7, 13, 59, tzinfo=UTC), False),  # Sat 08:59 EST
        (datetime(2026, 3, 7, 14, 0, tzinfo=UTC), True),  # Sat 09:00 EST (UTC-5)
        (datetime(2026, 3, 8, 13, 0, tzinfo=UTC), True),  # Sun 09:00 EDT (UTC-4) after the change
        (datetime(2026, 3, 8, 14, 0, tzinfo=UTC), False),  # Sun 10:00 EDT: end exclusive
    ],
)
def test_time_window_follows_new_york_dst_change(now, expected):
    weekend_morning = window("America/New_York", ["sat", "sun"], "09:00", "10:00")
    assert check(weekend_morning, now=now) is expected


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (datetime(2026, 3, 22, 7, 0, tzinfo=UTC), True),  # 08:00 CET
        (datetime(2026, 3, 29, 7, 0, tzinfo=UTC), False),  # 09:00 CEST
        (datetime(2026, 3, 29, 6, 0, tzinfo=UTC), True),  # 08:00 CEST
    ],
)
def test_time_window_follows_berlin_dst_change(now, expected):
    assert check(window("Europe/Berlin", ["sun"], "08:00", "09:00"), now=now) is expected


def test_time_window_end_2400_reaches_midnight():
    late = window("UTC", ["mon"], "23:00", "24:00")
    assert check(late, now=datetime(2026, 3, 9, 23, 59, 59, tzinfo=UTC))
    assert not check(late, now=datetime(2026, 3, 10, 0, 0, tzinfo=UTC))


def test_time_window_on_created_at():
    # created 2026-03-01T08:00Z = Sunday 16:00 in Shanghai
    assert check(window("Asia/Shanghai", ["sun"], "16:00", "17:00", field="issue.created_at"))


def test_a_time_the_zone_moves_past_the_calendars_end_is_in_no_window():
    # an issue created in the last hour of 9999 (UTC) is a Jira value no check refused: it is
    # 10000-01-01 in Shanghai, a day no window holds
    created = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    evening = window("Asia/Shanghai", ["fri"], "00:00", "24:00", field="issue.created_at")

    matched, reason = evaluate(evening, make_issue(created_at=created), NOW)

    assert not matched
    assert "past the calendar's end in Asia/Shanghai" in reason


def test_time_window_reason_shows_local_time():
    matched, reason = evaluate(SHANGHAI_OFFICE, make_issue(), NOW)
    assert matched
    assert reason == ("now 2026-03-09T02:00:00.000Z (mon 10:00 local) is within "
                      "mon,tue,wed,thu,fri 09:00-18:00 Asia/Shanghai")


def test_before_and_after_compare_instants_across_offsets():
    # 2026-03-01T16:00:00+08:00 is the same instant as created_at
    assert not check(leaf("issue.created_at", "before", value="2026-03-01T16:00:00+08:00"))
    assert not check(leaf("issue.created_at", "after", value="2026-03-01T16:00:00+08:00"))
    assert check(leaf("issue.created_at", "after", value="2026-03-01T15:59:59+08:00"))


def test_now_exists():
    assert check(leaf("now", "exists"))


# --- evaluate's contract --------------------------------------------------------------------


def test_evaluate_rejects_an_invalid_raw_condition_as_a_defect():
    with pytest.raises(ConditionError) as caught:
        evaluate(leaf("issue.nope", "eq", value="x"), make_issue(), NOW)
    assert caught.value.problems[0].path == "when.field"


def test_evaluate_rejects_naive_business_time():
    with pytest.raises(ConditionError):
        evaluate({"always": True}, make_issue(), datetime(2026, 3, 9, 2, 0))


def test_regex_is_compiled_once_at_compile_time(monkeypatch):
    compiled, problems = compile_condition(leaf("issue.summary", "regex", value="down$"))
    assert problems == [] and isinstance(compiled, Leaf)
    assert compiled.pattern is not None and compiled.pattern.search(b"is down") is not None

    def no_compile(*args, **kwargs):
        raise AssertionError("evaluate must not compile regexes")

    monkeypatch.setattr(conditions.re2, "compile", no_compile)
    assert evaluate(compiled, make_issue(), NOW)[0]


def test_compile_builds_a_typed_tree():
    compiled, problems = compile_condition({"all": [{"always": True}, {"not": P1}]})
    assert problems == []
    assert compiled == All((Always(), Not(Leaf("issue.priority", "eq", value="P1"))))


# --- compile problems -----------------------------------------------------------------------


def tw(**changes) -> dict:
    body = {"timezone": "Asia/Shanghai", "weekdays": ["mon"], "start": "09:00", "end": "18:00"}
    body.update(changes)
    return leaf("now", "time_window", time_window={k: v for k, v in body.items() if v != ...})


@pytest.mark.parametrize(
    ("raw", "path", "kind"),
    [
        ("always", "when", "shape"),
        ({}, "when", "shape"),
        ({"sometimes": True}, "when", "shape"),
        ({"all": [P1], "any": [P1]}, "when", "shape"),
        ({"all": [P1], "field": "issue.priority"}, "when", "shape"),
        ({"always": False}, "when.always", "rule"),
        ({"always": "yes"}, "when.always", "shape"),
        ({"all": []}, "when.all", "rule"),
        ({"any": []}, "when.any", "rule"),
        ({"any": P1}, "when.any", "shape"),
        ({"not": [P1]}, "when.not", "shape"),
        ({**P1, "extra": 1}, "when.extra", "shape"),
        ({"field": "issue.priority", "value": "P1"}, "when.operator", "shape"),
        ({"operator": "eq", "value": "P1"}, "when.field", "shape"),
        (leaf(["issue.priority"], "eq", value="P1"), "when.field", "shape"),
        (leaf("issue.nope", "eq", value="P1"), "when.field", "rule"),
        (leaf("issue.priority", "like", value="P1"), "when.operator", "rule"),
        (leaf("issue.priority", "before", value="2026-01-01T00:00:00Z"), "when.operator", "rule"),
        (leaf("now", "eq", value="x"), "when.operator", "rule"),
        (leaf("now", "not_exists"), "when.operator", "rule"),
        (leaf("issue.priority", "in"), "when.values", "rule"),
        (leaf("issue.priority", "in", values=[]), "when.values", "rule"),
        (leaf("issue.priority", "in", values="P1"), "when.values", "shape"),
        (leaf("issue.priority", "in", values=[1]), "when.values", "shape"),
        (leaf("issue.priority", "in", values=None), "when.values", "shape"),
        (leaf("issue.priority", "in", value="P1", values=["P1"]), "when.value", "rule"),
        (leaf("issue.priority", "eq"), "when.value", "rule"),
        (leaf("issue.priority", "eq", value=1), "when.value", "shape"),
        (leaf("issue.priority", "eq", values=["P1"], value="P1"), "when.values", "rule"),
        (leaf("issue.priority", "exists", value="P1"), "when.value", "rule"),
        (leaf("issue.priority", "regex", value="("), "when.value", "rule"),
        (leaf("now", "before", value="yesterday"), "when.value", "rule"),
        (leaf("now", "before", value="2026-01-01T00:00:00"), "when.value", "rule"),
        (leaf("now", "before"), "when.value", "rule"),
        ({**P1, "ignore_case": "yes"}, "when.ignore_case", "shape"),
        (leaf("issue.priority", "exists", ignore_case=True), "when.ignore_case", "rule"),
        ({**P1, "time_window": tw()["time_window"]}, "when.time_window", "rule"),
        (leaf("now", "time_window"), "when.time_window", "rule"),
        (leaf("now", "time_window", time_window="09-18"), "when.time_window", "shape"),
        (leaf("now", "time_window", time_window=None), "when.time_window", "shape"),
        (tw(timezone=None), "when.time_window.timezone", "shape"),
        (tw(weekdays=None), "when.time_window.weekdays", "shape"),
        (tw(start=None), "when.time_window.start", "shape"),
        (tw(end=None), "when.time_window.end", "shape"),
        (tw(timezone="Mars/Olympus"), "when.time_window.timezone", "rule"),
        (tw(timezone="../etc/passwd"), "when.time_window.timezone", "rule"),
        (tw(timezone="America"), "when.time_window.timezone", "rule"),  # a directory of zones
        (tw(timezone="x" * 300), "when.time_window.timezone", "rule"),  # too long a file name
        # in UTC these fall outside the years a datetime holds
        (leaf("now", "before", value="9999-12-31T23:59:59-23:59"), "when.value", "rule"),
        (leaf("issue.created_at", "after", value="0001-01-01T00:00:00+01:00"), "when.value",
         "rule"),
        (tw(timezone=8), "when.time_window.timezone", "shape"),
        (tw(weekdays=[]), "when.time_window.weekdays", "rule"),
        (tw(weekdays=["mon", "mon"]), "when.time_window.weekdays", "rule"),
        (tw(weekdays=["funday"]), "when.time_window.weekdays", "rule"),
        (tw(weekdays="mon"), "when.time_window.weekdays", "shape"),
        (tw(start="9:00"), "when.time_window.start", "rule"),
        (tw(start="\uff10\uff19:\uff10\uff10"), "when.time_window.start", "rule"),  # full-width
        (tw(start="09:00\n"), "when.time_window.start", "rule"),
        (tw(start="24:00", end="24:00"), "when.time_window.start", "rule"),
        (tw(start="09:60"), "when.time_window.start", "rule"),
        (tw(end="24:01"), "when.time_window.end", "rule"),
        (tw(start="18:00", end="09:00"), "when.time_window.end", "rule"),
        (tw(start="09:00", end="09:00"), "when.time_window.end", "rule"),
        (tw(end=...), "when.time_window.end", "shape"),
        (tw(days=["mon"]), "when.time_window.days", "shape"),
        ({"all": [{"always": True}, {"not": leaf("issue.x", "eq", value="1")}]},
         "when.all[1].not.field", "rule"),
    ],
)
def test_compile_reports_problem_with_path_and_kind(raw, path, kind):
    compiled, problems = compile_condition(raw)
    assert compiled is None
    assert [(p.path, p.kind) for p in problems] == [(path, kind)], problems


def test_compile_reports_every_problem_under_the_callers_prefix():
    raw = {"any": [leaf("issue.nope", "eq", value="x"),
                   leaf("issue.priority", "in", values=[]),
                   tw(timezone="Nowhere/City", start="19:00")]}
    _, problems = compile_condition(raw, "rules[2].when")
    assert [p.path for p in problems] == [
        "rules[2].when.any[0].field",
        "rules[2].when.any[1].values",
        "rules[2].when.any[2].time_window.timezone",
        "rules[2].when.any[2].time_window.end",
    ]


def test_compile_accepts_every_operator_of_every_field_kind():
    for raw in (
        leaf("issue.labels", "not_contains", value="x", ignore_case=True),
        leaf("issue.created_at", "exists"),
        tw(start="00:00", end="24:00"),
        leaf("now", "after", value="2026-01-01T00:00:00+08:00"),
    ):
        assert compile_condition(raw)[1] == []


# --- regular expressions run on RE2: linear time, whatever the pattern and text --------------


@pytest.mark.parametrize(
    ("pattern", "summary", "expected"),
    [
        (r"^Database is (down|up)$", "Database is down", True),
        (r"\bdown\b", "Database is down", True),
        (r"[[:upper:]]atabase", "Database is down", True),
        (r"(?P<what>data)base", "Database is down", False),
        (r"(?i)DATABASE", "Database is down", True),
        (r"\d{3}", "error 504 from db", True),
        (r"down$", "Database is down\n", False),  # RE2: $ is the very end, no newline exception
    ],
)
def test_regex_uses_re2_syntax_with_search_semantics(pattern, summary, expected):
    assert check(leaf("issue.summary", "regex", value=pattern),
                 make_issue(summary=summary)) is expected


def test_regex_ignore_case_is_given_to_re2():
    condition = leaf("issue.labels", "regex", value="^DB-OUT", ignore_case=True)
    assert check(condition)
    assert not check({**condition, "ignore_case": False})


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(a)\1", "backreferences"),
        (r"(?P<x>a)(?P=x)", "backreferences"),
        (r"(?P<x>a)\k<x>", "backreferences"),
        (r"(?P<x>a)\g<x>", "backreferences"),
        (r"db(?=-outage)", "lookahead assertions"),
        (r"db(?!-outage)", "negative lookahead assertions"),
        (r"(?<=db-)outage", "lookbehind assertions"),
        (r"(?<!db-)outage", "negative lookbehind assertions"),
        (r"a++", "possessive quantifiers"),
        (r"a*+", "possessive quantifiers"),
        (r"a{2}+", "possessive quantifiers"),
        (r"(?>a|ab)c", "atomic groups"),
        (r"(?R)?", "recursive patterns"),
        (r"(a)?(?(1)b|c)", "conditional groups"),
        (r"a(?#note)", "inline comments"),
    ],
)
def test_regex_constructs_re2_cannot_run_are_named_with_the_pattern_quoted(pattern, construct):
    compiled, problems = compile_condition(leaf("issue.summary", "regex", value=pattern))
    assert compiled is None
    assert [(p.path, p.kind) for p in problems] == [("when.value", "rule")]
    assert problems[0].message == f'{construct} are not supported (RE2 syntax): "{pattern}"'


def test_python_end_of_text_anchor_points_to_re2s():
    _, problems = compile_condition(leaf("issue.summary", "regex", value=r"down\Z"))
    assert problems[0].message == (
        r'\Z is not supported, use \z for the end of the text (RE2 syntax): "down\Z"')


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(", "missing ): ("),
        ("[a", "missing ]: [a"),
        ("a{2,1}", "invalid repetition size: {2,1}"),
        ("a**", "bad repetition operator: **"),
        ("(?x)a b", "invalid perl operator: (?x"),
    ],
)
def test_invalid_regex_quotes_the_pattern_and_re2s_reason(pattern, reason):
    _, problems = compile_condition(leaf("issue.summary", "regex", value=pattern))
    assert [p.message for p in problems] == [
        f'invalid regular expression "{pattern}": {reason}']


def test_regex_message_escapes_control_characters_and_cuts_long_patterns():
    _, problems = compile_condition(leaf("issue.summary", "regex", value="a\n(" + "x" * 500))
    message = problems[0].message
    assert message.startswith('invalid regular expression "a\\n(xxx')
    assert "\n" not in message and len(message) < 600


def test_regex_with_a_lone_surrogate_is_invalid_not_a_crash():
    _, problems = compile_condition(leaf("issue.summary", "regex", value="a\udfff"))
    assert [p.message for p in problems] == [
        'invalid regular expression "a\\udfff": not valid Unicode text']


def test_regex_searches_a_value_holding_a_lone_surrogate():
    issue = make_issue(summary="db \udfff down")
    assert check(leaf("issue.summary", "regex", value="db . down"), issue)


@pytest.mark.timeout(5)
def test_formerly_catastrophic_regex_is_accepted_and_runs_in_linear_time():
    condition = leaf("issue.summary", "regex", value="(a+)+$")
    assert compile_condition(condition)[1] == []
    hostile = make_issue(summary="a" * 100_000 + "!")

    started = time.monotonic()
    matched, _ = evaluate(condition, hostile, NOW)

    assert matched is False
    assert time.monotonic() - started < 2  # Python's re: longer than the age of the universe


def test_regex_sees_only_the_first_max_regex_subject_characters():
    cap = conditions.MAX_REGEX_SUBJECT
    assert cap == 10_000
    at_the_edge = make_issue(summary="x" * (cap - 6) + "needle" + "tail")
    beyond = make_issue(summary="x" * cap + "needle")
    straddling = make_issue(summary="x" * (cap - 3) + "needle")

    assert check(leaf("issue.summary", "regex", value="needle"), at_the_edge)
    assert not check(leaf("issue.summary", "regex", value="needle"), beyond)
    assert not check(leaf("issue.summary", "regex", value="needle"), straddling)
    # $ and \b still see that the value goes on past the cut.
    assert not check(leaf("issue.summary", "regex", value="x$"), beyond)
    assert not check(leaf("issue.summary", "regex", value=r"x\b"), beyond)
    assert check(leaf("issue.summary", "regex", value="x{1000}"), beyond)


def test_regex_cap_applies_to_each_collection_element_and_the_reason_says_so():
    cap = conditions.MAX_REGEX_SUBJECT
    issue = make_issue(labels=("x" * cap + "needle", "short-needle"))
    matched, reason = evaluate(leaf("issue.labels", "regex", value="needle$"), issue, NOW)
    assert matched
    assert reason.endswith(f"(searched in the first {cap} characters)")
    assert not check(leaf("issue.labels", "regex", value="^x+needle"), issue)
    assert not check(leaf("issue.labels", "regex", value="^x+$"), issue)


def test_short_values_get_no_cut_note_in_the_reason():
    _, reason = evaluate(leaf("issue.summary", "regex", value="down"), make_issue(), NOW)
    assert reason == 'issue.summary "Database is down" matches /down/'


# --- condition depth: no input reaches RecursionError ------------------------------------------


def nested(levels: int, key: str = "not", inner: dict = P1) -> dict:
    condition = inner
    for _ in range(levels):
        condition = {"not": condition} if key == "not" else {key: [condition]}
    return condition


@pytest.mark.parametrize("key", ["not", "all", "any"])
def test_conditions_may_nest_max_condition_depth_levels(key):
    assert conditions.MAX_CONDITION_DEPTH == 16
    compiled, problems = compile_condition(nested(16, key))
    assert problems == [] and compiled is not None
    assert evaluate(compiled, make_issue(), NOW)[0] is True  # 16 nots cancel out


@pytest.mark.parametrize(
    ("key", "step"), [("not", ".not"), ("all", ".all[0]"), ("any", ".any[0]")])
def test_one_level_deeper_is_a_shape_problem_at_the_level_that_crosses(key, step):
    compiled, problems = compile_condition(nested(17, key), "rules[0].when")
    assert compiled is None
    assert [(p.path, p.kind, p.message) for p in problems] == [
        ("rules[0].when" + step * 16, "shape",
         "conditions nest deeper than 16 levels of all, any and not")]


@pytest.mark.parametrize("key", ["not", "all"])
@pytest.mark.parametrize("levels", [500, 5_000])
def test_very_deep_conditions_are_a_problem_never_a_recursion_error(key, levels):
    _, problems = compile_condition(nested(levels, key))
    assert [p.message for p in problems] == [
        "conditions nest deeper than 16 levels of all, any and not"]
    with pytest.raises(ConditionError):
        evaluate(nested(levels, key), make_issue(), NOW)


def test_always_does_not_count_as_a_level():
    assert compile_condition(nested(16, inner={"always": True}))[1] == []


def test_evaluate_refuses_a_hand_built_tree_deeper_than_the_limit():
    deep: conditions.Condition = Always()
    for level in range(500):
        deep = Not(deep) if level % 2 else All((deep,))
    with pytest.raises(ConditionError, match="deeper than 16 levels"):
        evaluate(deep, make_issue(), NOW)


def test_evaluate_accepts_a_hand_built_tree_at_the_limit():
    tree: conditions.Condition = Always()
    for _ in range(16):
        tree = All((tree,))
    assert evaluate(tree, make_issue(), NOW)[0] is True


def test_a_reason_quotes_at_most_the_first_characters_of_a_long_value():
    condition, _ = compile_condition(
        {"field": "issue.summary", "operator": "regex", "value": "^b"})

    _, reason = evaluate(condition, make_issue(summary="a" * 50_000), NOW)

    assert len(reason) < 400
    assert "(50002 characters)" in reason
