"""Engineers: who may receive tickets and when each last did.

Every write is one statement naming its columns: concurrent assigns, operator edits and the
Jira account cache never overwrite each other's columns (no read-modify-write). The one
exception is ``take_turn``, round robin's choose-and-advance: it reads and writes with the
candidates' rows locked (on PostgreSQL in one statement, on SQLite in one transaction), so
concurrent executions in this process or in other replicas on the same PostgreSQL database
take turns one after the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import peewee

from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.engineers import AvailabilityChanges, engineer_not_found
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.domain.ports import Turn
from ticket_dispatcher.domain.rotation import next_in_turn
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.store.database import (
    Prepared,
    engine_of,
    fetch_page,
    read_rows,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.models import (
    EngineerRow,
    TimeOffRow,
    array_literal,
    delete_where,
    time_param,
)
from ticket_dispatcher.store.time_off import TimeOffRepository, as_time
from ticket_dispatcher.timeutil import to_utc

# The smallest step of a stored time (microseconds on both engines): a turn's mark is at least
# this much after the newest mark among the candidates (``_turn_mark``).
TURN_STEP = timedelta(microseconds=1)


def email_key(email: str) -> str:
    """Engineers are keyed by lower-case email."""
    normalized = (email or "").strip().lower()
    if not normalized:
        raise InvalidInput("engineer email must not be empty")
    return normalized


_TABLE = EngineerRow._meta.table_name
_TIME_OFF = TimeOffRow._meta.table_name
# What a round robin's turn reads of each candidate: who it is, where its turn stands, and the
# account an assignment needs; not its availability settings, which the turn does not judge
# (``hindered`` reads them for those it concerns) and whose decoding was most of the read.
_TURN_COLUMNS = "email, display_name, jira_account_id, last_dispatched_at, last_dispatched_issue"


class EngineerRepository:
    def __init__(self, db: peewee.Database, time_off: TimeOffRepository | None = None):
        self.db = db
        self.engine = engine_of(db)
        self._time_off = time_off or TimeOffRepository(db)
        # Round robin's turn: one statement where the engine writes so, else a transaction.
        self._take_turn = (self._take_turn_in_one if self.engine.one_statement_writes
                           else self._take_turn_in_transaction)

    def page(
        self,
        limit: int = 50,
        offset: int = 0,
        dispatch_enabled: bool | None = None,
    ) -> tuple[list[Engineer], int]:
        """One page ordered by email and the total, filtered by ``dispatch_enabled`` when
        given (``named`` reads given engineers)."""
        query = EngineerRow.select()
        if dispatch_enabled is not None:
            query = query.where(EngineerRow.dispatch_enabled == dispatch_enabled)
        with unit_of_work(self.db):
            rows, total = fetch_page(query.order_by(EngineerRow.email), limit, offset)
        return [_engineer(row) for row in rows], total

    def get(self, email: str) -> Engineer:
        email = email_key(email)
        with unit_of_work(self.db):
            row = EngineerRow.get_or_none(EngineerRow.email == email)
        if row is None:
            raise engineer_not_found(email)
        return _engineer(row)

    def named(self, emails: Iterable[str]) -> list[Engineer]:
        """The engineers among ``emails`` (any case), ordered by email; one query."""
        wanted = sorted({email_key(email) for email in emails})
        if not wanted:
            return []
        with unit_of_work(self.db):
            return [_engineer(row) for row in EngineerRow.select()
                    .where(EngineerRow.email.in_(wanted)).order_by(EngineerRow.email)]

    def enabled_by_email(self, emails: Iterable[str]) -> list[Engineer]:
        """The dispatch-enabled engineers among ``emails``, ordered by email; one query.
        Callers restore their configured order."""
        wanted = sorted({email_key(email) for email in emails})
        if not wanted:
            return []
        with unit_of_work(self.db):
            return [_engineer(row) for row in self._enabled(wanted)]

    def dispatch_switches(self, emails: Iterable[str]) -> dict[str, bool]:
        """Each of ``emails`` that is an engineer (normalized), with its dispatch switch; one
        query. What a policy's validation warns about: a ``users`` receiver naming someone
        who is no engineer, or one dispatch is disabled for."""
        wanted = sorted({email_key(email) for email in emails})
        if not wanted:
            return {}
        query = (EngineerRow.select(EngineerRow.email, EngineerRow.dispatch_enabled)
                 .where(EngineerRow.email.in_(wanted)))
        with unit_of_work(self.db):
            return {row.email: bool(row.dispatch_enabled) for row in query}

    def hindered(self, emails: Iterable[str], at: datetime, until: datetime, *, hours: bool,
                 returned_since: datetime | None = None,
                 ) -> tuple[list[Engineer], dict[str, list[TimeOff]]]:
        """The dispatch-enabled engineers among ``emails`` an assignment at ``at`` has
        something to judge of: on time off at ``at``, a cap on open issues, working hours
        (``hours``), or time off ended since ``returned_since`` (back from it); each with its
        time off that ends after ``returned_since`` (else ``at``) and starts before ``until``,
        by start, carried on past ``until`` (``TimeOffRepository.carry_on``). One query, and
        rarely another; most engineers, most of the time, are not among them, and each comes
        back with its zone, hours and cap only (the rest of the record is left empty)."""
        wanted = sorted({email_key(email) for email in emails})
        if not wanted:
            return [], {}
        param, since = self.db.param, returned_since or at
        away = (f"EXISTS (SELECT 1 FROM {_TIME_OFF} c WHERE c.email = e.email "
                f"AND c.start_at <= {param} AND c.end_at > {param})")
        back = (f" OR EXISTS (SELECT 1 FROM {_TIME_OFF} r WHERE r.email = e.email "
                f"AND r.end_at > {param} AND r.end_at <= {param})" if returned_since else "")
        working = " OR e.working_hours_json IS NOT NULL" if hours else ""
        among_wanted, wanted_params = self.engine.among("e.email", wanted, "text[]")
        params: list[Any] = [time_param(to_utc(since)), time_param(to_utc(until)),
                             *wanted_params, True, time_param(to_utc(at)), time_param(to_utc(at))]
        if returned_since:
            params += [time_param(to_utc(returned_since)), time_param(to_utc(at))]
        # Each hindered engineer's entries along the index of engineer and end, looked up for
        # them alone, not hashed for every engineer.
        entries = self.engine.join_each(_TIME_OFF, "t", lambda t: (
            f"{t}.email = e.email AND {t}.end_at > {param} AND {t}.start_at < {param}"))
        with unit_of_work(self.db):
            rows = read_rows(
                self.db, EngineerRow, Prepared(  # every assignment sends it
                f"SELECT e.email, e.timezone, e.working_hours_json, e.max_open_issues, "
                f"t.id AS off_id, t.start_at AS off_start, t.end_at AS off_end, "
                f"t.reason AS off_reason, t.source AS off_source "
                f"FROM {_TABLE} e {entries} "
                f"WHERE {among_wanted} "
                f"AND e.dispatch_enabled = {param} "
                f"AND ({away}{back} OR e.max_open_issues IS NOT NULL{working}) "
                f"ORDER BY e.email, t.start_at, t.id"), *params)
        engineers: dict[str, Engineer] = {}
        time_off: dict[str, list[TimeOff]] = {}
        for row in rows:
            if row.email not in engineers:
                engineers[row.email] = Engineer(
                    email=row.email, timezone=row.timezone,
                    working_hours=row.working_hours_json, max_open_issues=row.max_open_issues)
            if row.off_id is not None:
                time_off.setdefault(row.email, []).append(TimeOff(
                    row.off_id, row.email, as_time(row.off_start), as_time(row.off_end),
                    row.off_reason, row.off_source))
        self._time_off.carry_on(time_off, at, until)
        return list(engineers.values()), time_off

    def time_off(self, emails: Iterable[str], since: datetime, until: datetime,
                 ) -> Mapping[str, list[TimeOff]]:
        """Each engineer's time off that ends after ``since`` and starts before ``until``, by
        start; one query (``TimeOffRepository.around``)."""
        return self._time_off.around((email_key(email) for email in emails), since, until)

    def put(
        self,
        email: str,
        *,
        dispatch_enabled: bool,
        display_name: str | None = None,
        jira_account_id: str | None = None,
        availability: AvailabilityChanges | None = None,
        now: datetime,
    ) -> tuple[Engineer, bool]:
        """Create or update; ``None`` keeps the current value (``""`` on create), and so does
        a key ``availability`` leaves out (on create: UTC, any time, no cap). Returns the
        engineer and whether it was created."""
        email = email_key(email)
        now = to_utc(now)
        given = availability or {}
        with write_lock(self.db):
            created = (
                EngineerRow.insert(
                    email=email,
                    display_name=display_name or "",
                    jira_account_id=jira_account_id or "",
                    dispatch_enabled=dispatch_enabled,
                    last_dispatched_issue="",
                    timezone=given.get("timezone") or "",
                    working_hours_json=given.get("working_hours"),
                    max_open_issues=given.get("max_open_issues"),
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict(conflict_target=[EngineerRow.email], action="NOTHING")
                .as_rowcount()
                .execute()
                == 1
            )
            if created:
                return Engineer(
                    email=email,
                    display_name=display_name or "",
                    jira_account_id=jira_account_id or "",
                    dispatch_enabled=dispatch_enabled,
                    timezone=given.get("timezone") or "",
                    working_hours=given.get("working_hours"),
                    max_open_issues=given.get("max_open_issues"),
                    created_at=now,
                    updated_at=now,
                ), True
            changes: dict = {EngineerRow.dispatch_enabled: dispatch_enabled,
                             EngineerRow.updated_at: now}
            if display_name is not None:
                changes[EngineerRow.display_name] = display_name
            if jira_account_id is not None:
                changes[EngineerRow.jira_account_id] = jira_account_id
            if "timezone" in given:
                changes[EngineerRow.timezone] = given["timezone"] or ""
            if "working_hours" in given:
                changes[EngineerRow.working_hours_json] = given["working_hours"]
            if "max_open_issues" in given:
                changes[EngineerRow.max_open_issues] = given["max_open_issues"]
            updated = (
                EngineerRow.update(changes)
                .where(EngineerRow.email == email)
                .returning(EngineerRow)
                .execute()
            )
            return _engineer(next(iter(updated))), False

    def delete(self, email: str) -> None:
        email = email_key(email)
        with write_lock(self.db):
            deleted = delete_where(EngineerRow, EngineerRow.email == email)
            # Their time off goes too: an engineer made again later starts with none (a
            # calendar feed that names them brings theirs back at its next refresh).
            delete_where(TimeOffRow, TimeOffRow.email == email)
        if not deleted:
            raise engineer_not_found(email)

    def take_turn(
        self, emails_in_order: Iterable[str], *, issue_key: str, now: datetime
    ) -> Turn | None:
        """Round robin's choose-and-advance, atomic: lock the dispatch-enabled engineers
        among ``emails_in_order`` (``SELECT … FOR UPDATE`` on PostgreSQL, in email order so
        that overlapping candidate lists never deadlock; SQLite's ``IMMEDIATE`` transaction
        already serializes), choose by ``next_in_turn`` (never dispatched first,
        then the oldest ``last_dispatched_at``, ties by the order of ``emails_in_order``) and
        mark the chosen one's turn: ``last_dispatched_at`` (see ``_turn_mark``),
        ``last_dispatched_issue`` and ``updated_at``.

        Returns the chosen engineer as it was before its turn (its ``last_dispatched_at`` says
        why it was chosen) with the candidates read, in the order asked, each with the fields
        of ``_TURN_COLUMNS`` only (the rest of the record is left empty); None when none of
        ``emails_in_order`` is a dispatch-enabled engineer."""
        order = list(dict.fromkeys(email_key(email) for email in emails_in_order))
        if not order:
            return None
        return self._take_turn(order, issue_key, to_utc(now))

    def _take_turn_in_transaction(self, order: list[str], issue_key: str, now: datetime,
                                  ) -> Turn | None:
        """``take_turn`` as a read and a mark in one write transaction."""
        with write_lock(self.db):
            # by email: the lock order, the same for every caller
            rows = {row.email: row for row in self._enabled(sorted(order), _TURN_COLUMNS)}
            candidates = [_in_turn(rows[email]) for email in order if email in rows]
            if not candidates:
                return None
            chosen = next_in_turn(candidates)
            self.db.execute_sql(
                f"UPDATE {_TABLE} SET last_dispatched_at = {self.db.param}, "
                f"last_dispatched_issue = {self.db.param}, updated_at = {self.db.param} "
                f"WHERE email = {self.db.param}",
                (time_param(_turn_mark(candidates, now)), issue_key, time_param(now),
                 chosen.email))
        return Turn(chosen, tuple(candidates))

    def _take_turn_in_one(self, order: list[str], issue_key: str, now: datetime) -> Turn | None:
        """``take_turn`` in one PostgreSQL statement, one round trip instead of four (BEGIN,
        the read, the mark, COMMIT): the candidates are locked in email order, the chosen one
        is the first by ``next_in_turn``'s order (never dispatched, then the oldest mark, then
        the order asked), and its mark is ``_turn_mark``'s. The candidates come back as they
        were before the mark, with the chosen one's email beside them."""
        listed = array_literal(order)
        with unit_of_work(self.db):
            rows = read_rows(self.db, EngineerRow, Prepared(f"""WITH candidates AS (
                SELECT {_TURN_COLUMNS} FROM {_TABLE}
                WHERE email = ANY(%s::text[]) AND dispatch_enabled = %s
                ORDER BY email FOR UPDATE
            ), chosen AS (
                SELECT email FROM candidates
                ORDER BY last_dispatched_at IS NOT NULL, last_dispatched_at,
                         array_position(%s::text[], email::text)
                LIMIT 1
            ), turn AS (
                UPDATE {_TABLE} SET
                    last_dispatched_at = (
                        SELECT CASE WHEN MAX(last_dispatched_at) IS NULL
                                         OR MAX(last_dispatched_at) < %s THEN %s
                                    ELSE MAX(last_dispatched_at) + %s END
                        FROM candidates),
                    last_dispatched_issue = %s, updated_at = %s
                WHERE email = (SELECT email FROM chosen)
                RETURNING email
            )
            SELECT candidates.*, (SELECT email FROM turn) AS chosen_email FROM candidates"""),
                listed, True, listed, time_param(now), time_param(now), TURN_STEP, issue_key,
                time_param(now), wait_for_disk=False)  # a turn lost with the server is taken again
        if not rows:
            return None
        by_email = {row.email: row for row in rows}
        candidates = [_in_turn(by_email[email]) for email in order if email in by_email]
        chosen = next(e for e in candidates if e.email == rows[0].chosen_email)
        return Turn(chosen, tuple(candidates))

    def _enabled(self, emails: list[str], columns: str = "*") -> list[SimpleNamespace]:
        """The dispatch-enabled engineers among ``emails`` (normalized), by email, with
        ``columns``. Every assignment reads them (a live round robin in its turn, inside the
        transaction that serializes turns on SQLite): the statement is written out, not built
        by peewee."""
        condition, params = self.engine.among("email", emails, "text[]")
        return read_rows(
            self.db, EngineerRow,
            f"SELECT {columns} FROM {_TABLE} WHERE {condition} AND dispatch_enabled = "
            f"{self.db.param} ORDER BY email", *params, True)

    def update_dispatch_state(
        self, email: str, *, dispatched_at: datetime, issue_key: str, now: datetime
    ) -> bool:
        """Record a successful assignment: one UPDATE of the dispatch columns.
        False when the engineer no longer exists.

        The mark only moves forward: a later one (this engineer's round-robin turn for another
        issue, taken meanwhile by ``take_turn``, or a dispatch recorded first that happened
        later) is kept, with its issue. Moving an engineer back would give them the next turn
        again, and the rotation over concurrent executions would go uneven. Nor does the
        record of the issue whose turn the engineer holds move it: ``take_turn`` marked that
        dispatch already, and moving the mark to the later moment the assignment landed would
        put the engineer behind turns others took meanwhile, out of their order."""
        at, param = time_param(to_utc(dispatched_at)), self.db.param
        newer = (f"(last_dispatched_at IS NULL OR last_dispatched_at <= {param}) "
                 f"AND COALESCE(last_dispatched_issue, '') <> {param}")
        with unit_of_work(self.db):  # every assignment records one: written out
            return self.db.execute_sql(
                f"UPDATE {_TABLE} SET "
                f"last_dispatched_at = CASE WHEN {newer} THEN {param} "
                f"ELSE last_dispatched_at END, "
                f"last_dispatched_issue = CASE WHEN {newer} THEN {param} "
                f"ELSE last_dispatched_issue END, updated_at = {param} WHERE email = {param}",
                (at, issue_key, at, at, issue_key, issue_key, time_param(to_utc(now)),
                 email_key(email)),
            ).rowcount == 1

    def set_jira_account_id(self, email: str, account_id: str, now: datetime) -> bool:
        """Cache the Jira account of an engineer: one UPDATE of that column."""
        query = EngineerRow.update(jira_account_id=account_id, updated_at=to_utc(now)).where(
            EngineerRow.email == email_key(email)
        )
        with unit_of_work(self.db):
            return query.execute() == 1


