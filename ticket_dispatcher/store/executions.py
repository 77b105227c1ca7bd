"""Executions with their pre-built rule and action executions.

An execution is stored as one ``dispatch_executions`` row plus one ``dispatch_rule_executions``
row per rule, each carrying its ordered action executions as JSON. Creation writes the whole
aggregate, the missing default context and the trigger output all or nothing (on PostgreSQL
in one statement); ``save`` is the behavior's checkpoint port.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import peewee

from ticket_dispatcher.domain.burden_events import BurdenEvent, events_of
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.execution import (
    ActionExecution,
    ActionStatus,
    Execution,
    ExecutionMode,
    ExecutionStatus,
    Lease,
    RuleExecution,
    RuleOutcome,
    TriggerStatus,
)
from ticket_dispatcher.errors import Conflict, LeaseLost, NotFound
from ticket_dispatcher.safejson import MAX_ID
from ticket_dispatcher.store.burden import BurdenRepository
from ticket_dispatcher.store.contexts import ContextRepository
from ticket_dispatcher.store.database import (
    Prepared,
    dict_rows,
    engine_of,
    execute,
    fetch_page,
    one_statement_write,
    read_rows,
    rows_of,
    seconds_since,
    skip_locked,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.engine import Engine
from ticket_dispatcher.store.models import (
    ExecutionRow,
    RuleExecutionRow,
    TriggerRow,
    json_param,
    placeholders,
    time_param,
)
from ticket_dispatcher.store.triggers import TriggerClosing
from ticket_dispatcher.timeutil import parse_rfc3339, to_utc

_RUNNING = (ExecutionStatus.CREATED.value, ExecutionStatus.EXECUTING.value)
# How far back ``latest_matched`` looks for a rule's newest run, in executions (by id).
LATEST_LOOKBACK = 10_000
# How many parked waits past the start of its page the parked list counts, at most: a count of
# every one reads every parked row, a cost that grows with them, for a figure an operator reads
# as "more than ten thousand" anyway.
PARKED_COUNTED = 10_000


class ExecutionRepository:
    def __init__(self, db: peewee.Database, contexts: ContextRepository,
                 burden: BurdenRepository | None = None):
        self.db = db
        self.engine = engine_of(db)
        self._contexts = contexts  # creation writes the missing default context too
        # a checkpoint that records an assignment or a notification writes its burden row
        self._burden = burden
        self._closing = TriggerClosing(db)  # creation completes the trigger
        self._sql = _Statements(db.param, self._closing, self.engine)

    # -- creation ---------------------------------------------------------------------------

    def busy_lock_keys(self, keys: Iterable[str]) -> set[str]:
        """The lock keys held by a live execution that is ``created`` or ``executing``."""
        keys = [key for key in keys if key]
        if not keys:
            return set()
        condition, params = self.engine.among("live_lock_key", keys, "text[]")
        with unit_of_work(self.db):  # every trigger asks: written out
            return {key for (key,) in self.db.execute_sql(
                f"SELECT live_lock_key FROM {ExecutionRow._meta.table_name} "
                f"WHERE {condition}", params).fetchall()}

    def started_since(self, source: str, issue_key: str, since: datetime) -> bool:
        """Whether a live execution for ``issue_key`` was created by a trigger of ``source``
        at or after ``since``: a change that already set the role's workflow going."""
        query = (ExecutionRow.select(ExecutionRow.id)
                 .join(TriggerRow, on=ExecutionRow.trigger == TriggerRow.id)
                 .where((ExecutionRow.issue_key == issue_key)
                        & (ExecutionRow.mode == ExecutionMode.LIVE.value)
                        & (ExecutionRow.created_at >= to_utc(since))
                        & (TriggerRow.source == source)))
        with unit_of_work(self.db):
            return query.exists()

    def worked_since(self, issue_key: str, since: datetime, *,
                     excluding: int | None = None) -> bool:
        """Whether a live execution of ``issue_key`` (other than ``excluding``) may have
        written to the issue at or after ``since``: one saved since then, or one not ended
        (it may wake and write)."""
        query = (ExecutionRow.select(ExecutionRow.id)
                 .where((ExecutionRow.issue_key == issue_key)
                        & (ExecutionRow.mode == ExecutionMode.LIVE.value)
                        & ((ExecutionRow.updated_at >= to_utc(since))
                           | ExecutionRow.status.in_(_RUNNING))))
        if excluding is not None:
            query = query.where(ExecutionRow.id != excluding)
        with unit_of_work(self.db):
            return query.exists()

    def create(self, trigger_id: int, executions: list[Execution], *, issue_key: str,
               ensure_context: bool, now: datetime, reason: str = "",
               lease: Lease | None = None) -> list[int]:
        """Insert the executions (in order) with every rule execution, the default context when
        asked and missing, and complete the trigger with their IDs (and ``reason``, e.g. the
        busy policies it skipped) — all or nothing.

        Raises ``Conflict`` when a live lock key is already held, and ``LeaseLost`` when the
        trigger is no longer processing under ``lease`` (nothing is written either way).
        """
        now = to_utc(now)
        write = self._create_in_one if self.engine.one_statement_writes else self._create
        try:
            write(trigger_id, executions, issue_key=issue_key, ensure_context=ensure_context,
                  now=now, reason=reason, lease=lease)
        except Conflict:  # the live_lock_key UNIQUE index
            raise Conflict(f"a live execution for {issue_key} already holds the lock") from None
        return [execution.id for execution in executions]

    def _create(self, trigger_id: int, executions: list[Execution], *, issue_key: str,
                ensure_context: bool, now: datetime, reason: str, lease: Lease | None,
                ) -> None:
        with write_lock(self.db):
            ids = [self._insert(execution) for execution in executions]
            if ensure_context:
                self._contexts.ensure_default(issue_key, now)
            completed = self._closing.run(trigger_id, TriggerStatus.COMPLETED, ids, reason,
                                          now, lease)
            if lease is not None and not completed:
                raise LeaseLost(f"trigger {trigger_id} is no longer held by this process")
        for execution, execution_id in zip(executions, ids, strict=True):
            execution.id = execution_id

    def _insert(self, execution: Execution) -> int:
        [(execution_id,)] = self.db.execute_sql(self._sql.insert,
                                                _insert_values(execution)).fetchall()
        for rule in execution.rule_executions:
            self.db.execute_sql(self._sql.insert_rule, (execution_id, *_new_rule_values(rule)))
        return execution_id

    def _create_in_one(self, trigger_id: int, executions: list[Execution], *, issue_key: str,
                       ensure_context: bool, now: datetime, reason: str, lease: Lease | None,
                       ) -> None:
        """``_create`` as one statement (``_Statements.create_in_one``): one round trip where
        there were five or more, and no transaction of its own. Nested in a transaction (a
        replica's creation under its issue lock) it runs in a savepoint, so that a refused
        statement leaves that transaction usable."""
        moment = time_param(now)
        fence = () if lease is None else (TriggerStatus.PROCESSING.value, lease.owner,
                                          lease.epoch)
        params = [TriggerStatus.COMPLETED.value, reason, moment, moment, trigger_id, *fence]
        for execution in executions:
            params += _insert_values(execution)
            for rule in execution.rule_executions:
                params += _new_rule_values(rule)
        if ensure_context:
            params += self._contexts.default_values(issue_key, now)
        statement = self._sql.create_in_one(
            rules=tuple(len(execution.rule_executions) for execution in executions),
            fenced=lease is not None, context=ensure_context)
        # Without the wait for the disk: lost with the server, it is done again from the
        # claimed trigger.
        with (write_lock if self.db.in_transaction() else one_statement_write)(self.db):
            [(ended, *ids)] = execute(self.db, statement, params,
                                      wait_for_disk=False).fetchall()
        if not ended:
            if lease is not None:
                raise LeaseLost(f"trigger {trigger_id} is no longer held by this process")
            raise NotFound(f"trigger {trigger_id} not found")
        for execution, execution_id in zip(executions, ids, strict=True):
            execution.id = execution_id

    # -- the behavior's checkpoints -------------------------------------------------------------

    def save(self, execution: Execution, rules: list[RuleExecution], *,
             lease: Lease | None = None, parked: bool = False) -> None:
        """Persist the execution row and these rules in one short transaction (on PostgreSQL
        one statement: ``_Statements.save_in_one``).

        The row is only updated while it is still running, so a concurrent cancel is never
        overwritten (``Conflict``: the execution ended elsewhere), and, with a ``lease``, only
        while that lease is the current one (``LeaseLost``: another holder took over). A
        terminal or ``parked`` execution gives its lease back in the same UPDATE.

        Every step of every execution passes here, so its statements are written out once
        (``_Statements``) rather than built by peewee per call, and their values converted
        before the write lock is taken.
        """
        released, fenced = execution.status.terminal or parked, lease is not None
        values: tuple[object, ...] = (
            execution.status.value, execution.failure_code, execution.failure_reason,
            time_param(execution.wake_at), execution.live_lock_key,
            time_param(execution.updated_at), time_param(execution.completed_at),
            execution.id, *_RUNNING)
        if lease is not None:
            values += (lease.owner, lease.epoch)
        changes = [_rule_values(execution.id, rule) for rule in rules]
        # What the checkpoint records for the burden report: written with it, or not at all.
        events = (self._burden.unwritten(events_of(execution, rules))
                  if self._burden is not None else [])
        if self.engine.one_statement_writes:
            statement = self._sql.save_in_one(released=released, fenced=fenced,
                                              rules=len(changes))
            params = values + tuple(value for rule in changes for value in rule)
            if events and self._burden is not None:
                parts, more = self._burden.guarded(events, "EXISTS (SELECT 1 FROM moved)",
                                                   "burden")
                statement = self._sql.save_in_one(released=released, fenced=fenced,
                                                  rules=len(changes), also=tuple(parts))
                params += tuple(more)
            with one_statement_write(self.db):
                [(matched,)] = self.db.execute_sql(statement, params).fetchall()
                if not matched:
                    raise self._refusal(execution.id, lease)
            if events and self._burden is not None:
                self._burden.written(events)
            return
        if events:  # rare: the checkpoint that records a send or an ACK
            self._save_with_events(execution, lease, values, changes, events,
                                   released=released)
            return
        move = self._sql.save(released=released, fenced=fenced)
        with write_lock(self.db):
            if not self.db.execute_sql(move, values).rowcount:
                raise self._refusal(execution.id, lease)
            for rule_values in changes:
                self.db.execute_sql(self._sql.rule, rule_values)

    def _save_with_events(self, execution: Execution, lease: Lease | None,
                          values: tuple[object, ...], changes: list[tuple],
                          events: list[BurdenEvent], *, released: bool) -> None:
        """``save`` and the burden rows of its rules in one transaction: a row is written
        only with the checkpoint that records its send (docs/burden-report.md)."""
        move = self._sql.save(released=released, fenced=lease is not None)
        assert self._burden is not None
        with write_lock(self.db):
            if not self.db.execute_sql(move, values).rowcount:
                raise self._refusal(execution.id, lease)
            for rule_values in changes:
                self.db.execute_sql(self._sql.rule, rule_values)
            self._burden.record(events)
        self._burden.written(events)

    def record_looks(self, looks: Sequence[tuple[Execution, RuleExecution, datetime]],
                     ) -> set[int]:
        """Save the ACK watcher's looks at parked waits in one transaction: each execution's
        new ``wake_at`` and its waiting rule, as its own poll would park them. A look is
        saved only while its execution is still parked as the watcher knew it (running, held
        by nobody, ``wake_at`` unchanged: ``previous``), so a wait that was woken, claimed or
        cancelled meanwhile is left alone. The ids of the looks saved.

        The statements are written out once and their values converted before the write lock
        is taken: a batch holds SQLite's one write lock for the statements alone, not for
        building them (a hundred looks built by peewee kept every other writer waiting
        seconds on a busy machine)."""
        rows = [((time_param(execution.wake_at), time_param(execution.updated_at),
                  execution.id, *_RUNNING, time_param(previous)),
                 _rule_values(execution.id, rule))
                for execution, rule, previous in looks]
        saved: set[int] = set()
        with write_lock(self.db):
            for (move, rule), (execution, _, _) in zip(rows, looks, strict=True):
                if self.db.execute_sql(self._sql.look, move).rowcount:
                    self.db.execute_sql(self._sql.rule, rule)
                    saved.add(execution.id)
        return saved

    def _refusal(self, execution_id: int, lease: Lease | None) -> Exception:
        """Why a fenced write matched no row: the execution ended, or the lease moved on."""
        row = (ExecutionRow.select(ExecutionRow.status)
               .where(ExecutionRow.id == execution_id).first())
        if lease is not None and row is not None and row.status in _RUNNING:
            return LeaseLost(f"execution {execution_id} is no longer held by this process")
        return Conflict(f"execution {execution_id} is no longer running")

    # -- leases --------------------------------------------------------------------------------

    def claim(self, execution_id: int, *, owner: str, now: datetime,
              expires_at: datetime) -> Lease | None:
        """Take a running execution under a new lease (the epoch goes up by one): when nobody
        holds it, its lease expired, or ``owner`` (this process) holds it already and hands
        it to a new actor. None when it is terminal or another live holder has it."""
        params = (owner, time_param(to_utc(expires_at)), execution_id, *_RUNNING,
                  time_param(to_utc(now)), owner)
        with one_statement_write(self.db):
            rows = self.db.execute_sql(self._sql.claim, params).fetchall()
        return Lease(owner, rows[0][0]) if rows else None

    def claim_loaded(self, execution_id: int, *, owner: str, now: datetime,
                     expires_at: datetime) -> tuple[Lease, Execution] | None:
        """``claim``, and the execution it claimed with its rules, as it is under the new
        lease: one statement on PostgreSQL, two on SQLite. None when it is terminal, missing,
        or another live holder has it."""
        params = (owner, time_param(to_utc(expires_at)), execution_id, *_RUNNING,
                  time_param(to_utc(now)), owner)
        # Without the wait for the disk: a claim lost with the server is made again, and every
        # checkpoint after it is fenced by it.
        with one_statement_write(self.db):
            rows = read_rows(self.db, ExecutionRow, self._sql.claim_loaded, *params,
                             wait_for_disk=False)
        if not rows:
            return None
        row = rows[0]
        if self.engine.one_statement_writes:
            rule_rows = rows_of(RuleExecutionRow, row.rules or [])
        else:
            with unit_of_work(self.db):
                rule_rows = read_rows(self.db, RuleExecutionRow, self._sql.get_rules,
                                      execution_id)
        return (Lease(owner, row.lease_epoch),
                _execution_from_row(row, [_rule_from_row(rule) for rule in rule_rows]))

    def claim_due(self, owner: str, limit: int, *, now: datetime, expires_at: datetime,
                  woken_before: datetime | None = None) -> list[int]:
        """Claim for ``owner`` up to ``limit`` running executions that are due and that no
        live lease covers (``created`` ones, parked ones whose ``wake_at`` is at or before
        ``woken_before``, ``now`` unless given, and the ones whose holder's lease expired),
        the longest due first; their ids. Rows another replica is claiming at the same moment
        are skipped, not waited for (PostgreSQL's ``FOR UPDATE SKIP LOCKED``), so replicas that
        claim together never get the same one."""
        if limit < 1:
            return []
        at = time_param(to_utc(now))
        woken = time_param(to_utc(woken_before)) if woken_before is not None else at
        params = (*_RUNNING, at, limit, woken, *_RUNNING, at, limit, limit, owner,
                  time_param(to_utc(expires_at)))
        with write_lock(self.db):
            rows = self.db.execute_sql(self._sql.claim_due, params).fetchall()
        return sorted(row[0] for row in rows)

    def next_wake(self, now: datetime) -> datetime | None:
        """The soonest ``wake_at`` after ``now`` among the parked executions nobody holds:
        when the next claim should look again."""
        with unit_of_work(self.db):
            [row] = dict_rows(  # an aggregate: one row
                ExecutionRow.select(peewee.fn.MIN(ExecutionRow.wake_at).alias("soonest"))
                .where(self._running_by_wake()
                       & ExecutionRow.lease_owner.is_null()
                       & (ExecutionRow.wake_at > to_utc(now))))
        soonest = row["soonest"]
        return ExecutionRow.wake_at.python_value(soonest) if soonest is not None else None

    def adopt_due(self, now: datetime, until: datetime, limit: int,
                  ) -> list[tuple[int, datetime]]:
        """Take up to ``limit`` parked executions nobody holds whose ``wake_at`` has come, the
        longest due first, by moving their ``wake_at`` to ``until`` (so that no other replica
        takes them meanwhile; rows another one is taking at the same moment are skipped);
        (id, the new wake_at) each. The look that follows saves a wait only while it is still
        parked at that ``wake_at`` (``record_looks``); one that is not looked at by ``until``
        is due again."""
        due = (ExecutionRow.select(ExecutionRow.id)
               .where(ExecutionRow.wake_at.is_null(False)
                      & (ExecutionRow.wake_at <= to_utc(now))
                      & self._running_by_wake() & ExecutionRow.lease_owner.is_null())
               .order_by(ExecutionRow.wake_at, ExecutionRow.id).limit(limit))
        with write_lock(self.db):
            rows = list(ExecutionRow.update(wake_at=to_utc(until), updated_at=to_utc(now))
                        .where(ExecutionRow.id.in_(skip_locked(due, self.db)))
                        .returning(ExecutionRow.id, ExecutionRow.wake_at))
        return sorted((row.id, row.wake_at) for row in rows)

    def _running_by_wake(self) -> peewee.ColumnBase:
        """``status`` is running, for a query that reads the parked executions by ``wake_at``
        (``ix_dispatch_executions_wake``). On SQLite written ``+status``: without statistics its
        planner would take the status index for every running row and sort them, where the wake
        index reads only the rows asked for; PostgreSQL's plans by its statistics."""
        return self.engine.unindexed(ExecutionRow.status).in_(_RUNNING)

    def release_owner(self, owner: str) -> int:
        """Give back every lease ``owner`` holds on a running execution (a replica that
        stops hands its work to the others); the number released."""
        with unit_of_work(self.db):
            return (ExecutionRow.update(**ExecutionRow.RELEASED)
                    .where(ExecutionRow.status.in_(_RUNNING)
                           & (ExecutionRow.lease_owner == owner))
                    .execute())

    def renew(self, owner: str, execution_ids: list[int], expires_at: datetime) -> set[int]:
        """Extend ``owner``'s leases on these running executions; the ids still held."""
        if not execution_ids:
            return set()
        with unit_of_work(self.db):
            rows = (ExecutionRow.update(lease_expires_at=to_utc(expires_at))
                    .where(ExecutionRow.id.in_(execution_ids)
                           & (ExecutionRow.lease_owner == owner)
                           & ExecutionRow.status.in_(_RUNNING))
                    .returning(ExecutionRow.id))
            return {row.id for row in rows}

    def stale(self, now: datetime, limit: int = 500) -> list[int]:
        """Running executions that should run now and that no live lease covers: nobody holds
        them (``created`` ones whose enqueue was lost, parked ones now due) or their holder's
        lease expired. The sweeper resumes them; oldest first."""
        now = to_utc(now)
        with unit_of_work(self.db):
            query = (ExecutionRow.select(ExecutionRow.id)
                     .where(ExecutionRow.status.in_(_RUNNING)
                            & ExecutionRow.unheld(now)
                            & (ExecutionRow.wake_at.is_null() | (ExecutionRow.wake_at <= now)))
                     .order_by(ExecutionRow.id).limit(limit))
            return [row.id for row in query]

    def release_leases(self) -> int:
        """Give back every running execution's lease: at the boot of the one process that
        serves this database, whoever held them is gone. The number released."""
        with unit_of_work(self.db):
            return (ExecutionRow.update(**ExecutionRow.RELEASED)
                    .where(ExecutionRow.status.in_(_RUNNING)
                           & ExecutionRow.lease_owner.is_null(False))
                    .execute())

    def record_restart(self, execution_id: int) -> int:
        """Count one more runtime crash; the new count."""
        return self._increment(execution_id, ExecutionRow.restart_count)

    def record_load_failure(self, execution_id: int, now: datetime) -> tuple[int, datetime]:
        """One failed load more: the loads failed in a row, and when the first of them did
        (the retry budget of a passing fault counts from it)."""
        with write_lock(self.db):
            (ExecutionRow.update(load_attempts=ExecutionRow.load_attempts + 1,
                                 load_failing_since=peewee.fn.COALESCE(
                                     ExecutionRow.load_failing_since, to_utc(now)))
             .where(ExecutionRow.id == execution_id).execute())
            row = (ExecutionRow.select(ExecutionRow.load_attempts,
                                       ExecutionRow.load_failing_since)
                   .where(ExecutionRow.id == execution_id).get())
            return row.load_attempts, row.load_failing_since

    def reset_load_attempts(self, execution_id: int) -> None:
        with unit_of_work(self.db):
            (ExecutionRow.update(load_attempts=0, load_failing_since=None)
             .where(ExecutionRow.id == execution_id).execute())

    def _increment(self, execution_id: int, column: peewee.Field) -> int:
        with write_lock(self.db):
            (ExecutionRow.update({column: column + 1})
             .where(ExecutionRow.id == execution_id).execute())
            row = ExecutionRow.select(column).where(ExecutionRow.id == execution_id).get()
            return getattr(row, column.name)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, execution_id: int) -> Execution:
        """One execution with its rules (every start of an execution loads it: two statements
        written out once)."""
        with unit_of_work(self.db):
            rows = read_rows(self.db, ExecutionRow, self._sql.get, execution_id)
            if not rows:
                raise NotFound(f"execution {execution_id} not found")
            rules = [_rule_from_row(row) for row in
                     read_rows(self.db, RuleExecutionRow, self._sql.get_rules, execution_id)]
            return _execution_from_row(rows[0], rules)

    def get_many(self, execution_ids: Iterable[int]) -> dict[int, Execution]:
        """The executions that exist among ``execution_ids``, by ID, in two queries."""
        with unit_of_work(self.db):
            rows = list(ExecutionRow.select().where(ExecutionRow.id.in_(list(execution_ids))))
            return {execution.id: execution for execution in self._with_rules(rows)}

    def holder(self, execution_id: int) -> tuple[str, datetime | None] | None:
        """(owner, expiry) of the lease on a running execution, in one query; None when it is
        finished or nobody holds it (queued, or parked: a wait holds nothing). The lease is
        the store's, not the aggregate's: only the console shows it, to say which replica
        runs the execution now."""
        with unit_of_work(self.db):
            row = (ExecutionRow.select(ExecutionRow.lease_owner, ExecutionRow.lease_expires_at)
                   .where((ExecutionRow.id == execution_id)
                          & ExecutionRow.status.in_(_RUNNING)
                          & ExecutionRow.lease_owner.is_null(False))
                   .first())
        return (row.lease_owner, row.lease_expires_at) if row is not None else None

    def page(self, *, issue_key: str | None = None, status: ExecutionStatus | None = None,
             mode: ExecutionMode | None = None, policy_id: int | None = None,
             trigger_id: int | None = None, limit: int = 50, offset: int = 0,
             ) -> tuple[list[Execution], int]:
        """Newest first, with rule executions attached in one more query (≤ 3 queries)."""
        query = ExecutionRow.select()
        for column, value in ((ExecutionRow.issue_key, issue_key),
                              (ExecutionRow.status, status and status.value),
                              (ExecutionRow.mode, mode and mode.value),
                              (ExecutionRow.policy_id, policy_id),
                              (ExecutionRow.trigger, trigger_id)):
            if value is not None:
                query = query.where(column == value)
        with unit_of_work(self.db):
            rows, total = fetch_page(query.order_by(ExecutionRow.id.desc()), limit, offset)
            return self._with_rules(rows), total

    def retrying_load_count(self) -> int:
        """How many executions are parked to retry their issue (or policy) load: the admin
        view's Jira retries."""
        with unit_of_work(self.db):
            return (ExecutionRow.select(ExecutionRow.id)
                    .where(ExecutionRow.status.in_(_RUNNING)
                           & (ExecutionRow.load_attempts > 0))
                    .count())

    def failed_since(self, since: datetime, cap: int) -> int:
        """How many executions failed at or after ``since``, counted up to ``cap`` (the
        overview's "failed in the last hour"), through the status index: failed executions
        are the few."""
        recent = (ExecutionRow.select(ExecutionRow.id)
                  .where((ExecutionRow.status == ExecutionStatus.FAILED.value)
                         & (ExecutionRow.completed_at >= to_utc(since)))
                  .limit(cap))
        with unit_of_work(self.db):
            return recent.count()

    def backlog(self, now: datetime,
                ) -> tuple[dict[str, tuple[int, float]], dict[str, tuple[int, float]]]:
        """(created, executing): mode → (count, age in seconds of the oldest), for the
        backlog gauges. A created execution ages from its creation; an executing one from its
        ``updated_at``."""
        created: dict[str, tuple[int, float]] = {}
        executing: dict[str, tuple[int, float]] = {}
        with unit_of_work(self.db):
            rows = dict_rows(ExecutionRow
                             .select(ExecutionRow.mode, ExecutionRow.status,
                                     peewee.fn.COUNT(ExecutionRow.id).alias("count"),
                                     peewee.fn.MIN(ExecutionRow.created_at).alias("oldest_created"),
                                     peewee.fn.MIN(ExecutionRow.updated_at).alias("oldest_updated"))
                             .where(ExecutionRow.status.in_(_RUNNING))
                             .group_by(ExecutionRow.mode, ExecutionRow.status))
            for row in rows:
                if row["status"] == ExecutionStatus.CREATED.value:
                    age = seconds_since(now, row["oldest_created"], ExecutionRow.created_at)
                    created[row["mode"]] = (row["count"], age)
                else:
                    age = seconds_since(now, row["oldest_updated"], ExecutionRow.updated_at)
                    executing[row["mode"]] = (row["count"], age)
        return created, executing

    def parked(self, *, limit: int = 50, offset: int = 0, counted: int = PARKED_COUNTED,
               ) -> tuple[list[Execution], int, bool]:
        """The parked waits of every replica, the soonest ``wake_at`` first (ties by id), with
        their rules; how many there are, and whether that is all of them (≤ 3 queries). The
        count stops ``counted`` rows past the page's start (or at its end, if that is later):
        beyond that the total is that bound and the flag False, "more than" the total.

        A parked execution is a running one (``executing``, or ``created`` when its first
        issue load failed) with a ``wake_at`` that nobody holds: the save that parks it gives
        its lease back. One a replica has claimed again (its old ``wake_at`` not yet cleared)
        is running, not waiting, and is left out; one whose wake has come but that nobody has
        claimed yet is still listed.

        The page walks the wake index (``ix_dispatch_executions_wake``) and only its ids:
        the page's rows are read by id after it, so a deep page reads no whole rows it skips."""
        waiting = (ExecutionRow.select(ExecutionRow.id)
                   .where(self._running_by_wake()
                          & ExecutionRow.wake_at.is_null(False)
                          & ExecutionRow.lease_owner.is_null()))
        page = waiting.order_by(ExecutionRow.wake_at, ExecutionRow.id).limit(limit).offset(offset)
        with unit_of_work(self.db):
            rows = list(ExecutionRow.select().where(ExecutionRow.id.in_(page))
                        .order_by(ExecutionRow.wake_at, ExecutionRow.id))
            # a short page is the last one: its total needs no COUNT (as ``fetch_page``)
            if len(rows) < limit and (rows or offset == 0):
                return self._with_rules(rows), offset + len(rows), True
            bound = min(offset + max(counted, limit), MAX_ID - 1)  # a row id's range at most
            total = waiting.limit(bound + 1).count()  # counts a subquery of at most bound + 1
            return self._with_rules(rows), min(total, bound), total <= bound

    def latest_matched(self, rule_ids: Iterable[int], *,
                       lookback: int = LATEST_LOOKBACK) -> dict[int, Execution]:
        """For each of ``rule_ids``, the newest execution in which that rule matched (so its
        actions ran, or are running), by rule id; a rule that matched in none of the newest
        ``lookback`` executions is left out. Four queries, whatever the number of rules.

        The rule executions carry no index on ``rule_id``: the look is bounded to the newest
        ``lookback`` executions through the ``(execution_id, sequence)`` index instead, so it
        costs the same on a history of any length. The newest id is read first and passed as
        a value, so both engines plan the range scan from a known bound."""
        wanted = sorted(set(rule_ids))
        if not wanted:
            return {}
        table = RuleExecutionRow._meta.table_name
        condition, params = self.engine.among("rule_id", wanted, "bigint[]")
        param = self.db.param
        with unit_of_work(self.db):
            newest = ExecutionRow.select(peewee.fn.MAX(ExecutionRow.id)).scalar() or 0
            latest = dict(self.db.execute_sql(
                f"SELECT rule_id, MAX(execution_id) FROM {table} WHERE execution_id > {param} "
                f"AND {condition} AND outcome = {param} GROUP BY rule_id",
                (newest - lookback, *params, RuleOutcome.MATCHED.value)).fetchall())
            executions = self.get_many(set(latest.values()))
        return {rule_id: executions[execution_id] for rule_id, execution_id in latest.items()
                if execution_id in executions}

    def recoverable(self) -> list[tuple[int, datetime | None, str | None]]:
        """Every created/executing execution, dry-runs included, in creation order, with its
        ``wake_at`` and live lock key (for boot recovery)."""
        with unit_of_work(self.db):
            query = (ExecutionRow.select(ExecutionRow.id, ExecutionRow.wake_at,
                                         ExecutionRow.live_lock_key)
                     .where(ExecutionRow.status.in_(_RUNNING)).order_by(ExecutionRow.id))
            return list(query.tuples().iterator())  # no model object per row: 100,000 at boot

    def _with_rules(self, rows: list[ExecutionRow]) -> list[Execution]:
        if not rows:
            return []
        by_execution: dict[int, list[RuleExecution]] = {row.id: [] for row in rows}
        # written out: peewee took longer to build a page's rule rows than to read them
        condition, params = self.engine.among("execution_id", list(by_execution), "bigint[]")
        sql = (f"SELECT * FROM {RuleExecutionRow._meta.table_name} WHERE {condition} "
               "ORDER BY execution_id, sequence")
        for rule_row in read_rows(self.db, RuleExecutionRow, sql, *params):
            by_execution[rule_row.execution_id].append(_rule_from_row(rule_row))
        return [_execution_from_row(row, by_execution[row.id]) for row in rows]


