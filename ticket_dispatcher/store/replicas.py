"""The processes serving this database: one row each, keyed by its lease owner identity, written
by its heartbeat and deleted when it stops cleanly. The admin view reads them to show the
cluster; a row whose heartbeat is older than a lease is a process that stopped beating without
stopping (lost, paused, or cut off from the database)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import peewee

from ticket_dispatcher.store.database import unit_of_work
from ticket_dispatcher.store.models import ReplicaRow, delete_where
from ticket_dispatcher.timeutil import to_utc

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

    def known(self) -> list[Replica]:
        """Every replica remembered, the most recently started first."""
        with unit_of_work(self.db):
            rows = list(ReplicaRow.select().order_by(ReplicaRow.started_at.desc(),
                                                     ReplicaRow.owner))
        return [Replica(owner=row.owner, host=row.host, pid=row.pid, version=row.version,
                        started_at=row.started_at, heartbeat_at=row.heartbeat_at,
                        slots=row.slots, busy=row.busy, parked=row.parked) for row in rows]
