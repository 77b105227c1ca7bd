"""Dispatch contexts: per-issue memory, including the one-hop escalation slots
(docs/design.md, "The escalation slot").

The notification state is changed one role slot at a time under a row lock, so the assignee
and L2 workflows of one issue never overwrite each other and no version column is needed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime
from types import SimpleNamespace

import peewee

from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES
from ticket_dispatcher.domain.model import DispatchContext
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.store.database import (
    Prepared,
    lock_rows,
    read_rows,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.models import (
    ContextRow,
    delete_where,
    json_param,
    placeholders,
    time_param,
)
from ticket_dispatcher.timeutil import to_utc

_ROLES = frozenset(role.role for role in NOTIFICATION_ROLES)

SlotMutation = Callable[[dict | None], dict | None]


class ContextRepository:
    def __init__(self, db: peewee.Database):
        self.db = db
        self._find = Prepared(
            f"SELECT * FROM {ContextRow._meta.table_name} WHERE issue_key = {db.param}")
        self._insert = Prepared(self.default_insert(db.param))

    @staticmethod
    def default_insert(param: str, after: str | None = None) -> str:
        """The INSERT of an empty context unless one exists, taking ``default_values``;
        ``after``: the name of a ``WITH`` clause it is part of, which must answer a row for
        the context to be written."""
        marks = placeholders(param, 6)
        values = f"SELECT {marks} FROM {after}" if after else f"VALUES ({marks})"
        return (f"INSERT INTO {ContextRow._meta.table_name} (issue_key, assignee, assignee_l2, "
                f"assignment_notification_state_json, created_at, updated_at) {values} "
                "ON CONFLICT (issue_key) DO NOTHING")

    @staticmethod
    def default_values(issue_key: str, now: datetime) -> tuple:
        moment = time_param(now)
        return (issue_key, "", "", json_param({}), moment, moment)

    def get(self, issue_key: str) -> DispatchContext:
        context = self.find(issue_key)
        if context is None:
            raise NotFound(f"dispatch context {issue_key} not found")
        return context

    def find(self, issue_key: str) -> DispatchContext | None:
        """The context, or None when the issue has none yet."""
        with unit_of_work(self.db):  # every trigger reads it: written out once
            rows = read_rows(self.db, ContextRow, self._find, issue_key)
        return _context(rows[0]) if rows else None

    def ensure_default(self, issue_key: str, now: datetime) -> bool:
        """Create the empty context unless it exists; one statement. True when created."""
        with unit_of_work(self.db):
            return self._insert_default(issue_key, to_utc(now))

    def delete(self, issue_key: str) -> None:
        """Refused while a role slot holds an escalation intent or marker."""
        with write_lock(self.db):
            row = self._lock(issue_key)
            if row is None:
                raise NotFound(f"dispatch context {issue_key} not found")
            if _context(row).holds_notification_state:
                raise Conflict(
                    f"dispatch context {issue_key} holds an assignment-notification intent or "
                    "marker; it can be deleted once both role slots are clear"
                )
            delete_where(ContextRow, ContextRow.issue_key == issue_key)

    def update_notification_slot(
        self, issue_key: str, role: str, mutate: SlotMutation, now: datetime
    ) -> DispatchContext:
        """Apply ``mutate`` to one role's slot (a deep copy; ``None`` when empty) and store its
        result, creating the context first when missing. Other slots and columns are
        untouched. Never call it around an external call: it holds a row lock."""
        if role not in _ROLES:
            raise ValueError(f"unknown notification role {role!r}")
        now = to_utc(now)
        with write_lock(self.db):
            self._insert_default(issue_key, now)
            row = self._lock(issue_key)
            if row is None:  # on PostgreSQL, deleted by another transaction since the insert
                raise NotFound(f"dispatch context {issue_key} not found")
            state = dict(row.assignment_notification_state_json or {})
            state[role] = mutate(copy.deepcopy(state.get(role)))
            ContextRow.update(assignment_notification_state_json=state, updated_at=now).where(
                ContextRow.issue_key == issue_key
            ).execute()
            row.assignment_notification_state_json = state
            row.updated_at = now
            return _context(row)

    def _insert_default(self, issue_key: str, now: datetime) -> bool:
        """The empty context unless one exists; every new execution asks for it, so the
        statement is written out once. True when inserted."""
        return self.db.execute_sql(self._insert, self.default_values(issue_key, now)).rowcount == 1

    def _lock(self, issue_key: str) -> ContextRow | None:
        query = ContextRow.select().where(ContextRow.issue_key == issue_key)
        return lock_rows(query, self.db).get_or_none()


def _context(row: ContextRow | SimpleNamespace) -> DispatchContext:
    return DispatchContext(
        issue_key=row.issue_key,
        assignee=row.assignee,
        assignee_l2=row.assignee_l2,
        # A NULL from before migration 2 is the empty state (no backfill).
        assignment_notification_state=row.assignment_notification_state_json or {},
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