def _turn_mark(candidates: list[Engineer], now: datetime) -> datetime:
    """The chosen engineer's new ``last_dispatched_at``: ``now``, or just after the newest
    mark among the candidates when that is not older. A concurrent execution that read its
    clock later may have taken its turn first, and another replica's clock may run ahead; the
    chosen engineer must still go to the back of the queue, or it would have the next turn
    too."""
    newest = max((e.last_dispatched_at for e in candidates if e.last_dispatched_at is not None),
                 default=None)
    return now if newest is None or newest < now else newest + TURN_STEP


def _in_turn(row: SimpleNamespace) -> Engineer:
    """A candidate of a round robin's turn, from its ``_TURN_COLUMNS``."""
    return Engineer(email=row.email, display_name=row.display_name,
                    jira_account_id=row.jira_account_id,
                    last_dispatched_at=row.last_dispatched_at,
                    last_dispatched_issue=row.last_dispatched_issue)


def _engineer(row: EngineerRow | SimpleNamespace) -> Engineer:
    return Engineer(
        email=row.email,
        display_name=row.display_name,
        jira_account_id=row.jira_account_id,
        dispatch_enabled=bool(row.dispatch_enabled),
        last_dispatched_at=row.last_dispatched_at,
        last_dispatched_issue=row.last_dispatched_issue,
        timezone=row.timezone,
        working_hours=row.working_hours_json,
        max_open_issues=row.max_open_issues,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
