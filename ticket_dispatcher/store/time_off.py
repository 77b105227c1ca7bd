"""Engineers' time off.

An entry is the API's (``source`` "api") or a calendar feed's (``source`` the feed's name,
``calendar_feeds.py``), which the feed's refresh replaces (``replace_source``). Entries are
read by engineer and end (``ix_engineer_time_off_email_end``): whatever ended before the window
asked for is never read, however long the history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import peewee

from ticket_dispatcher.domain.availability import TimeOff, covering
from ticket_dispatcher.domain.engineers import engineer_not_found
from ticket_dispatcher.errors import NotFound
from ticket_dispatcher.store.database import (
    dict_rows,
    fetch_page,
    lock_rows,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.models import DriverTime, EngineerRow, TimeOffRow, delete_where
from ticket_dispatcher.timeutil import to_utc

API_SOURCE = "api"
# Rows ``replace_source`` inserts per statement (SQLite binds at most 32,766 parameters).
INSERT_BATCH = 500
# How far past the window ``around`` reads at once to follow time off that goes on beyond it.
CHAIN_READ = timedelta(days=366)


class TimeOffRepository:
    def __init__(self, db: peewee.Database):
        self.db = db

    def add(self, entry: TimeOff, now: datetime) -> TimeOff:
        """Store an API entry for an existing engineer (``NotFound`` otherwise)."""
        with write_lock(self.db):
            # Locked, so that an engineer deleted meanwhile takes this entry with it.
            engineer = EngineerRow.select(EngineerRow.email).where(
                EngineerRow.email == entry.email)
            if lock_rows(engineer, self.db).first() is None:
                raise engineer_not_found(entry.email)
            row_id = TimeOffRow.insert(
                email=entry.email, start_at=to_utc(entry.start), end_at=to_utc(entry.end),
                reason=entry.reason, source=entry.source, created_at=to_utc(now),
            ).execute()
        return TimeOff(int(row_id), entry.email, to_utc(entry.start), to_utc(entry.end),
                       entry.reason, entry.source)

    def page(self, email: str, *, now: datetime, past: bool = False, limit: int = 50,
             offset: int = 0) -> tuple[list[TimeOff], int]:
        """An engineer's entries by start, those that have ended left out unless ``past``."""
        query = TimeOffRow.select().where(TimeOffRow.email == email)
        if not past:
            query = query.where(TimeOffRow.end_at > to_utc(now))
        with unit_of_work(self.db):
            rows, total = fetch_page(query.order_by(TimeOffRow.start_at, TimeOffRow.id),
                                     limit, offset)
        return [_time_off(row) for row in rows], total

    def count_by_source(self, email: str, sources: Iterable[str]) -> dict[str, int]:
        """How many of ``email``'s entries each of ``sources`` (feed names) holds, in one
        query; a source holding none of theirs is 0."""
        wanted = list(dict.fromkeys(sources))
        counts = dict.fromkeys(wanted, 0)
        if not wanted:
            return counts
        query = (TimeOffRow.select(TimeOffRow.source,
                                   peewee.fn.COUNT(TimeOffRow.id).alias("n"))
                 .where((TimeOffRow.email == email) & TimeOffRow.source.in_(wanted))
                 .group_by(TimeOffRow.source))
        with unit_of_work(self.db):
            for row in dict_rows(query):
                counts[row["source"]] = int(row["n"])
        return counts

    def delete(self, email: str, entry_id: int) -> None:
        """Delete one of an engineer's entries, the API's or a feed's (a feed's comes back at
        its next refresh if the feed still holds it)."""
        with unit_of_work(self.db):
            deleted = delete_where(TimeOffRow, (TimeOffRow.id == entry_id)
                                   & (TimeOffRow.email == email))
        if not deleted:
            raise NotFound(f"time off {entry_id} of {email} not found")

    def around(self, emails: Iterable[str], since: datetime, until: datetime,
               ) -> dict[str, list[TimeOff]]:
        """Each engineer's entries that end after ``since`` and start before ``until``, by
        start, along the index of engineer and end, carried on as ``carry_on`` says: one
        query, and rarely another."""
        wanted = sorted(set(emails))
        found: dict[str, list[TimeOff]] = defaultdict(list)
        if wanted:
            self._read_into(found, wanted, (TimeOffRow.end_at > to_utc(since))
                            & (TimeOffRow.start_at < to_utc(until)))
            self.carry_on(found, since, until)
        return found

    def carry_on(self, found: dict[str, list[TimeOff]], at: datetime,
                 horizon: datetime) -> None:
        """Add to ``found`` (each engineer's entries that start before ``horizon``, by start)
        the entries that carry on the time off of whoever is away from ``at`` to ``horizon``
        or past it (back-to-back leave, a daily calendar event), so that its end is the real
        one; nothing to read for anyone else. One query for each ``CHAIN_READ`` that time
        off lasts beyond ``horizon``."""
        at, horizon = to_utc(at), to_utc(horizon)
        while True:
            away = {email: back for email, entries in found.items()
                    if (back := _away_until(entries, at)) >= horizon}
            if not away:
                return
            reach = max(away.values()) + CHAIN_READ
            self._read_into(found, sorted(away), (TimeOffRow.start_at >= horizon)
                            & (TimeOffRow.start_at < reach))
            horizon = reach

    def _read_into(self, found: dict[str, list[TimeOff]], emails: list[str],
                   condition: peewee.Expression) -> None:
        query = (TimeOffRow.select(TimeOffRow.id, TimeOffRow.email, TimeOffRow.start_at,
                                   TimeOffRow.end_at, TimeOffRow.reason, TimeOffRow.source)
                 .where(TimeOffRow.email.in_(emails) & condition)
                 .order_by(TimeOffRow.email, TimeOffRow.start_at, TimeOffRow.id))
        with unit_of_work(self.db):
            # the rows as the driver gives them, each time converted once: a report reads a
            # year of everyone's entries, and peewee's rows cost four times as much
            for entry_id, email, start, end, reason, source in self.db.execute_sql(
                    *query.sql()).fetchall():
                found.setdefault(email, []).append(
                    TimeOff(entry_id, email, as_time(start), as_time(end), reason, source))


def replace_source(source: str, entries: Sequence[TimeOff], now: datetime) -> int:
    """Replace the entries of ``source`` with ``entries``, inside the caller's transaction;
    how many there are now."""
    delete_where(TimeOffRow, TimeOffRow.source == source)
    rows = [{"email": e.email, "start_at": to_utc(e.start), "end_at": to_utc(e.end),
             "reason": e.reason, "source": source, "created_at": now} for e in entries]
    for first in range(0, len(rows), INSERT_BATCH):
        TimeOffRow.insert_many(rows[first:first + INSERT_BATCH]).execute()
    return len(rows)


def forget_sources(sources: list[str]) -> None:
    """Delete every entry of ``sources``, inside the caller's transaction."""
    delete_where(TimeOffRow, TimeOffRow.source.in_(sources))


def _away_until(entries: Iterable[TimeOff], since: datetime) -> datetime:
    """The end of the time off that covers ``since``; ``since`` itself when none does."""
    chain = covering(entries, since)
    return chain[-1].end if chain else since


def as_time(value: DriverTime) -> datetime:
    """A time off's start or end as the driver gives it, as its own field converts it."""
    converted = TimeOffRow.start_at.python_value(value)
    assert converted is not None, "time off has a start and an end"
    return converted


def _time_off(row: TimeOffRow) -> TimeOff:
    return TimeOff(row.id, row.email, row.start_at, row.end_at, row.reason, row.source)
