"""The processes serving this database: one row each, keyed by its lease owner identity, written
by its heartbeat and deleted when it stops cleanly. The admin view reads them to show the
cluster; a row whose heartbeat is older than a lease is a process that stopped beating without
stopping (lost, paused, or cut off from the database)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

import peewee

from ticket_dispatcher.clock import Clock
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.store.database import unit_of_work
from ticket_dispatcher.store.models import ReplicaRow, SiteHoldRow, delete_where
from ticket_dispatcher.timeutil import to_utc

log = logging.getLogger(__name__)

# A silent replica is forgotten this long after its last heartbeat.
FORGET_AFTER = timedelta(days=1)


@dataclass(frozen=True)
class ReplicaBeat:
    """What a replica says of itself on each heartbeat."""

    owner: str
    host: str
    pid: int
    version: str
    started_at: datetime
    slots: int
    busy: int
    parked: int


@dataclass(frozen=True)
class Replica(ReplicaBeat):
    """A replica as its last heartbeat left it."""

    heartbeat_at: datetime


class ReplicaRepository:
    def __init__(self, db: peewee.Database):
        self.db = db

    def beat(self, beat: ReplicaBeat, now: datetime) -> None:
        """Record ``beat`` as of ``now`` (one upsert), and forget replicas silent for a day."""
        now = to_utc(now)
        values = {"host": beat.host, "pid": beat.pid, "version": beat.version,
                  "started_at": to_utc(beat.started_at), "heartbeat_at": now,
                  "slots": beat.slots, "busy": beat.busy, "parked": beat.parked}
        with unit_of_work(self.db):
            (ReplicaRow.insert(owner=beat.owner, **values)
             .on_conflict(conflict_target=[ReplicaRow.owner],
                          update={getattr(ReplicaRow, name): value
                                  for name, value in values.items()})
             .execute())
            delete_where(ReplicaRow, ReplicaRow.heartbeat_at < now - FORGET_AFTER)

    def gave_back(self, owner: str) -> None:
        """The replica ``owner`` gave its work back as it stopped: it shows none busy or parked
        any more, whatever its last heartbeat said (its heartbeat time is left as it was)."""
        with unit_of_work(self.db):
            ReplicaRow.update(busy=0, parked=0).where(ReplicaRow.owner == owner).execute()

    def stopped(self, owner: str) -> None:
        """The replica ``owner`` stopped cleanly: it is forgotten at once, so that nobody takes
        it for one that was lost."""
        with unit_of_work(self.db):
            delete_where(ReplicaRow, ReplicaRow.owner == owner)

    def alive(self, now: datetime, within: timedelta) -> int:
        """The replicas whose last heartbeat is at most ``within`` old."""
        with unit_of_work(self.db):
            return (ReplicaRow.select()
                    .where(ReplicaRow.heartbeat_at >= to_utc(now) - within).count())

    def hold_site(self, site: str, until: datetime) -> None:
        """A rate limit of ``site`` holds every call until ``until``, or later if it did."""
        until = to_utc(until)
        with unit_of_work(self.db):
            (SiteHoldRow.insert(site=site, held_until=until)
             .on_conflict(conflict_target=[SiteHoldRow.site],
                          update={SiteHoldRow.held_until: until},
                          where=SiteHoldRow.held_until < until)
             .execute())

    def site_held_until(self, site: str) -> datetime | None:
        """Until when a rate limit of ``site`` holds every call, as last written."""
        with unit_of_work(self.db):
            row = SiteHoldRow.get_or_none(SiteHoldRow.site == site)
        return row.held_until if row is not None else None

    def known(self) -> list[Replica]:
        """Every replica remembered, the most recently started first."""
        with unit_of_work(self.db):
            rows = list(ReplicaRow.select().order_by(ReplicaRow.started_at.desc(),
                                                     ReplicaRow.owner))
        return [Replica(owner=row.owner, host=row.host, pid=row.pid, version=row.version,
                        started_at=row.started_at, heartbeat_at=row.heartbeat_at,
                        slots=row.slots, busy=row.busy, parked=row.parked) for row in rows]


# How long a replica goes by what it last read of the shared hold and of the live replicas.
HOLD_READ_EVERY = timedelta(seconds=1)
ALIVE_READ_EVERY = timedelta(seconds=10)


class StoredSiteLimits:
    """A service's limits as the replicas share them through the database: a hold of every
    call (``hold``, ``until``: read at most every ``HOLD_READ_EVERY``), and the live replicas
    a budget is divided among (``share``: heartbeats younger than ``lease``). When the
    database cannot be read, the last reading stands: a call is never failed for it. One
    thread at a time reads or writes (the others go by the last reading meanwhile), so the
    Jira clients take at most one of the pool's connections (its margin) for it."""

    def __init__(self, replicas: ReplicaRepository, clock: Clock, site: str,
                 lease: timedelta):
        self._replicas = replicas
        self._clock = clock
        self._site = site
        self._lease = lease
        self._lock = threading.Lock()
        self._database = threading.Lock()  # the one thread reading or writing
        self._until: tuple[datetime, datetime | None] | None = None  # (read at, until)
        self._alive: tuple[datetime, int] | None = None  # (read at, replicas)

    def until(self) -> datetime | None:
        now = self._clock.now()
        with self._lock:
            read = self._until
        if read is not None and now - read[0] < HOLD_READ_EVERY:
            return read[1]
        if not self._database.acquire(blocking=False):
            return read[1] if read is not None else None
        try:
            until = self._replicas.site_held_until(self._site)
        except StoreUnavailable:
            return read[1] if read is not None else None
        finally:
            self._database.release()
        with self._lock:
            self._until = (now, until)
        return until

    def hold(self, until: datetime) -> None:
        try:
            with self._database:
                self._replicas.hold_site(self._site, until)
        except StoreUnavailable:
            log.warning("%s rate limit not shared: the database cannot be reached", self._site)
            return
        with self._lock:
            self._until = (self._clock.now(), until)

    def share(self) -> int:
        now = self._clock.now()
        with self._lock:
            read = self._alive
        if read is not None and now - read[0] < ALIVE_READ_EVERY:
            return read[1]
        if not self._database.acquire(blocking=False):
            return read[1] if read is not None else 1
        try:
            alive = max(1, self._replicas.alive(now, self._lease))
        except StoreUnavailable:
            return read[1] if read is not None else 1
        finally:
            self._database.release()
        with self._lock:
            self._alive = (now, alive)
        return alive
