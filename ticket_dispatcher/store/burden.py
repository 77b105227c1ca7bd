"""The burden report's rows (``burden_events``): written with the execution checkpoint that
records each assignment and notification, read by time for the report
(docs/burden-report.md).

The report reads this narrow table along its indexes, never the executions' JSON: one query
for the period's rows, one for the policies' names, one for the people's settings and one
for their time off.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import peewee

from ticket_dispatcher.domain.actions.notification_state import AckSource
from ticket_dispatcher.domain.availability import ANY_TIME, AvailabilitySettings
from ticket_dispatcher.domain.availability_parsing import settings_of
from ticket_dispatcher.domain.burden import (
    Band,
    BurdenQuery,
    BurdenRow,
    People,
    ScopeKind,
    band_of,
    build_report,
)
from ticket_dispatcher.domain.burden_events import EVENT_VERSION, BurdenEvent, BurdenKind
from ticket_dispatcher.errors import InvalidInput, Problem
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
RECORDING_SINCE_MIGRATION = 16
_COLUMNS = ("version, execution_id, rule_sequence, action_index, kind, email, leader, "
            "issue_key, project, policy_id, policy_family_id, members_json, hours_required, "
            "open_counts_json, sent_at, band, ack_source, ack_at, rotation")
_READ = ("kind, email, sent_at, policy_family_id, rotation, leader, members_json, "
         "hours_required, open_counts_json, ack_source, ack_at, band")
# The PostgreSQL types of the columns before ``rotation``, in ``_COLUMNS`` order.
_PG_TYPES = ("integer", "bigint", "integer", "integer", "text", "text", "text", "text", "text",
             "bigint", "text", "jsonb", "boolean", "jsonb", "timestamp", "text", "text",
             "timestamp")
_SCOPE_COLUMN = {ScopeKind.POLICY: "policy_family_id", ScopeKind.PROJECT: "project",
                 ScopeKind.ROTATION: "rotation"}


class BurdenRepository:
    def __init__(self, db: peewee.Database, engineers: EngineerRepository):
        self.db = db
        self.engine = engine_of(db)
        self._engineers = engineers
        p = db.param
        # A notification's rotation is the one of the person's latest assignment of the issue.
        latest = (f"COALESCE((SELECT a.rotation FROM {TABLE} a WHERE a.issue_key = {p} "
                  f"AND a.email = {p} AND a.kind = 'assignment' "
                  f"ORDER BY a.sent_at DESC LIMIT 1), '')")
        self._upsert = (" ON CONFLICT (execution_id, rule_sequence, action_index) DO UPDATE SET "
                        "ack_source = excluded.ack_source, ack_at = excluded.ack_at "
                        f"WHERE {TABLE}.ack_at IS NULL AND excluded.ack_at IS NOT NULL")
        insert = f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES ({placeholders(p, 18)}, "
        self._insert = {True: insert + f"{p})" + self._upsert,
                        False: insert + f"{latest})" + self._upsert}
        # The same as one part of a PostgreSQL statement (``guarded``): selected, so typed.
        typed = ", ".join(f"{p}::{kind}" for kind in _PG_TYPES)
        self._select = {True: f"INSERT INTO {TABLE} ({_COLUMNS}) SELECT {typed}, {p}::text",
                        False: (f"INSERT INTO {TABLE} ({_COLUMNS}) SELECT {typed}, "
                                f"{latest.replace(f'{p} ', f'{p}::text ')}")}

    # -- writing, with the checkpoint ---------------------------------------------------------

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
                event.ack_source.value if event.ack_source else None, time_param(event.ack_at))
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
        if not emails:
            return {}
        found, _ = self._engineers.page(limit=len(emails), email_in=emails)
        by_email = {engineer.email: settings_of(engineer) for engineer in found}
        return {email: by_email.get(email, ANY_TIME) for email in emails}

    # -- the report ----------------------------------------------------------------------------

    def report(self, query: BurdenQuery) -> dict[str, Any]:
        """The report for ``query`` (``InvalidInput`` when its scope names nothing)."""
        with unit_of_work(self.db):
            families = self._scope_values(query)
            rows = self._rows(query, families)
            names = self._policy_names({row.policy_family_id for row in rows})
            emails = sorted({row.email for row in rows} | {row.leader for row in rows if row.leader}
                            | {m for row in rows for m in row.members})
            people = self._people(emails, query)
            complete_from = self.complete_from()
        return build_report(query, rows, policy_names=names, people=people,
                            complete_from=complete_from)

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
            column = getattr(BurdenEventRow, _SCOPE_COLUMN[query.scope])
            found = BurdenEventRow.select(BurdenEventRow.id).where(column == query.value).first()
            values = [query.value] if found is not None else []
        if not values:
            raise InvalidInput(f"no {query.scope.value} {query.value!r} is known",
                               [Problem(query.scope.value, "names nothing")])
        return values

    def _rows(self, query: BurdenQuery, values: list[str]) -> list[BurdenRow]:
        p = self.db.param
        sql = f"SELECT {_READ} FROM {TABLE} WHERE sent_at >= {p} AND sent_at < {p}"
        params: list[Any] = [time_param(query.since), time_param(query.until)]
        if values:
            sql += f" AND {_SCOPE_COLUMN[query.scope]} IN ({placeholders(p, len(values))})"
            params += values
        as_time = BurdenEventRow.sent_at.python_value
        rows = []
        for (kind, email, sent_at, family, rotation, leader, members, hours, counts,
             source, ack_at, band) in self.db.execute_sql(sql, params).fetchall():
            rows.append(BurdenRow(
                BurdenKind(kind), email, as_time(sent_at) or query.since, family, rotation, leader,
                tuple(_json(members) or ()), bool(hours), _json(counts) or {},
                AckSource(source) if source else None, as_time(ack_at) if ack_at else None,
                Band(band) if band else None))
        return rows

    def _policy_names(self, families: set[str]) -> dict[str, str]:
        """Each family's name, as its newest version has it."""
        if not families:
            return {}
        query = (PolicyRow.select(PolicyRow.family_id, PolicyRow.name)
                 .where(PolicyRow.family_id.in_(sorted(families)))
                 .order_by(PolicyRow.family_id, PolicyRow.version))
        return {row.family_id: row.name for row in query}

    def _people(self, emails: list[str], query: BurdenQuery) -> People:
        if not emails:
            return People({}, {})
        found, _ = self._engineers.page(limit=len(emails), email_in=emails)
        settings = {engineer.email: settings_of(engineer) for engineer in found}
        return People(settings, self._engineers.time_off(emails, query.since, query.until))


def _json(value: Any) -> Any:
    """A JSON column as read: SQLite gives its text, PostgreSQL the value."""
    if value is None or not isinstance(value, str):
        return value
    return json.loads(value)