class _Statements:
    """The hot statements, written out once in the engine's parameter style: every start of
    an execution claims it, every step saves it, and every look of the ACK watcher moves a
    wait; peewee took longer to build each of them than the database took to run it."""

    def __init__(self, param: str, closing: TriggerClosing, engine: Engine):
        """With the ``engine``'s ``one_statement_writes`` a creation and a save are one
        statement each, with data-modifying ``WITH`` clauses (``create_in_one``,
        ``save_in_one``), and a claim reads the rules with the execution."""
        self._closing = closing
        self._param = param
        self._creates_in_one: dict[tuple[tuple[int, ...], bool, bool], str] = {}
        self._saves_in_one: dict[tuple[bool, bool, int], str] = {}
        executions, rules = ExecutionRow._meta.table_name, RuleExecutionRow._meta.table_name
        running = placeholders(param, len(_RUNNING))
        where = f"WHERE id = {param} AND status IN ({running})"
        moved = (f"UPDATE {executions} SET status = {param}, failure_code = {param}, "
                 f"failure_reason = {param}, wake_at = {param}, live_lock_key = {param}, "
                 f"updated_at = {param}, completed_at = {param}")
        released = ", lease_owner = NULL, lease_expires_at = NULL"
        fence = f" AND lease_owner = {param} AND lease_epoch = {param}"
        self._save = {(give_back, fenced): Prepared(f"{moved}{released if give_back else ''} "
                                                     f"{where}{fence if fenced else ''}")
                      for give_back in (False, True) for fenced in (False, True)}
        self.look = Prepared(f"UPDATE {executions} SET wake_at = {param}, updated_at = {param} "
                     f"{where} AND lease_owner IS NULL AND wake_at = {param}")
        claim = (f"UPDATE {executions} SET lease_owner = {param}, "
                 f"lease_epoch = lease_epoch + 1, lease_expires_at = {param} {where} "
                 f"AND (lease_owner IS NULL OR lease_expires_at < {param} "
                 f"OR lease_owner = {param})")
        self.claim = Prepared(f"{claim} RETURNING lease_epoch")
        # The due executions nobody holds, read as two ranges of an index each so that a
        # claim never reads every running row (a hundred thousand parked ones): the unparked
        # ones by ``created_at`` (``ix_dispatch_executions_unparked``), and the parked ones
        # whose wake has come by ``wake_at`` (``ix_dispatch_executions_wake``); the longest due
        # of both first. On SQLite ``+status`` keeps its planner off the status index.
        lock = engine.skip_locked_clause
        status = engine.unindexed_name("status")
        unheld = f"(lease_owner IS NULL OR lease_expires_at < {param})"
        self.claim_due = (  # not Prepared: its plan depends on how many are due
            f"WITH fresh AS (SELECT id, created_at AS due FROM {executions} "
            f"WHERE wake_at IS NULL AND status IN ({running}) AND {unheld} "
            f"ORDER BY created_at, id LIMIT {param}{lock}), "
            f"woken AS (SELECT id, wake_at AS due FROM {executions} "
            f"WHERE wake_at IS NOT NULL AND wake_at <= {param} AND {status} IN ({running}) "
            f"AND {unheld} ORDER BY wake_at, id LIMIT {param}{lock}), "
            "picked AS (SELECT id FROM (SELECT id, due FROM fresh UNION ALL "
            f"SELECT id, due FROM woken) AS candidates ORDER BY due, id LIMIT {param}) "
            f"UPDATE {executions} SET lease_owner = {param}, lease_epoch = lease_epoch + 1, "
            f"lease_expires_at = {param} WHERE id IN (SELECT id FROM picked) RETURNING id")
        # The claim with the row it claimed; on PostgreSQL with its rules as well, one JSON
        # array (a data-modifying WITH, which SQLite does not have).
        self.claim_loaded = Prepared(
            f"WITH claimed AS ({claim} RETURNING *) SELECT claimed.*, "
            f"(SELECT json_agg(r ORDER BY r.sequence) FROM {rules} r "
            "WHERE r.execution_id = claimed.id) AS rules FROM claimed"
            if engine.one_statement_writes else f"{claim} RETURNING *")
        self.insert = Prepared(
            f"INSERT INTO {executions} ({_INSERTED}) "
            f"VALUES ({placeholders(param, _INSERTED.count(',') + 1)}) RETURNING id")
        self.insert_rule = Prepared(
            f"INSERT INTO {rules} (execution_id, {_RULE_INSERTED}) "
            f"VALUES ({placeholders(param, _RULE_INSERTED.count(',') + 2)})")
        self.get = Prepared(f"SELECT * FROM {executions} WHERE id = {param}")
        self.get_rules = Prepared(f"SELECT * FROM {rules} WHERE execution_id = {param} "
                                  "ORDER BY sequence")
        self.rule = Prepared(f"UPDATE {rules} SET outcome = {param}, evaluation_json = {param}, "
                     f"action_executions_json = {param} "
                     f"WHERE execution_id = {param} AND sequence = {param}")

    def save(self, *, released: bool, fenced: bool) -> str:
        return self._save[(released, fenced)]

    def create_in_one(self, *, rules: tuple[int, ...], fenced: bool, context: bool) -> str:
        """A creation as one PostgreSQL statement, atomic by itself: ``len(rules)`` executions
        with ``rules[n]`` rule executions each, the default context when ``context`` (unless
        one exists), and the trigger completed with the executions' ids.

        The ids are drawn from the executions' sequence first, so that the trigger's UPDATE
        (the one part that checks the lease, with ``fenced``) can list them; every INSERT
        selects from that UPDATE's result, so nothing is written for a trigger the lease no
        longer holds. A live lock already taken fails the whole statement. It answers how
        many triggers it completed (0 or 1), then the ids. Its parameters: the trigger
        UPDATE's without the output (``TriggerClosing.statement``), then per execution
        ``insert``'s followed by ``insert_rule``'s without the execution id for each of its
        rules, then the context's (``ContextRepository.default_values``)."""
        shape = (rules, fenced, context)
        statement = self._creates_in_one.get(shape)
        if statement is not None:
            return statement
        param, executions = self._param, ExecutionRow._meta.table_name
        drawn = range(len(rules))
        ids = [f"id{n} AS (SELECT nextval(pg_get_serial_sequence('{executions}', 'id')) AS id)"
               for n in drawn]
        listed = ", ".join(f"(SELECT id FROM id{n})" for n in drawn)
        output = f"jsonb_build_object('execution_ids', jsonb_build_array({listed}))"
        clauses = [*ids, f"ended AS ({self._closing.statement(fenced=fenced, output=output)} "
                         "RETURNING id)"]
        for n, count in enumerate(rules):
            clauses.append(f"execution{n} AS (INSERT INTO {executions} (id, {_INSERTED}) "
                           f"SELECT id{n}.id, {placeholders(param, _INSERTED.count(',') + 1)} "
                           f"FROM id{n}, ended RETURNING id)")
            clauses += [f"rule{n}_{k} AS (INSERT INTO {RuleExecutionRow._meta.table_name} "
                        f"(execution_id, {_RULE_INSERTED}) SELECT id, "
                        f"{placeholders(param, _RULE_INSERTED.count(',') + 1)} "
                        f"FROM execution{n})" for k in range(count)]
        if context:
            clauses.append(f"context AS ({ContextRepository.default_insert(param, 'ended')})")
        answer = ", ".join(["(SELECT count(*) FROM ended)", *(f"id{n}.id" for n in drawn)])
        sources = f" FROM {', '.join(f'id{n}' for n in drawn)}" if rules else ""
        statement = self._creates_in_one[shape] = Prepared(
            f"WITH {', '.join(clauses)} SELECT {answer}{sources}")
        return statement

    def save_in_one(self, *, released: bool, fenced: bool, rules: int,
                    also: tuple[str, ...] = ()) -> str:
        """``save`` and ``rules`` times ``rule`` as one PostgreSQL statement, atomic by itself
        (no ``BEGIN`` and ``COMMIT``: one round trip instead of ``rules`` + 3). Each rule is
        updated only when the execution's UPDATE matched; the statement answers how many
        execution rows it matched (0 or 1). The parameters are ``save``'s, then each rule's
        as ``rule`` takes them, then those of ``also``: more ``WITH`` queries written with
        the checkpoint (the burden rows), whose own guard says so."""
        shape = (released, fenced, rules)
        statement = self._saves_in_one.get(shape) if not also else None
        if statement is None:
            moved = f"moved AS ({self.save(released=released, fenced=fenced)} RETURNING id)"
            changed = [f"rule{n} AS ({self.rule} AND EXISTS (SELECT 1 FROM moved))"
                       for n in range(rules)]
            statement = str(f"WITH {', '.join([moved, *changed, *also])} "
                            "SELECT count(*) FROM moved")
            if not also:  # the shapes of every step, planned once; a burden row's is rare
                statement = self._saves_in_one[shape] = Prepared(statement)
        return statement


