"""The burden report's monthly tallies (``burden_months``): every month's events counted by
scope and by what the report adds up, kept by the database itself as each event is inserted
(a trigger, in the inserting transaction), so that a year's report adds up a few thousand
tallies instead of reading a year of events (docs/burden-report.md).

A tally is (scope, scope_value, month, fact, email, d1, d2) → n:

- ``scope``: ``everyone`` (value ''), ``policy`` (a family), ``project`` or ``rotation``;
  an event is counted once in each;
- ``month``: the event's UTC month, ``yyyymm``;
- ``fact``: an event's kind with what the report needs of it (an assignment's family in d1
  and rotation in d2, an interruption's band in d1, an escalation's leader in d1, a card
  nothing more); ``page_day``, a page on the UTC day d1 (email ''); ``member``, a member of
  the rotation d1 when an assignment was made (d2 '1' where it required working hours), kept
  in the ``everyone`` scope alone: whoever's work it was, a receiver has the same members.

``facts`` writes these expressions once: the trigger, the filling of the table from the
events already recorded, and the report's read of the parts of months at a period's ends all
use it, so a month read here and a day read from the events count alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ticket_dispatcher.domain.burden import ScopeKind
from ticket_dispatcher.domain.burden_events import BurdenKind
from ticket_dispatcher.store.engine import Engine
from ticket_dispatcher.store.models import placeholders

TABLE = "burden_months"
EVENTS = "burden_events"
TRIGGER = "burden_months_add"
KEY = "scope, scope_value, month, fact, email, d1, d2"
PAGE_DAY = "page_day"
MEMBER = "member"
# The events' column each scope is read by.
SCOPE_COLUMN = {ScopeKind.POLICY: "policy_family_id", ScopeKind.PROJECT: "project",
                ScopeKind.ROTATION: "rotation"}


@dataclass(frozen=True)
class Fact:
    """One kind of tally taken of an event row ``e``: its SELECT list (fact, email, d1, d2),
    what it adds to the FROM, and the rows it takes."""

    columns: str
    joins: str = ""
    only: str = "TRUE"
    # the scopes it is kept in: a rotation's members are the receiver's, whoever's work it
    # was, so they are kept once (and written once per assignment, not once per scope)
    scopes: tuple[ScopeKind, ...] = tuple(ScopeKind)


def facts(engine: Engine, *, members: bool) -> list[Fact]:
    """The tallies of an event row ``e``; with ``members``, also its rotation's members."""
    assignment, escalation = _word(BurdenKind.ASSIGNMENT), _word(BurdenKind.ESCALATION)
    counted = [
        Fact(f"e.kind AS fact, e.email AS email, CASE e.kind WHEN {assignment} THEN "
             f"e.policy_family_id WHEN {escalation} THEN e.leader ELSE COALESCE(e.band, '') "
             f"END AS d1, CASE e.kind WHEN {assignment} THEN e.rotation ELSE '' END AS d2"),
        Fact(f"'{PAGE_DAY}', '', {engine.day_text('e.sent_at')}, ''",
             only=f"e.kind = {_word(BurdenKind.PAGE)}"),
    ]
    if members:
        counted.append(Fact(f"'{MEMBER}', j.value, e.rotation, "
                            "CASE WHEN e.hours_required THEN '1' ELSE '0' END",
                            joins=f", {engine.json_elements('e.members_json', 'j')}",
                            only=f"e.kind = {assignment}", scopes=(ScopeKind.EVERYONE,)))
    return counted


