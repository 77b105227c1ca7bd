"""Dispatch triggers: the durable intake outbox (docs/design.md, "The life of a trigger")."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import peewee

from ticket_dispatcher.domain.catalog import RESERVED_SOURCES
from ticket_dispatcher.domain.execution import (
    DryRun,
    ExecutionStatus,
    Lease,
    Trigger,
    TriggerInput,
    TriggerStatus,
)
from ticket_dispatcher.domain.matching import NOTIFICATION_LANE
from ticket_dispatcher.errors import LeaseLost, NotFound
from ticket_dispatcher.store.database import (
    Prepared,
    dict_rows,
    engine_of,
    execute,
    one_statement_write,
    seconds_since,
    skip_locked,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.deliveries import DeliveryRepository, take_statement
from ticket_dispatcher.store.models import (
    DriverTime,
    ExecutionRow,
    TriggerRow,
    json_param,
    placeholders,
    time_param,
)
from ticket_dispatcher.timeutil import to_utc

_OPEN = (TriggerStatus.PENDING.value, TriggerStatus.PROCESSING.value)


def held(trigger_id: int, lease: Lease | None) -> peewee.Expression:
    """The trigger row, fenced: still ``processing`` under ``lease`` (any row when None)."""
    where = TriggerRow.id == trigger_id
    if lease is None:
        return where
    return where & ((TriggerRow.status == TriggerStatus.PROCESSING.value)
                    & TriggerRow.under(lease))


def _pending(source: str, issue_key: str) -> peewee.Select:
    """The ``pending`` triggers of ``source`` for ``issue_key`` (their ids)."""
    return TriggerRow.select(TriggerRow.id).where(
        (TriggerRow.source == source) & (TriggerRow.issue_key == issue_key)
        & (TriggerRow.status == TriggerStatus.PENDING.value))


# What ``_trigger_from_values`` takes, in its order.
_TRIGGER_COLUMNS = ("id, source, issue_key, policy_id, dryrun_json, status, available_at, "
                    "output_json, failure_reason, created_at, updated_at, completed_at, "
                    "retry_count, retry_reason, retry_since, input_json, "
                    "maintenance_window_id")


def _trigger_from_values(trigger_id: int, source: str, issue_key: str, policy_id: int | None,
                         dryrun: object, status: str, available_at: DriverTime, output: object,
                         failure_reason: str, created_at: DriverTime, updated_at: DriverTime,
                         completed_at: DriverTime, retry_count: int, retry_reason: str,
                         retry_since: DriverTime, input_value: object,
                         maintenance_window_id: int | None) -> Trigger:
    """A trigger from the driver's values of ``_TRIGGER_COLUMNS``, converted as the model's
    fields convert them (no model object: a claim reads one per trigger). A JSON column's
    value is text or already decoded, as the driver has it."""
    time = TriggerRow.created_at.python_value
    output_json: dict | None = TriggerRow.output_json.python_value(output)  # an object
    return Trigger(
        id=trigger_id, source=source, issue_key=issue_key, policy_id=policy_id,
        dryrun=TriggerRow.dryrun_json.python_value(dryrun), status=TriggerStatus(status),
        available_at=time(available_at),
        execution_ids=list((output_json or {}).get("execution_ids", [])),
        failure_reason=failure_reason, created_at=time(created_at),
        updated_at=time(updated_at), completed_at=time(completed_at),
        retry_count=retry_count, retry_reason=retry_reason, retry_since=time(retry_since),
        extra_input=_extra_input(TriggerRow.input_json.python_value(input_value)),
        maintenance_window_id=maintenance_window_id,
    )


def _extra_input(stored: dict[str, Any] | None) -> TriggerInput:
    """The stored input beyond the issue key, which has its own column."""
    return cast(TriggerInput, {k: v for k, v in (stored or {}).items() if k != "issue_key"})


def _execution_failed() -> peewee.ColumnBase:
    """True where one of the trigger's executions failed: an EXISTS through the executions'
    trigger index."""
    failed = (ExecutionRow.select(ExecutionRow.id)
              .where((ExecutionRow.trigger == TriggerRow.id)
                     & (ExecutionRow.status == ExecutionStatus.FAILED.value)))
    return peewee.fn.EXISTS(failed)


def trigger_from_row(row: TriggerRow) -> Trigger:
    """A trigger from its row; ``execution_failed`` from the row's column of that name when
    the query selected it (``_execution_failed``), else False."""
    return Trigger(
        id=row.id, source=row.source, issue_key=row.issue_key, policy_id=row.policy_id,
        dryrun=row.dryrun_json, status=TriggerStatus(row.status), available_at=row.available_at,
        execution_ids=list((row.output_json or {}).get("execution_ids", [])),
        failure_reason=row.failure_reason, created_at=row.created_at,
        updated_at=row.updated_at, completed_at=row.completed_at,
        retry_count=row.retry_count, retry_reason=row.retry_reason,
        retry_since=row.retry_since, extra_input=_extra_input(row.input_json),
        execution_failed=bool(getattr(row, "execution_failed", False)),
        maintenance_window_id=row.maintenance_window_id,
    )


def _claim_statements(param: str) -> dict[tuple[bool, bool], str]:
    """``claim``'s UPDATE … RETURNING for (recovering, with an owner), written out once: each
    trigger is claimed at least once, and peewee took longer to build this statement (every
    column in RETURNING) than the database took to run it."""
    free = f"(lease_owner IS NULL OR lease_expires_at < {param})"
    takeover = {(True, False): "", (True, True): "",
                (False, False): f" AND {free}",
                (False, True): f" AND ({free} OR lease_owner = {param})"}
    return {shape: Prepared(
                f"UPDATE {TriggerRow._meta.table_name} SET status = {param}, "
                f"updated_at = {param}, lease_owner = {param}, "
                f"lease_epoch = lease_epoch + 1, lease_expires_at = {param} "
                f"WHERE id = {param} AND available_at <= {param} AND (status = {param} "
                f"OR (status = {param}{condition})) RETURNING {_TRIGGER_COLUMNS}, lease_epoch")
            for shape, condition in takeover.items()}


class TriggerClosing:
    """The UPDATE that ends a trigger (``completed`` or ``failed``) with its executions' ids
    and gives its lease back; with the caller's lease, only while the trigger is still
    ``processing`` under it. Every trigger ends once: written out once, not built by peewee."""

    def __init__(self, db: peewee.Database):
        self._db = db
        self._statements = {fenced: Prepared(self.statement(fenced=fenced))
                            for fenced in (False, True)}

    def statement(self, *, fenced: bool, output: str | None = None) -> str:
        """The UPDATE; its parameters are ``run``'s in order (status, output, reason, the time
        twice, the trigger's id, then with ``fenced`` the lease's status, owner and epoch).
        ``output``: an SQL expression for the output column in place of its parameter."""
        param = self._db.param
        update = (f"UPDATE {TriggerRow._meta.table_name} SET status = {param}, "
                  f"output_json = {output or param}, failure_reason = {param}, "
                  f"updated_at = {param}, completed_at = {param}, lease_owner = NULL, "
                  f"lease_expires_at = NULL WHERE id = {param}")
        if fenced:
            update += f" AND status = {param} AND lease_owner = {param} AND lease_epoch = {param}"
        return update

    def run(self, trigger_id: int, status: TriggerStatus, execution_ids: list[int],
            reason: str, now: datetime, lease: Lease | None) -> int:
        """The number of rows ended: 0 when the lease no longer holds the trigger."""
        moment = time_param(to_utc(now))
        fence = () if lease is None else (TriggerStatus.PROCESSING.value, lease.owner,
                                          lease.epoch)
        return self._db.execute_sql(self._statements[lease is not None], (
            status.value, json_param({"execution_ids": execution_ids}), reason, moment, moment,
            trigger_id, *fence)).rowcount


def _new_trigger(source: str, issue_key: str, policy_id: int | None, dryrun: DryRun | None,
                 now: datetime, extra_input: TriggerInput | None) -> tuple[tuple, Trigger]:
    """The INSERT's parameters of a new ``pending`` trigger, and the trigger (its id still 0)."""
    now = to_utc(now)
    moment = time_param(now)
    extra_input = extra_input or {}
    params = (source, issue_key, json_param({**extra_input, "issue_key": issue_key}), policy_id,
              json_param(dryrun), TriggerStatus.PENDING.value, moment,
              json_param({"execution_ids": []}), "", moment, moment, 0)
    return params, Trigger(id=0, source=source, issue_key=issue_key, policy_id=policy_id,
                           dryrun=dryrun, status=TriggerStatus.PENDING, available_at=now,
                           execution_ids=[], failure_reason="", created_at=now, updated_at=now,
                           extra_input=extra_input)


