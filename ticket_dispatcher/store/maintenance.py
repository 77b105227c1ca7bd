"""Maintenance windows (domain/maintenance.py): kept, listed by state, ended early; and the
triggers a window holds, made due at once when it is ended early."""

from __future__ import annotations

from datetime import datetime, timedelta

import peewee

from ticket_dispatcher.domain.execution import Execution, TriggerStatus
from ticket_dispatcher.domain.maintenance import (
    Effect,
    Every,
    InEffect,
    MaintenanceWindow,
    Recurrence,
    Scope,
    WindowState,
    ended_early,
    in_effect,
    project_of,
)
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.store.database import lock_rows, unit_of_work, write_lock
from ticket_dispatcher.store.models import MaintenanceWindowRow, TriggerRow
from ticket_dispatcher.store.policies import PolicyRepository
from ticket_dispatcher.store.triggers import TriggerRepository
from ticket_dispatcher.timeutil import to_utc

NO_RECURRENCE = "none"
MAX_LISTED = 500


class MaintenanceRepository:
    def __init__(self, db: peewee.Database) -> None:
        self.db = db

    def add(self, window: MaintenanceWindow) -> MaintenanceWindow:
        recurrence = window.recurrence
        with write_lock(self.db):
            window_id = MaintenanceWindowRow.insert(
                scope_json=window.scope.to_json(), reason=window.reason,
                start_at=to_utc(window.start), end_at=to_utc(window.end),
                recurrence=recurrence.every.value if recurrence else NO_RECURRENCE,
                until_at=recurrence.until if recurrence else None,
                effect=window.effect.value, last_end_at=window.last_end,
                ended_at=window.ended_at, created_at=window.created_at).execute()
        return self.get(int(window_id))

    def get(self, window_id: int) -> MaintenanceWindow:
        with unit_of_work(self.db):
            row = MaintenanceWindowRow.get_or_none(MaintenanceWindowRow.id == window_id)
        if row is None:
            raise NotFound(f"maintenance window {window_id} not found")
        return _window(row)

    def active(self, now: datetime) -> list[MaintenanceWindow]:
        """The windows not over at ``now`` that have started (current, or between two
        occurrences): those that may rule work now. One query along the index of their end."""
        now = to_utc(now)
        with unit_of_work(self.db):
            rows = list(MaintenanceWindowRow.select().where(
                (MaintenanceWindowRow.last_end_at > now)
                & (MaintenanceWindowRow.start_at <= now)))
        return [_window(row) for row in rows]

    def listed(self, now: datetime, state: WindowState | None = None,
               limit: int = MAX_LISTED) -> list[MaintenanceWindow]:
        """Windows by start, newest first, those in ``state`` alone when given."""
        now = to_utc(now)
        query = MaintenanceWindowRow.select()
        if state is WindowState.ENDED:
            query = query.where(MaintenanceWindowRow.last_end_at <= now)
        elif state is not None:
            query = query.where(MaintenanceWindowRow.last_end_at > now)
        with unit_of_work(self.db):
            windows = [_window(row) for row in
                       query.order_by(MaintenanceWindowRow.start_at.desc(),
                                      MaintenanceWindowRow.id.desc())]
        if state is not None:
            windows = [window for window in windows if window.state(now) is state]
        return windows[:limit]

    def end(self, window_id: int, now: datetime) -> MaintenanceWindow:
        """End a window early, and make the triggers it holds due at once, in one transaction.
        ``Conflict`` when it has ended already."""
        now = to_utc(now)
        with write_lock(self.db):
            query = MaintenanceWindowRow.select().where(MaintenanceWindowRow.id == window_id)
            row = lock_rows(query, self.db).first()
            if row is None:
                raise NotFound(f"maintenance window {window_id} not found")
            window = _window(row)
            if window.state(now) is WindowState.ENDED:
                raise Conflict(f"maintenance window {window_id} has already ended")
            ended = ended_early(window, now)
            (MaintenanceWindowRow.update(ended_at=now, last_end_at=ended.last_end)
             .where(MaintenanceWindowRow.id == window_id).execute())
            (TriggerRow.update(available_at=now, updated_at=now)
             .where((TriggerRow.maintenance_window_id == window_id)
                    & (TriggerRow.status == TriggerStatus.PENDING.value)
                    & (TriggerRow.available_at > now)).execute())
        return ended

    def counts(self, now: datetime, max_duration: timedelta) -> tuple[int, int]:
        """How many windows are current at ``now``, and how many of them have been current
        for longer than ``max_duration`` (the metrics)."""
        since = [window.current_since(now) for window in self.active(now)]
        current = [start for start in since if start is not None]
        return len(current), sum(1 for start in current if now - start > max_duration)


class ExecutionWindows:
    """The windows as an execution's notification steps ask (``domain.ports.
    MaintenanceWindows``): one read of the windows in effect; the execution's trigger and
    policy are read only when there are any."""

    def __init__(self, windows: MaintenanceRepository, policies: PolicyRepository,
                 triggers: TriggerRepository) -> None:
        self._windows = windows
        self._policies = policies
        self._triggers = triggers

    def active(self, now: datetime) -> list[MaintenanceWindow]:
        return self._windows.active(now)

    def ruling(self, execution: Execution, now: datetime,
               windows: list[MaintenanceWindow] | None = None) -> InEffect | None:
        windows = self._windows.active(now) if windows is None else windows
        if not windows:
            return None
        try:
            policy = (self._policies.known(execution.policy_id)
                      or self._policies.get(execution.policy_id))
            names = [policy.name]
        except NotFound:  # a deleted draft's dry run: no name to match
            names = []
        source = self._triggers.get(execution.trigger_id).source
        return in_effect(windows, project_of(execution.issue_key), source, names, now)


def _window(row: MaintenanceWindowRow) -> MaintenanceWindow:
    recurrence = (None if row.recurrence == NO_RECURRENCE
                  else Recurrence(Every(row.recurrence), row.until_at))
    return MaintenanceWindow(
        id=row.id, scope=Scope.from_json(row.scope_json), reason=row.reason,
        start=row.start_at, end=row.end_at, effect=Effect(row.effect), recurrence=recurrence,
        ended_at=row.ended_at, created_at=row.created_at)