def month_tallies(param: str, scope: ScopeKind, values: list[str], months: tuple[int, int],
                  ) -> tuple[str, list[Any]]:
    """The read of the tallies of the whole ``months`` (``[first, end)``, ``yyyymm``) in the
    scope (``values``: the scope's values, none for everyone): (fact, email, d1, d2, count),
    the statement and its parameters. A scope takes its rotations' members from everyone's
    tallies, where they are kept."""
    within = f"month >= {param} AND month < {param}"
    parts = [f"SELECT fact, email, d1, d2, n FROM {TABLE} WHERE scope = {param} AND "
             f"scope_value IN ({placeholders(param, len(values or ['']))}) AND {within}"]
    params: list[Any] = [scope.value, *(values or [""]), *months]
    if values:
        parts.append(f"SELECT fact, email, d1, d2, n FROM {TABLE} WHERE scope = {param} "
                     f"AND scope_value = '' AND fact = {param} AND {within}")
        params += [ScopeKind.EVERYONE.value, MEMBER, *months]
    return (f"SELECT fact, email, d1, d2, SUM(n) FROM ({' UNION ALL '.join(parts)}) t "
            "GROUP BY fact, email, d1, d2", params)


def event_tallies(engine: Engine, spans: list[tuple[str, list[Any]]]) -> tuple[str, list[Any]]:
    """The events ``e`` each of ``spans`` (a condition and its parameters) takes, counted as
    the tallies count them: (fact, email, d1, d2, count), the statement and its parameters.
    A part for each span, so that each reads one range of an index. (Read apart from the
    months': one sort of both costs SQLite more than two.)"""
    parts, params = [], []
    for fact in facts(engine, members=False):
        for where, values in spans:
            parts.append(f"SELECT {fact.columns} FROM {EVENTS} e{fact.joins} "
                         f"WHERE {fact.only} AND {where}")
            params += values
    return (f"SELECT fact, email, d1, d2, COUNT(*) FROM ({' UNION ALL '.join(parts)}) f "
            "GROUP BY fact, email, d1, d2", params)


def add_events(engine: Engine, where: str) -> str:
    """The statement adding the events ``e`` where ``where`` holds (no parameters) to their
    months' tallies, in every scope."""
    value = ("CASE s.scope " + " ".join(f"WHEN '{scope.value}' THEN e.{column}"
                                        for scope, column in SCOPE_COLUMN.items())
             + " ELSE '' END")
    month = engine.month_number("e.sent_at")
    parts = [f"SELECT s.scope, {value} AS scope_value, {month} AS month, {fact.columns} "
             f"FROM {EVENTS} e{fact.joins}, ({_scopes(fact.scopes)}) s "
             f"WHERE {fact.only} AND {where} "
             f"AND (s.scope = '{ScopeKind.EVERYONE.value}' OR {value} <> '')"
             for fact in facts(engine, members=True)]
    # In the key's order: two transactions counting into the same tallies (a day's pages,
    # a rotation's members) lock them in one order, and so never wait on each other in a
    # circle.
    return (f"INSERT INTO {TABLE} ({KEY}, n) SELECT {KEY}, COUNT(*) "
            f"FROM ({' UNION ALL '.join(parts)}) f WHERE TRUE GROUP BY {KEY} ORDER BY {KEY} "
            f"ON CONFLICT ({KEY}) DO UPDATE SET n = {TABLE}.n + excluded.n")


def install(engine: Engine) -> list[str]:
    """The DDL of the table and of its trigger, and the statement counting the events
    already recorded: the migration that makes the table runs them once."""
    key, ending = engine.covering_key(KEY, "n")
    return [
        f"""CREATE TABLE IF NOT EXISTS {TABLE} (
            scope VARCHAR(16) NOT NULL,
            scope_value TEXT NOT NULL,
            month INTEGER NOT NULL,
            fact VARCHAR(16) NOT NULL,
            email TEXT NOT NULL,
            d1 TEXT NOT NULL,
            d2 TEXT NOT NULL,
            n BIGINT NOT NULL,
            {key}){ending}""",
        *engine.after_insert(TRIGGER, EVENTS, add_events(engine, "e.id = NEW.id")),
        f"DELETE FROM {TABLE}",
        add_events(engine, "TRUE"),
    ]


def _scopes(scopes: tuple[ScopeKind, ...]) -> str:
    """``scopes`` as rows of a column ``scope``."""
    return " UNION ALL ".join(f"SELECT '{scope.value}'" + (" AS scope" if n == 0 else "")
                              for n, scope in enumerate(scopes))


def _word(kind: BurdenKind) -> str:
    return f"'{kind.value}'"