class TriggerRepository:
    def __init__(self, db: peewee.Database):
        self.db = db
        self._claim = _claim_statements(db.param)
        self._closing = TriggerClosing(db)
        columns = ("(source, issue_key, input_json, policy_id, dryrun_json, status, "
                   "available_at, output_json, failure_reason, created_at, updated_at, "
                   "lease_epoch)")
        values = placeholders(db.param, 12)
        self._insert = Prepared(f"INSERT INTO {TriggerRow._meta.table_name} {columns} "
                                f"VALUES ({values}) RETURNING id")
        # A webhook delivery's record and its one trigger in one statement, which needs no
        # transaction around it, where the engine writes so (``create_for_delivery``).
        self._one_statement_writes = engine_of(db).one_statement_writes
        self._insert_once = Prepared(
            f"WITH taken AS ({take_statement(db.param)}) "
            f"INSERT INTO {TriggerRow._meta.table_name} {columns} "
            f"SELECT {values} FROM taken RETURNING id")

    def create(self, source: str, issue_key: str, *, policy_id: int | None,
               dryrun: DryRun | None, now: datetime,
               extra_input: TriggerInput | None = None) -> Trigger:
        """Insert a ``pending`` trigger. Every accepted request writes one, so the INSERT is
        written out once, not built by peewee per request."""
        params, trigger = _new_trigger(source, issue_key, policy_id, dryrun, now, extra_input)
        with unit_of_work(self.db):
            [(trigger.id,)] = self.db.execute_sql(self._insert, params).fetchall()
        return trigger

    def delivery_statements(self, triggers: int) -> int:
        """How many statements ``create_for_delivery`` writes for that many triggers."""
        return 1 if self._one_statement_writes and triggers == 1 else 1 + triggers

    def create_for_delivery(self, deliveries: DeliveryRepository, identifier: str,
                            issue_key: str, triggers: list[tuple[str, TriggerInput]], *,
                            now: datetime) -> list[Trigger] | None:
        """Record the webhook delivery ``identifier`` and insert its ``pending`` triggers
        (each a source and its input beyond the issue key); None, and nothing written, when
        the delivery was taken before. One trigger on PostgreSQL, the usual delivery: one
        statement; otherwise the delivery's INSERT and each trigger's, in the caller's
        transaction."""
        if self.delivery_statements(len(triggers)) > 1:
            if not deliveries.take(identifier, now):
                return None
            return [self.create(source, issue_key, policy_id=None, dryrun=None, now=now,
                                extra_input=extra) for source, extra in triggers]
        [(source, extra)] = triggers
        params, trigger = _new_trigger(source, issue_key, None, None, now, extra)
        with unit_of_work(self.db):
            rows = self.db.execute_sql(self._insert_once, (
                identifier, time_param(to_utc(now)), *params)).fetchall()
        if not rows:
            return None
        [(trigger.id,)] = rows
        deliveries.taken(now)
        return [trigger]

    def ensure_reserved_trigger(self, source: str, issue_key: str, now: datetime) -> None:
        """A ``pending`` trigger of ``source`` for ``issue_key`` exists afterwards: an open one
        is reused (duplicate wake-ups may be coalesced, a missing one may not), else one
        is created; the trigger poll picks it up."""
        with write_lock(self.db):
            if not _pending(source, issue_key).exists():
                self.create(source, issue_key, policy_id=None, dryrun=None, now=now)

    def pending_duplicate(self, trigger: Trigger) -> int | None:
        """Another ``pending`` trigger of the same source for the same issue, the oldest, or
        None: deferring both would be two wake-ups where one reads the same latest state."""
        with unit_of_work(self.db):
            row = (_pending(trigger.source, trigger.issue_key)
                   .where(TriggerRow.id != trigger.id).order_by(TriggerRow.id).first())
        return row.id if row else None

    def get(self, trigger_id: int) -> Trigger:
        with unit_of_work(self.db):
            row = (TriggerRow.select(TriggerRow, _execution_failed().alias("execution_failed"))
                   .where(TriggerRow.id == trigger_id).first())
        if row is None:
            raise NotFound(f"trigger {trigger_id} not found")
        return trigger_from_row(row)

    def page(self, *, status: TriggerStatus | None = None, source: str | None = None,
             issue_key: str | None = None, created_after: datetime | None = None,
             created_before: datetime | None = None, execution_failed: bool | None = None,
             retrying: bool = False, before_id: int | None = None,
             limit: int = 50) -> tuple[list[Trigger], int | None]:
        """Newest first (by id): at most ``limit`` triggers with an id below ``before_id``
        (all when None), ``created_at`` in [``created_after``, ``created_before``).
        ``execution_failed``: only those one of whose executions failed (True) or none did
        (False). ``retrying``: only ``pending`` ones waiting for their next try after a
        passing fault (``Trigger.retrying``). Also the ``before_id`` of the next page, None on
        the last one. One query: a row more than ``limit`` says whether another page follows,
        so no COUNT is needed."""
        failed = _execution_failed()
        query = TriggerRow.select(TriggerRow, failed.alias("execution_failed"))
        if retrying:
            status = TriggerStatus.PENDING
            query = query.where(TriggerRow.retry_since.is_null(False))
        for column, value in ((TriggerRow.status, status and status.value),
                              (TriggerRow.source, source),
                              (TriggerRow.issue_key, issue_key)):
            if value is not None:
                query = query.where(column == value)
        if created_after is not None:
            query = query.where(TriggerRow.created_at >= to_utc(created_after))
        if created_before is not None:
            query = query.where(TriggerRow.created_at < to_utc(created_before))
        if execution_failed is not None:
            query = query.where(failed if execution_failed else ~failed)
        if before_id is not None:
            query = query.where(TriggerRow.id < before_id)
        with unit_of_work(self.db):
            rows = list(query.order_by(TriggerRow.id.desc()).limit(limit + 1))
        following = rows[limit - 1].id if len(rows) > limit else None
        return [trigger_from_row(row) for row in rows[:limit]], following

    def retrying_count(self) -> int:
        """How many triggers wait for their next try after a passing fault
        (``Trigger.retrying``): the admin view's Jira retries."""
        with unit_of_work(self.db):
            return (TriggerRow.select(TriggerRow.id)
                    .where((TriggerRow.status == TriggerStatus.PENDING.value)
                           & TriggerRow.retry_since.is_null(False))
                    .count())

    def failed_since(self, since: datetime, cap: int) -> int:
        """How many triggers created at or after ``since`` have failed, counted up to ``cap``
        (the overview's "failed in the last hour"): one query through the creation-time index.

        The status is compared as ``status || ''`` so that neither engine takes the status
        index instead: SQLite would, and walk every failed trigger ever stored to find the
        hour's few."""
        recent = (TriggerRow.select(TriggerRow.id)
                  .where((TriggerRow.created_at >= to_utc(since))
                         & (TriggerRow.status.concat("") == TriggerStatus.FAILED.value))
                  .limit(cap))
        with unit_of_work(self.db):
            return recent.count()

    def claim(self, trigger_id: int, now: datetime, *, recovering: bool = False,
              owner: str = "", expires_at: datetime | None = None) -> Trigger | None:
        """Claim a due trigger under a new lease (``Trigger.lease``) by one conditional
        UPDATE, so a second claimer loses: a ``pending`` one, or a ``processing`` one that
        nobody holds any more (no owner, or its lease expired), or that ``owner`` holds itself
        (this process has each trigger in hand once: its processing was interrupted, or a
        claim of this process for its idle actors took it first). ``recovering``:
        boot recovery of the one process that serves this database takes over any
        ``processing`` trigger, since whoever held it is gone. None when the trigger is not
        ours to process. Without ``expires_at`` the lease never expires.
        """
        moment = time_param(to_utc(now))
        params = [TriggerStatus.PROCESSING.value, moment, owner,
                  time_param(to_utc(expires_at)) if expires_at else None, trigger_id, moment,
                  TriggerStatus.PENDING.value, TriggerStatus.PROCESSING.value]
        if not recovering:
            params.append(moment)  # the lease expired
            if owner:
                params.append(owner)
        statement = self._claim[(recovering, bool(owner))]
        # Without the wait for the disk: a claim lost with the server is made again, the
        # trigger still pending.
        with one_statement_write(self.db):
            rows = execute(self.db, statement, params, wait_for_disk=False).fetchall()
        if not rows:
            return None
        *columns, epoch = rows[0]
        trigger = _trigger_from_values(*columns)
        trigger.lease = Lease(owner, epoch)
        return trigger

    def claim_due(self, owner: str, limit: int, *, now: datetime,
                  expires_at: datetime, first: str | None = None) -> list[Trigger]:
        """Claim for ``owner`` up to ``limit`` triggers, oldest first: ``pending`` ones whose
        ``available_at`` has come and ``processing`` ones nobody holds any more. Rows another
        replica is claiming at the same moment are skipped (``FOR UPDATE SKIP LOCKED``).
        ``first``: the lane (``domain.matching.lane_of``) whose triggers go before the
        other's; None: by id alone."""
        if limit < 1:
            return []
        now = to_utc(now)
        order: list[peewee.ColumnBase] = [TriggerRow.id]
        if first is not None:
            notification = 0 if first == NOTIFICATION_LANE else 1
            order.insert(0, peewee.Case(None, [(TriggerRow.source.in_(sorted(RESERVED_SOURCES)),
                                                notification)], 1 - notification))
        due = (TriggerRow.select(TriggerRow.id)
               .where(((TriggerRow.status == TriggerStatus.PENDING.value)
                       & (TriggerRow.available_at <= now))
                      | ((TriggerRow.status == TriggerStatus.PROCESSING.value)
                         & TriggerRow.unheld(now)))
               .order_by(*order).limit(limit))
        with write_lock(self.db):
            rows = list(TriggerRow.update(
                status=TriggerStatus.PROCESSING.value, updated_at=now, lease_owner=owner,
                lease_epoch=TriggerRow.lease_epoch + 1, lease_expires_at=to_utc(expires_at))
                .where(TriggerRow.id.in_(skip_locked(due, self.db)))
                .returning(TriggerRow))
        claimed = []
        for row in sorted(rows, key=lambda row: row.id):
            trigger = trigger_from_row(row)
            trigger.lease = Lease(owner, row.lease_epoch)
            claimed.append(trigger)
        return claimed

    def release_owner(self, owner: str) -> int:
        """Give back every lease ``owner`` holds on a ``processing`` trigger: it stays
        ``processing``, and another replica's claim takes it over at once."""
        with unit_of_work(self.db):
            return (TriggerRow.update(**TriggerRow.RELEASED)
                    .where((TriggerRow.status == TriggerStatus.PROCESSING.value)
                           & (TriggerRow.lease_owner == owner))
                    .execute())

    def complete(self, trigger_id: int, execution_ids: list[int], now: datetime,
                 reason: str = "", *, lease: Lease | None = None) -> None:
        self._close(trigger_id, TriggerStatus.COMPLETED, now, execution_ids, reason, lease)

    def fail(self, trigger_id: int, reason: str, now: datetime, *,
             lease: Lease | None = None) -> None:
        self._close(trigger_id, TriggerStatus.FAILED, now, [], reason, lease)

    def _close(self, trigger_id: int, status: TriggerStatus, now: datetime,
               execution_ids: list[int], reason: str, lease: Lease | None) -> None:
        with unit_of_work(self.db):
            updated = self._closing.run(trigger_id, status, execution_ids, reason, now, lease)
        if lease is not None and not updated:
            raise LeaseLost(f"trigger {trigger_id} is no longer held by this process")

    def defer(self, trigger_id: int, until: datetime, now: datetime, *,
              lease: Lease | None = None) -> None:
        """Back to ``pending``, due again at ``until``. Its issue was loaded: a later
        passing fault starts a new retry budget."""
        with unit_of_work(self.db):
            updated = (TriggerRow.update(status=TriggerStatus.PENDING.value,
                                         available_at=to_utc(until), updated_at=to_utc(now),
                                         retry_since=None, maintenance_window_id=None,
                                         **TriggerRow.RELEASED)
                       .where(held(trigger_id, lease)).execute())
        if lease is not None and not updated:
            raise LeaseLost(f"trigger {trigger_id} is no longer held by this process")

    def hold(self, trigger_id: int, window_id: int, until: datetime, now: datetime, *,
             lease: Lease | None = None) -> None:
        """Back to ``pending``, held by the maintenance window ``window_id``: due again at
        ``until``, the end of its occurrence (or at once, when it is ended early)."""
        with unit_of_work(self.db):
            updated = (TriggerRow.update(status=TriggerStatus.PENDING.value,
                                         available_at=to_utc(until), updated_at=to_utc(now),
                                         maintenance_window_id=window_id,
                                         **TriggerRow.RELEASED)
                       .where(held(trigger_id, lease)).execute())
        if lease is not None and not updated:
            raise LeaseLost(f"trigger {trigger_id} is no longer held by this process")

    def retry(self, trigger_id: int, until: datetime, reason: str, now: datetime, *,
              since: datetime, lease: Lease | None = None) -> None:
        """Back to ``pending`` after a passing fault, due again at ``until``: one retry
        more, its ``reason``, and ``since`` when the first of them failed."""
        with unit_of_work(self.db):
            updated = (TriggerRow.update(status=TriggerStatus.PENDING.value,
                                         available_at=to_utc(until), updated_at=to_utc(now),
                                         retry_count=TriggerRow.retry_count + 1,
                                         retry_reason=reason, retry_since=to_utc(since),
                                         maintenance_window_id=None, **TriggerRow.RELEASED)
                       .where(held(trigger_id, lease)).execute())
        if lease is not None and not updated:
            raise LeaseLost(f"trigger {trigger_id} is no longer held by this process")

    # -- leases ----------------------------------------------------------------------------------

    def renew(self, owner: str, trigger_ids: list[int], expires_at: datetime) -> set[int]:
        """Extend ``owner``'s leases on these ``processing`` triggers; the ids still held."""
        if not trigger_ids:
            return set()
        with unit_of_work(self.db):
            rows = (TriggerRow.update(lease_expires_at=to_utc(expires_at))
                    .where(TriggerRow.id.in_(trigger_ids) & (TriggerRow.lease_owner == owner)
                           & (TriggerRow.status == TriggerStatus.PROCESSING.value))
                    .returning(TriggerRow.id))
            return {row.id for row in rows}

    def stale(self, now: datetime, limit: int = 100) -> list[int]:
        """``processing`` triggers whose lease has expired or that nobody holds, oldest
        first: the sweeper resumes them."""
        now = to_utc(now)
        with unit_of_work(self.db):
            query = (TriggerRow.select(TriggerRow.id)
                     .where((TriggerRow.status == TriggerStatus.PROCESSING.value)
                            & TriggerRow.unheld(now))
                     .order_by(TriggerRow.id).limit(limit))
            return [row.id for row in query]

    def due(self, now: datetime, limit: int = 100) -> list[tuple[int, str]]:
        """(id, source) of the pending triggers whose ``available_at`` has come, oldest first
        (the poll)."""
        with unit_of_work(self.db):
            query = (TriggerRow.select(TriggerRow.id, TriggerRow.source)
                     .where((TriggerRow.status == TriggerStatus.PENDING.value)
                            & (TriggerRow.available_at <= to_utc(now)))
                     .order_by(TriggerRow.id).limit(limit))
            return [(row.id, row.source) for row in query]

    def backlog(self, now: datetime) -> dict[str, tuple[int, float]]:
        """status → (count, age in seconds of the oldest) of open triggers, deferred ones
        (not yet due) included; not those a maintenance window holds, which wait for its end
        on purpose."""
        held = ((TriggerRow.status == TriggerStatus.PENDING.value)
                & TriggerRow.maintenance_window_id.is_null(False))
        with unit_of_work(self.db):
            rows = dict_rows(TriggerRow
                             .select(TriggerRow.status,
                                     peewee.fn.COUNT(TriggerRow.id).alias("count"),
                                     peewee.fn.MIN(TriggerRow.created_at).alias("oldest"))
                             .where(TriggerRow.status.in_(_OPEN) & ~held)
                             .group_by(TriggerRow.status))
            return {row["status"]: (row["count"],
                                    seconds_since(now, row["oldest"], TriggerRow.created_at))
                    for row in rows}

    def recoverable(self) -> list[tuple[int, str]]:
        """(id, source) of every pending or processing trigger, oldest first (boot
        recovery)."""
        with unit_of_work(self.db):
            query = (TriggerRow.select(TriggerRow.id, TriggerRow.source)
                     .where(TriggerRow.status.in_(_OPEN)).order_by(TriggerRow.id))
            return [(row.id, row.source) for row in query]