# The columns a new execution and a new rule execution are written with (the rule's after its
# execution's id), in the order of ``_insert_values`` and ``_new_rule_values``.
_INSERTED = ("trigger_id, issue_key, mode, policy_id, policy_family_id, policy_version, status, "
             "failure_code, failure_reason, overwrite_data_json, business_now, wake_at, "
             "live_lock_key, restart_count, load_attempts, created_at, updated_at, lease_epoch")
_RULE_INSERTED = ("sequence, rule_id, name, priority, when_json, transition_json, outcome, "
                  "evaluation_json, action_executions_json")


def _insert_values(execution: Execution) -> tuple:
    return (execution.trigger_id, execution.issue_key, execution.mode.value,
            execution.policy_id, execution.policy_family_id, execution.policy_version,
            execution.status.value, execution.failure_code, execution.failure_reason,
            json_param(execution.overwrite_data), time_param(execution.business_now),
            time_param(execution.wake_at), execution.live_lock_key, 0, 0,
            time_param(execution.created_at), time_param(execution.updated_at), 0)


def _new_rule_values(rule: RuleExecution) -> tuple:
    return (rule.sequence, rule.rule_id, rule.name, rule.priority, json_param(rule.when),
            json_param({"on_success": rule.on_success.value}),
            *_rule_changes(rule, raw=True).values())


