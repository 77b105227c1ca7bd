"""The calendar feeds time off is imported from: what the service knows of each.

A feed's refresh replaces all of its time-off entries (``time_off.replace_source``) and saves
its status in one transaction, so a reader sees the last good copy or the new one, never half
of each; a failed refresh changes only the feed's status.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import peewee

from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.store.database import unit_of_work, write_lock
from ticket_dispatcher.store.models import CalendarFeedRow, delete_where
from ticket_dispatcher.store.time_off import forget_sources, replace_source
from ticket_dispatcher.timeutil import to_utc


@dataclass(frozen=True)
class FeedStatus:
    """What the service knows of one calendar feed: the last attempt and the last good copy."""

    name: str
    email: str | None  # one engineer's feed; None: its events name their people
    status: str  # "never fetched", "ok" or "failed"
    error: str  # failed: what went wrong; ok: what the good copy left out ("" for nothing)
    entries: int  # time-off entries the last good copy holds
    attempted_at: datetime | None
    refreshed_at: datetime | None  # when the last good copy was fetched

    def age_seconds(self, now: datetime) -> float | None:
        """Seconds since the last good copy; None when there is none."""
        if self.refreshed_at is None:
            return None
        return max(0.0, (now - self.refreshed_at).total_seconds())


class CalendarFeedRepository:
    def __init__(self, db: peewee.Database):
        self.db = db

    def replace_feed(self, name: str, email: str | None, entries: Sequence[TimeOff],
                     now: datetime, *, note: str = "") -> None:
        """The feed's good copy: its entries replaced by ``entries`` and its status "ok", with
        ``note`` saying what it left out, in one transaction."""
        now = to_utc(now)
        with write_lock(self.db):
            count = replace_source(name, entries, now)
            self._save_feed(name, email, status="ok", error=note, entries=count,
                            attempted_at=now, refreshed_at=now)

    def feed_failed(self, name: str, email: str | None, error: str, now: datetime) -> None:
        """A failed refresh: the feed's entries (its last good copy) stay as they are."""
        with write_lock(self.db):
            self._save_feed(name, email, status="failed", error=error, entries=None,
                            attempted_at=to_utc(now), refreshed_at=None)

    def forget_feeds(self, keep: Iterable[str]) -> None:
        """Feeds no longer configured: their entries and status go."""
        kept = list(keep)
        with write_lock(self.db):
            gone = [row.name for row in CalendarFeedRow.select(CalendarFeedRow.name)
                    if row.name not in kept]
            if gone:
                forget_sources(gone)
                delete_where(CalendarFeedRow, CalendarFeedRow.name.in_(gone))

    def feeds(self) -> list[FeedStatus]:
        with unit_of_work(self.db):
            rows = list(CalendarFeedRow.select().order_by(CalendarFeedRow.name))
        return [FeedStatus(row.name, row.email, row.status, row.error, row.entries,
                           row.attempted_at, row.refreshed_at) for row in rows]

    def _save_feed(self, name: str, email: str | None, *, status: str, error: str,
                   entries: int | None, attempted_at: datetime,
                   refreshed_at: datetime | None) -> None:
        values: dict[str, object] = {"email": email, "status": status, "error": error,
                                     "attempted_at": attempted_at, "updated_at": attempted_at}
        if entries is not None:
            values["entries"] = entries
        if refreshed_at is not None:
            values["refreshed_at"] = refreshed_at
        updates = {getattr(CalendarFeedRow, key): value for key, value in values.items()}
        (CalendarFeedRow.insert(name=name, **values)
         .on_conflict(conflict_target=[CalendarFeedRow.name], update=updates)
         .execute())
