"""The burden report's rows (``burden_events``): written with the execution checkpoint that
records each assignment and notification, read by time for the report
(docs/burden-report.md).

The report never reads the executions' JSON. It adds up the monthly tallies the database
keeps of these rows (burden_months.py) for the period's whole months, counts the rows of the
parts of months at its ends alike, reads every ACKed card's time to acknowledge along an
index of those alone, and the newest counts of open issues; then the policies' names, the
people's settings and their time off.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import peewee

from ticket_dispatcher.domain.actions.notification_state import AckSource
from ticket_dispatcher.domain.availability import ANY_TIME, AvailabilitySettings
from ticket_dispatcher.domain.availability_parsing import settings_of
from ticket_dispatcher.domain.burden import (
    Availabilities,
    Band,
    BurdenData,
    BurdenQuery,
    Membership,
    ScopeKind,
    Tally,
    band_of,
    build_report,
    latest_open_counts,
    whole_months,
)
from ticket_dispatcher.domain.burden_events import EVENT_VERSION, BurdenEvent, BurdenKind
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.store.burden_months import (
    MEMBER,
    PAGE_DAY,
    SCOPE_COLUMN,
    event_tallies,
    month_tallies,
)
from ticket_dispatcher.store.database import engine_of, unit_of_work
from ticket_dispatcher.store.engineers import EngineerRepository
from ticket_dispatcher.store.models import (
    BurdenEventRow,
    PolicyRow,
    SchemaMigrationRow,
    json_param,
    placeholders,
    time_param,
)

TABLE = BurdenEventRow._meta.table_name
# The migration that made the table: the report's data is complete from when it was applied.
RECORDING_SINCE_MIGRATION = 17
_COLUMNS = ("version, execution_id, rule_sequence, action_index, kind, email, leader, "
            "issue_key, project, policy_id, policy_family_id, members_json, hours_required, "
            "open_counts_json, sent_at, band, ack_source, ack_at, ack_seconds, rotation")
# The stored words, read back without an enum lookup per row (a year has a hundred thousand).
_KINDS = {kind.value: kind for kind in BurdenKind}
_BANDS: dict[str | None, Band | None] = {None: None, **{band.value: band for band in Band}}
_SOURCES = {source.value: source for source in AckSource}
# How many written events a process remembers, so as not to write them again (a few hours of
# a busy service's notifications).
REMEMBERED_EVENTS = 20_000
# How many of the newest assignments the report reads for the people's counts of open issues.
OPEN_COUNT_READS = 500
# The PostgreSQL types of the columns before ``rotation``, in ``_COLUMNS`` order.
_PG_TYPES = ("integer", "bigint", "integer", "integer", "text", "text", "text", "text", "text",
             "bigint", "text", "jsonb", "boolean", "jsonb", "timestamp", "text", "text",
             "timestamp", "double precision")


class BurdenRepository:
    def __init__(self, db: peewee.Database, engineers: EngineerRepository):
        self.db = db
        self.engine = engine_of(db)
        self._engineers = engineers
        self._lock = threading.Lock()
        self._written: OrderedDict[tuple, None] = OrderedDict()  # oldest first
        p, epoch = db.param, self.engine.epoch_seconds
        # A notification's rotation is the one of the person's latest assignment of the issue.
        latest = (f"COALESCE((SELECT a.rotation FROM {TABLE} a WHERE a.issue_key = {p} "
                  f"AND a.email = {p} AND a.kind = 'assignment' "
                  f"ORDER BY a.sent_at DESC LIMIT 1), '')")
        self._upsert = (" ON CONFLICT (execution_id, rule_sequence, action_index) DO UPDATE SET "
                        "ack_source = excluded.ack_source, ack_at = excluded.ack_at, "
                        f"ack_seconds = {epoch('excluded.ack_at')} - {epoch(f'{TABLE}.sent_at')} "
                        f"WHERE {TABLE}.ack_at IS NULL AND excluded.ack_at IS NOT NULL")
        insert = f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES ({placeholders(p, 19)}, "
        self._insert = {True: insert + f"{p})" + self._upsert,
                        False: insert + f"{latest})" + self._upsert}
        # The same as one part of a PostgreSQL statement (``guarded``): selected, so typed.
        typed = ", ".join(f"{p}::{kind}" for kind in _PG_TYPES)
        self._select = {True: f"INSERT INTO {TABLE} ({_COLUMNS}) SELECT {typed}, {p}::text",
                        False: (f"INSERT INTO {TABLE} ({_COLUMNS}) SELECT {typed}, "
                                f"{latest.replace(f'{p} ', f'{p}::text ')}")}

    # -- writing, with the checkpoint ---------------------------------------------------------

    def unwritten(self, events: list[BurdenEvent]) -> list[BurdenEvent]:
        """``events`` less those this process already wrote as they are: every checkpoint
        after a send finds the send again, and only its first, or an ACK, writes. Another
        process (a replica, a restart) writes them once more, which changes nothing."""
        with self._lock:
            return [event for event in events if _signature(event) not in self._written]

    def written(self, events: list[BurdenEvent]) -> None:
        """``events`` were committed with their checkpoint."""
        with self._lock:
            for event in events:
                self._written[_signature(event)] = None
            while len(self._written) > REMEMBERED_EVENTS:
                self._written.popitem(last=False)

    def record(self, events: Sequence[BurdenEvent]) -> None:
        """Write ``events`` in the caller's transaction: a new action's row, or an ACK added
        to a row that has none; nothing else of a row ever changes."""
        for assignment, values in self._values(events):
            self.db.execute_sql(self._insert[assignment], values)

    def guarded(self, events: Sequence[BurdenEvent], guard: str, name: str,
                ) -> tuple[list[str], list[Any]]:
        """``record`` as parts of one PostgreSQL statement (``WITH`` queries named ``name``
        and a number), each written only where ``guard`` holds (the checkpoint's UPDATE
        matched); the parts and their parameters, in order."""
        parts: list[str] = []
        params: list[Any] = []
        for n, (assignment, values) in enumerate(self._values(events)):
            parts.append(f"{name}{n} AS ({self._select[assignment]} WHERE {guard}"
                         f"{self._upsert})")
            params += values
        return parts, params

    def _values(self, events: Sequence[BurdenEvent]) -> list[tuple[bool, tuple[Any, ...]]]:
        """(is an assignment, the statement's parameters) of each event; an interruption's
        band is judged now, in the person's hours."""
        settings = self._settings([e.email for e in events if e.kind.interrupts])
        rows = []
        for event in events:
            band = (band_of(event.sent_at, settings[event.email]).value
                    if event.kind.interrupts else None)
            values: tuple[Any, ...] = (
                EVENT_VERSION, event.execution_id, event.rule_sequence, event.action_index,
                event.kind.value, event.email, event.leader, event.issue_key, event.project,
                event.policy_id, event.policy_family_id,
                json_param(list(event.members)) if event.members else None,
                event.hours_required, json_param(event.open_counts or None),
                time_param(event.sent_at), band,
                event.ack_source.value if event.ack_source else None, time_param(event.ack_at),
                (event.ack_at - event.sent_at).total_seconds() if event.ack_at else None)
            assignment = event.kind is BurdenKind.ASSIGNMENT
            rows.append((assignment, (*values, event.rotation) if assignment
                         else (*values, event.issue_key, event.email)))
        return rows

    def interruptions_of(self, execution_id: int) -> list[tuple[str, str]]:
        """(rotation, band) of each page and App-urgent message the execution recorded."""
        p = self.db.param
        with unit_of_work(self.db):
            return [(rotation, band or "") for rotation, band in self.db.execute_sql(
                f"SELECT rotation, band FROM {TABLE} WHERE execution_id = {p} "
                f"AND kind IN ({p}, {p})", (execution_id, BurdenKind.PAGE.value,
                                           BurdenKind.URGENT.value)).fetchall()]

    def _settings(self, emails: list[str]) -> dict[str, AvailabilitySettings]:
        """Each person's settings, any time for one with no record."""
        if not emails:
            return {}
        found = self._engineers.named(emails)
        by_email = {engineer.email: settings_of(engineer) for engineer in found}
        return {email: by_email.get(email, ANY_TIME) for email in emails}

    # -- the report ----------------------------------------------------------------------------

    def report(self, query: BurdenQuery) -> dict[str, Any]:
        """The report for ``query`` (``InvalidInput`` when its scope names nothing): the
        period's rows counted by the database, read along the index of the scope."""
        with unit_of_work(self.db):
            values = self._scope_values(query)
            data = self._data(query, values)
            names = self._policy_names({t.policy_family_id for t in data.tallies})
            emails = sorted({t.email for t in data.tallies}
                            | {t.leader for t in data.tallies if t.leader}
                            | {m for ms in data.memberships for m in ms.members})
            people = self._people(emails, query)
            complete_from = self.complete_from()
        return build_report(query, data, policy_names=names, people=people,
                            complete_from=complete_from)

    def explain(self, query: BurdenQuery) -> list[str]:
        """The engine's plans of the report's reads (the months' tallies, the events at the
        period's ends, the ACKs): which index each takes."""
        lines = []
        with unit_of_work(self.db):
            for name, (sql, params) in self._reads(query, self._scope_values(query)).items():
                lines.append(f"{name}:")
                lines += [f"  {line}" for line in self.engine.explain(self.db, sql, params)]
        return lines

    def _data(self, query: BurdenQuery, values: list[str]) -> BurdenData:
        """The period (in the scope) as the database counted it: its whole months' tallies,
        the parts of months at its ends counted from the events alike, the rotations' members
        there, every card's time to acknowledge; and the newest counts of open issues."""
        data = BurdenData(open_counts=self._open_counts())
        for name, (sql, params) in self._reads(query, values).items():
            rows = self.db.execute_sql(sql, params).fetchall()
            if name == "acks":
                for email, source, joined in rows:
                    # a read Lark dates before the card was sent counts as none
                    data.acks[email, _SOURCES[source]] = [
                        max(0.0, seconds) for seconds in map(float, joined.split(","))]
            elif name == "members":
                data.memberships += [Membership(rotation, tuple(_json(members)), bool(hours))
                                     for rotation, members, hours in rows]
            else:
                for fact, email, d1, d2, count in rows:
                    _add_tally(data, fact, email, d1, d2, int(count))
        return data

    def _reads(self, query: BurdenQuery, values: list[str]) -> dict[str, tuple[str, list[Any]]]:
        """The statements ``_data`` runs and their parameters, by what they read: the
        tallies of the whole months, those of the events at the ends and the rotations'
        members there, the times to acknowledge."""
        p = self.db.param
        months, ends = whole_months(query.since, query.until)
        spans = [self._where(query, values, span) for span in ends]
        reads: dict[str, tuple[str, list[Any]]] = {}
        if months is not None:
            reads["months"] = month_tallies(
                p, query.scope, values, (_month_number(months[0]), _month_number(months[1])))
        if spans:
            reads["events"] = event_tallies(self.engine, spans)
            assigned = " UNION ALL ".join(
                f"SELECT e.rotation, e.members_json, e.hours_required FROM {TABLE} e "
                f"WHERE e.kind = {p} AND e.members_json IS NOT NULL AND {where}"
                for where, _ in spans)
            reads["members"] = (
                f"SELECT DISTINCT rotation, members_json, hours_required FROM ({assigned}) f",
                [param for _, params in spans
                 for param in (BurdenKind.ASSIGNMENT.value, *params)])
        where, params = self._where(query, values, (query.since, query.until))
        # a few hundred rows, not a row for each card: one text of the seconds per person
        # and source
        reads["acks"] = (f"SELECT e.email, e.ack_source, "
                         f"{self.engine.joined_numbers('e.ack_seconds')} FROM {TABLE} e "
                         f"WHERE e.ack_seconds IS NOT NULL AND {where} "
                         "GROUP BY e.email, e.ack_source", params)
        return reads

    def _where(self, query: BurdenQuery, values: list[str],
               span: tuple[datetime, datetime]) -> tuple[str, list[Any]]:
        """The condition on events ``e`` sent within ``span`` in the scope, and its
        parameters."""
        p = self.db.param
        where = f"e.sent_at >= {p} AND e.sent_at < {p}"
        params: list[Any] = [time_param(moment) for moment in span]
        if values:
            column = SCOPE_COLUMN[query.scope]
            where += f" AND e.{column} IN ({placeholders(p, len(values))})"
            params += values
        return where, params

    def _open_counts(self) -> dict[str, int]:
        """The newest counts of open issues that assignments read, along the time index."""
        p = self.db.param
        rows = self.db.execute_sql(
            f"SELECT email, open_counts_json FROM {TABLE} WHERE kind = {p} "
            f"AND open_counts_json IS NOT NULL ORDER BY sent_at DESC LIMIT {OPEN_COUNT_READS}",
            (BurdenKind.ASSIGNMENT.value,)).fetchall()
        return latest_open_counts((email, _json(counts)) for email, counts in rows)

    def complete_from(self) -> datetime | None:
        """When this table started recording: the report's data is complete from then."""
        with unit_of_work(self.db):
            row = (SchemaMigrationRow.select(SchemaMigrationRow.applied_at)
                   .where(SchemaMigrationRow.version == RECORDING_SINCE_MIGRATION).first())
        return row.applied_at if row is not None else None

    def _scope_values(self, query: BurdenQuery) -> list[str]:
        """The stored values the scope stands for: a policy's name is every family that ever
        bore it. ``InvalidInput`` when it names nothing."""
        if query.scope is ScopeKind.EVERYONE:
            return []
        if query.scope is ScopeKind.POLICY:
            values = sorted({row.family_id for row in PolicyRow.select(PolicyRow.family_id)
                             .where(PolicyRow.name == query.value)})
        else:
            column = getattr(BurdenEventRow, SCOPE_COLUMN[query.scope])
            found = BurdenEventRow.select(BurdenEventRow.id).where(column == query.value).first()
            values = [query.value] if found is not None else []
        if not values:
            raise InvalidInput(f"no {query.scope.value} {query.value!r} is known",
                               [Problem(query.scope.value, "names nothing")])
        return values

    def _policy_names(self, families: set[str]) -> dict[str, str]:
        """Each family's name, as its newest version has it."""
        if not families:
            return {}
        query = (PolicyRow.select(PolicyRow.family_id, PolicyRow.name)
                 .where(PolicyRow.family_id.in_(sorted(families)))
                 .order_by(PolicyRow.family_id, PolicyRow.version))
        return {row.family_id: row.name for row in query}

    def _people(self, emails: list[str], query: BurdenQuery) -> Availabilities:
        if not emails:
            return Availabilities({}, {})
        return Availabilities(self._settings(emails),
                              self._engineers.time_off(emails, query.since, query.until))


def _add_tally(data: BurdenData, fact: str, email: str, d1: str, d2: str, count: int) -> None:
    """A tally read (burden_months.py names its facts) into ``data``."""
    if fact == PAGE_DAY:
        day = datetime.fromisoformat(d1).replace(tzinfo=UTC)
        data.pages_by_day[day] = data.pages_by_day.get(day, 0) + count
    elif fact == MEMBER:
        data.memberships.append(Membership(d1, (email,), d2 == "1"))
    else:
        kind = _KINDS[fact]
        if kind is BurdenKind.ASSIGNMENT:
            data.tallies.append(Tally(kind, email, count, policy_family_id=d1, rotation=d2))
        elif kind is BurdenKind.ESCALATION:
            data.tallies.append(Tally(kind, email, count, leader=d1))
        else:
            data.tallies.append(Tally(kind, email, count, band=_BANDS[d1 or None]))


def _month_number(moment: datetime) -> int:
    return moment.year * 100 + moment.month


def _signature(event: BurdenEvent) -> tuple:
    """What makes a write of ``event`` different from the one before: its action and ACK."""
    return (event.execution_id, event.rule_sequence, event.action_index, event.ack_source,
            event.ack_at)


def _json(value: Any) -> Any:
    """A JSON column as read: SQLite gives its text, PostgreSQL the value."""
    if value is None or not isinstance(value, str):
        return value
    return json.loads(value)