def _rule_values(execution_id: int, rule: RuleExecution) -> tuple:
    """The parameters of ``_Statements.rule`` for ``rule``."""
    return tuple(_rule_changes(rule, raw=True).values()) + (execution_id, rule.sequence)


def _rule_changes(rule: RuleExecution, *, raw: bool = False) -> dict[str, Any]:
    """What a checkpoint writes of a rule execution; ``raw``: as the driver takes the values
    (for a statement written out, not built by peewee)."""
    changes = {"outcome": rule.outcome.value, "evaluation_json": rule.evaluation,
               "action_executions_json": [a.to_json() for a in rule.action_executions]}
    if raw:
        changes = {name: value if name == "outcome" else json_param(value)
                   for name, value in changes.items()}
    return changes


def _time(value: str | None) -> datetime | None:
    return parse_rfc3339(value) if value else None


def _action_from_json(raw: dict) -> ActionExecution:
    return ActionExecution(
        index=raw["index"], type=raw["type"], action=raw["action"],
        status=ActionStatus(raw["status"]), context=raw.get("context") or {},
        result=raw.get("result", ""), error=raw.get("error", ""),
        started_at=_time(raw.get("started_at")), planned_at=_time(raw.get("planned_at")),
        finished_at=_time(raw.get("finished_at")),
    )


