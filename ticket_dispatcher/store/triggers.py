"""Dispatch triggers: the durable intake outbox (SPEC §4.5, §5, M§4)."""

from __future__ import annotations

from datetime import datetime

import peewee

from ticket_dispatcher.domain.execution import Trigger, TriggerStatus
from ticket_dispatcher.errors import NotFound
from ticket_dispatcher.store.database import seconds_since, unit_of_work, write_lock
from ticket_dispatcher.store.models import TriggerRow
from ticket_dispatcher.timeutil import to_utc

_OPEN = (TriggerStatus.PENDING.value, TriggerStatus.PROCESSING.value)


def _pending(source: str, issue_key: str) -> peewee.Select:
    """The ``pending`` triggers of ``source`` for ``issue_key`` (their ids)."""
    return TriggerRow.select(TriggerRow.id).where(
        (TriggerRow.source == source) & (TriggerRow.issue_key == issue_key)
        & (TriggerRow.status == TriggerStatus.PENDING.value))


def trigger_from_row(row: TriggerRow) -> Trigger:
    return Trigger(
        id=row.id, source=row.source, issue_key=row.issue_key, policy_id=row.policy_id,
        dryrun=row.dryrun_json, status=TriggerStatus(row.status), available_at=row.available_at,
        execution_ids=list((row.output_json or {}).get("execution_ids", [])),
        failure_reason=row.failure_reason, created_at=row.created_at,
        updated_at=row.updated_at, completed_at=row.completed_at,
    )


class TriggerRepository:
    def __init__(self, db: peewee.Database):
        self.db = db

    def create(self, source: str, issue_key: str, *, policy_id: int | None, dryrun: dict | None,
               now: datetime) -> Trigger:
        now = to_utc(now)
        with unit_of_work(self.db):
            row = TriggerRow.create(
                source=source, issue_key=issue_key, input_json={"issue_key": issue_key},
                policy_id=policy_id, dryrun_json=dryrun, status=TriggerStatus.PENDING.value,
                available_at=now, output_json={"execution_ids": []}, failure_reason="",
                created_at=now, updated_at=now,
            )
        return trigger_from_row(row)

    def ensure_reserved_trigger(self, source: str, issue_key: str, now: datetime) -> None:
        """A ``pending`` trigger of ``source`` for ``issue_key`` exists afterwards: an open one
        is reused (N§3.4: duplicate wake-ups may be coalesced, a missing one may not), else one
        is created; the trigger poll picks it up."""
        with write_lock(self.db):
            if not _pending(source, issue_key).exists():
                self.create(source, issue_key, policy_id=None, dryrun=None, now=now)

    def pending_twin(self, trigger: Trigger) -> int | None:
        """Another ``pending`` trigger of the same source for the same issue, the oldest, or
        None: deferring both would be two wake-ups where one reads the same latest state."""
        with unit_of_work(self.db):
            row = (_pending(trigger.source, trigger.issue_key)
                   .where(TriggerRow.id != trigger.id).order_by(TriggerRow.id).first())
        return row.id if row else None

    def get(self, trigger_id: int) -> Trigger:
        with unit_of_work(self.db):
            row = TriggerRow.get_or_none(TriggerRow.id == trigger_id)
        if row is None:
            raise NotFound(f"trigger {trigger_id} not found")
        return trigger_from_row(row)

    def claim(self, trigger_id: int, now: datetime, *, recovering: bool = False
              ) -> Trigger | None:
        """``pending`` → ``processing`` by a conditional UPDATE, so a second claimer loses.

        At boot, ``recovering`` also takes over a trigger left ``processing`` by the previous
        process. Returns None when the trigger is not ours to process.
        """
        now = to_utc(now)
        claimable = [TriggerStatus.PENDING.value]
        if recovering:
            claimable.append(TriggerStatus.PROCESSING.value)
        with unit_of_work(self.db):
            claimed = (TriggerRow.update(status=TriggerStatus.PROCESSING.value, updated_at=now)
                       .where((TriggerRow.id == trigger_id)
                              & TriggerRow.status.in_(claimable)
                              & (TriggerRow.available_at <= now))
                       .execute())
            if not claimed:
                return None
            return trigger_from_row(TriggerRow.get_by_id(trigger_id))

    def complete(self, trigger_id: int, execution_ids: list[int], now: datetime,
                 reason: str = "") -> None:
        self._close(trigger_id, TriggerStatus.COMPLETED, now, execution_ids, reason)

    def fail(self, trigger_id: int, reason: str, now: datetime) -> None:
        self._close(trigger_id, TriggerStatus.FAILED, now, [], reason)

    def _close(self, trigger_id: int, status: TriggerStatus, now: datetime,
               execution_ids: list[int], reason: str) -> None:
        now = to_utc(now)
        with unit_of_work(self.db):
            (TriggerRow.update(status=status.value, output_json={"execution_ids": execution_ids},
                               failure_reason=reason, updated_at=now, completed_at=now)
             .where(TriggerRow.id == trigger_id).execute())

    def defer(self, trigger_id: int, until: datetime, now: datetime) -> None:
        """Back to ``pending``, due again at ``until`` (N§3.4)."""
        with unit_of_work(self.db):
            (TriggerRow.update(status=TriggerStatus.PENDING.value, available_at=to_utc(until),
                               updated_at=to_utc(now))
             .where(TriggerRow.id == trigger_id).execute())

    def due(self, now: datetime, limit: int = 100) -> list[int]:
        """Pending triggers whose ``available_at`` has come, oldest first (the poll)."""
        with unit_of_work(self.db):
            query = (TriggerRow.select(TriggerRow.id)
                     .where((TriggerRow.status == TriggerStatus.PENDING.value)
                            & (TriggerRow.available_at <= to_utc(now)))
                     .order_by(TriggerRow.id).limit(limit))
            return [row.id for row in query]

    def backlog(self, now: datetime) -> dict[str, tuple[int, float]]:
        """status → (count, age in seconds of the oldest) of open triggers, deferred ones
        (not yet due) included (N§12)."""
        with unit_of_work(self.db):
            rows = (TriggerRow
                    .select(TriggerRow.status, peewee.fn.COUNT(TriggerRow.id).alias("count"),
                            peewee.fn.MIN(TriggerRow.created_at).alias("oldest"))
                    .where(TriggerRow.status.in_(_OPEN)).group_by(TriggerRow.status).dicts())
            return {row["status"]: (row["count"],
                                    seconds_since(now, row["oldest"], TriggerRow.created_at))
                    for row in rows}

    def recoverable(self) -> list[int]:
        """Every pending or processing trigger, oldest first (boot recovery, M§11)."""
        with unit_of_work(self.db):
            query = (TriggerRow.select(TriggerRow.id).where(TriggerRow.status.in_(_OPEN))
                     .order_by(TriggerRow.id))
            return [row.id for row in query]