def _rule_from_row(row: RuleExecutionRow | SimpleNamespace) -> RuleExecution:
    return RuleExecution(
        sequence=row.sequence, rule_id=row.rule_id, name=row.name, priority=row.priority,
        when=row.when_json, on_success=OnSuccess(row.transition_json["on_success"]),
        action_executions=[_action_from_json(a) for a in row.action_executions_json],
        outcome=RuleOutcome(row.outcome), evaluation=row.evaluation_json,
    )


def _execution_from_row(row: ExecutionRow | SimpleNamespace, rules: list[RuleExecution],
                        ) -> Execution:
    return Execution(
        id=row.id, issue_key=row.issue_key,
        # the foreign key's column, which peewee gives as ``trigger_id`` on an ExecutionRow
        trigger_id=row.trigger_id,  # type: ignore[union-attr]  # not in types-peewee
        mode=ExecutionMode(row.mode), policy_id=row.policy_id,
        policy_family_id=row.policy_family_id, policy_version=row.policy_version,
        rule_executions=rules, status=ExecutionStatus(row.status),
        failure_code=row.failure_code, failure_reason=row.failure_reason,
        overwrite_data=row.overwrite_data_json, business_now=row.business_now,
        wake_at=row.wake_at, live_lock_key=row.live_lock_key, restart_count=row.restart_count,
        load_attempts=row.load_attempts, created_at=row.created_at, updated_at=row.updated_at,
        completed_at=row.completed_at,
    )
