"""The cluster strategy: how this process shares its database, decided once at start-up.

A single process (``cluster.mode = "single"``) serves its database alone; replicas
(``"shared"``, PostgreSQL only) serve one database together, and the database is their queue
(docs/design.md, "Several replicas"). ``for_mode`` builds the strategy this process runs
with; the runtime, the actors, the console and the cluster link are handed it and talk to
``Cluster`` alone, so nothing else asks which mode it runs in. Each member is one of the
differences docs/design.md lists under "What single mode still does its own way":

- **where work comes from**: a single process runs what it creates and accepts, and its poll
  hands itself the triggers whose time has come; a replica runs what it has room for and
  claims the rest from the store, with the others;
- **boot and shutdown**: a single process takes back every lease at boot; a replica takes back
  nothing, and at SIGTERM drains and gives its leases back;
- **a service's rate limits**: a single process holds and paces its calls alone; replicas
  share a hold of every call through the database, and divide a budget among the live ones;
- **what a single process remembers**, being the only writer: the lock keys its executions
  hold, its triggers' reads of their issues, and the executions no shadow decision waits for.
  A replica reads each of these from the store, or from the live issue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from ticket_dispatcher.actors.first_read import FRESH_READ, IssueRead
from ticket_dispatcher.actors.stopping import Deadline
from ticket_dispatcher.clock import Clock
from ticket_dispatcher.config import ClusterConfig, ConsoleConfig
from ticket_dispatcher.domain.execution import Trigger
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.integrations.call_policy import ALONE, SiteLimits
from ticket_dispatcher.store import Store
from ticket_dispatcher.store.cluster import (
    REPLICA_LOCK,
    SOLE_PROCESS_LOCK,
    ModeLock,
    lock_issue,
    notify_work,
)
from ticket_dispatcher.store.database import unit_of_work, write_lock
from ticket_dispatcher.store.replicas import StoredSiteLimits

log = logging.getLogger(__name__)

Made = TypeVar("Made")
ShadowKey = tuple[int, str]  # a live execution's (trigger id, policy family)


# How much earlier than a trigger's read a replica looks for its peers' writes to the issue:
# replicas' clocks agree closely, not exactly (NTP keeps them within milliseconds).
CLOCK_MARGIN = timedelta(seconds=1)


@dataclass(frozen=True)
class Recovery:
    """What boot takes back: the running executions (id, ``wake_at``, lock key) and the
    pending or processing triggers (id, source), each in creation order."""

    executions: list[tuple[int, datetime | None, str | None]] = field(default_factory=list)
    triggers: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class ExecutionClaim:
    """What a claim of due executions took, whether the store may hold more due now, and,
    when it holds no more, the soonest ``wake_at`` of a parked wait nobody holds."""

    ids: list[int]
    more: bool
    next_wake: datetime | None


class LockKeys(Protocol):
    """How the creation of executions learns which of an issue's lock keys live executions
    hold (the execution pool, in its one thread)."""

    def known_free(self, keys: Sequence[str]) -> bool:
        """None of ``keys`` is held, known without reading the store."""

    def creating(self, store: Store, issue_key: str) -> AbstractContextManager[object]:
        """The unit of work that reads the held keys and creates the executions."""

    def hold(self, execution_id: int, key: str | None) -> None:
        """The execution, created or recovered here, holds ``key``."""

    def release(self, execution_id: int) -> None:
        """The execution ended (its end saved): its key is free."""


class FirstReads(Protocol):
    """The trigger's read of its issue, kept for the first run of the executions it created
    (actors/first_read.py); the execution pool's, in its one thread."""

    def keep(self, execution_ids: Iterable[int], read: IssueRead, monotonic: float) -> None:
        """Keep ``read`` for these executions; ``monotonic``: the clock's monotonic now."""

    def take(self, execution_id: int) -> IssueRead | None:
        """The read kept for the execution's first run, forgotten as it is taken."""


class ShadowNotes(Protocol):
    """The live executions whose end need not look for shadow decisions to judge, by
    (trigger id, family): their trigger found no shadow version of their family."""

    def note(self, keys: Iterable[ShadowKey]) -> None:
        """Just before their creation (an execution may end before the pool answers)."""

    def forget(self, keys: Iterable[ShadowKey]) -> None:
        """They were not created after all: no end comes."""

    def settled(self, key: ShadowKey) -> bool:
        """At the execution's end: True when no decision waits for it (and it is forgotten);
        False when its end must look."""


class Cluster(Protocol):
    """What differs between a single process and shared replicas (module docstring)."""

    @property
    def mode_lock(self) -> ModeLock:
        """How the cluster link holds the database (store/cluster.py)."""

    @property
    def unshadowed(self) -> ShadowNotes:
        """The live executions whose end need not look for shadow decisions."""

    def lock_keys(self) -> LockKeys:
        """A new memory of lock keys, for the execution pool."""

    def first_reads(self) -> FirstReads:
        """A new memory of the triggers' reads, for the execution pool."""

    def written_unseen(self, store: Store, read: IssueRead, execution_id: int) -> bool:
        """Whether an execution this process cannot see at work may have written to the
        issue of ``read`` since it was read, so that the first run of ``execution_id`` must
        read it again (actors/first_read.py)."""

    def runs_here(self, made: list[Made], room: int) -> list[Made]:
        """Of the triggers or executions just stored here, those this process runs itself;
        ``room``: how many it can take at once. The rest waits in the store for a claim."""

    def intake_unit(self, store: Store, statements: int) -> AbstractContextManager[object]:
        """The unit of work that stores an accepted trigger (or a delivery's triggers) in
        ``statements`` statements, and announces the ones not run here."""

    def due_triggers(self, store: Store, now: datetime) -> list[tuple[int, str]]:
        """The poll: the pending triggers (id, source) to hand this process's actors."""

    def claim_triggers(self, store: Store, owner: str, free: int, *, now: datetime,
                       expires_at: datetime, first: str | None) -> list[Trigger]:
        """Claim up to ``free`` due triggers nobody holds (``first``: the lane first)."""

    def claim_executions(self, store: Store, owner: str, free: int, *, now: datetime,
                         expires_at: datetime, woken_before: datetime) -> ExecutionClaim:
        """Claim up to ``free`` due executions nobody holds."""

    def adopt_left_waits(self, look: Callable[[], None]) -> None:
        """Start the ACK watcher's looks for parked waits another process left (``look``
        arms the first)."""

    def resumes(self, stale: list[int], in_hand: Container[int]) -> list[int]:
        """Of the ``stale`` work the sweep found (no live lease covers it), what this process
        resumes; ``in_hand``: what it has queued or running."""

    def take_back(self, store: Store) -> Recovery:
        """At boot: the work to take back from the store (raises when it cannot be read)."""

    def drain(self, begin: Callable[[], None], deadline: Deadline) -> timedelta:
        """At SIGTERM: how long the HTTP server still takes requests; ``begin`` starts the
        runtime's drain. Bounded by ``deadline``."""

    def give_back(self, store: Store, owner: str) -> None:
        """Once the runtime stopped: hand back the leases still held."""

    def console_warning(self, console: ConsoleConfig) -> str | None:
        """What an operator must hear about the console's sign-ins at start, if anything."""

    def site_limits(self, store: Store, clock: Clock, site: str,
                    lease: timedelta) -> SiteLimits:
        """A service's rate limits as the processes serving the database share them."""


def for_mode(config: ClusterConfig) -> Cluster:
    """The strategy of ``cluster.mode``."""
    return SharedReplicas(config.drain) if config.shared else SingleProcess()


# -- a single process ---------------------------------------------------------------------------


class RememberedKeys:
    """The lock keys of the live executions, both ways: held when created or recovered here,
    free once their end is reported. A trigger's executions are created with one insert when
    none of their keys is held; the UNIQUE index of the keys refuses a duplicate, and the
    keys are then read as a replica reads them."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}
        self._key_of: dict[int, str] = {}

    def known_free(self, keys: Sequence[str]) -> bool:
        return not any(key in self._held for key in keys)

    def creating(self, store: Store, issue_key: str) -> AbstractContextManager[object]:
        return unit_of_work(store.db)  # this process is the one writer of executions

    def hold(self, execution_id: int, key: str | None) -> None:
        if key:
            self._held[key], self._key_of[execution_id] = execution_id, key

    def release(self, execution_id: int) -> None:
        key = self._key_of.pop(execution_id, None)
        if key is not None and self._held.get(key) == execution_id:
            del self._held[key]


class TriggerReads:
    """The triggers' reads for their executions' first runs, in creation order. No other
    process's execution of the issue can have written to it unseen; the freshness rule
    (actors/first_read.py) judges the rest when the run starts."""

    def __init__(self) -> None:
        self._reads: dict[int, IssueRead] = {}

    def keep(self, execution_ids: Iterable[int], read: IssueRead, monotonic: float) -> None:
        self._forget_before(monotonic - FRESH_READ.total_seconds())
        self._reads.update(dict.fromkeys(execution_ids, read))

    def take(self, execution_id: int) -> IssueRead | None:
        return self._reads.pop(execution_id, None)

    def _forget_before(self, oldest: float) -> None:
        """Drop the reads of executions still queued past ``FRESH_READ``: their run reads
        the live issue anyway, and a backlog keeps no issue in memory."""
        while self._reads:
            execution_id, read = next(iter(self._reads.items()))
            if read.began.at >= oldest:
                return
            del self._reads[execution_id]


class Unshadowed:
    """The live executions of this process that no shadow decision waits for (thread-safe:
    each operation is one step of a set). Kept from just before their creation to their end;
    any other execution's end looks."""

    def __init__(self) -> None:
        self.noted: set[ShadowKey] = set()

    def note(self, keys: Iterable[ShadowKey]) -> None:
        self.noted.update(keys)

    def forget(self, keys: Iterable[ShadowKey]) -> None:
        self.noted.difference_update(keys)

    def settled(self, key: ShadowKey) -> bool:
        if key not in self.noted:
            return False
        self.noted.discard(key)
        return True


class SingleProcess:
    """The only process serving its database: it hears of every trigger and execution there
    is, so its memory is the truth, and its previous self is gone when it boots."""

    mode_lock: ModeLock = SOLE_PROCESS_LOCK

    def __init__(self) -> None:
        self.unshadowed = Unshadowed()

    def lock_keys(self) -> LockKeys:
        return RememberedKeys()

    def first_reads(self) -> FirstReads:
        return TriggerReads()

    def written_unseen(self, store: Store, read: IssueRead, execution_id: int) -> bool:
        return False  # every execution of the database is this process's: IssueActivity

    def runs_here(self, made: list[Made], room: int) -> list[Made]:
        return made  # nobody else would: the rest waits in this process's queues

    def intake_unit(self, store: Store, statements: int) -> AbstractContextManager[object]:
        # one statement needs no transaction around it
        return write_lock(store.db) if statements > 1 else unit_of_work(store.db)

    def due_triggers(self, store: Store, now: datetime) -> list[tuple[int, str]]:
        return store.triggers.due(now)

    def claim_triggers(self, store: Store, owner: str, free: int, *, now: datetime,
                       expires_at: datetime, first: str | None) -> list[Trigger]:
        return []  # every trigger in the store was handed to this process already

    def claim_executions(self, store: Store, owner: str, free: int, *, now: datetime,
                         expires_at: datetime, woken_before: datetime) -> ExecutionClaim:
        return ExecutionClaim([], more=False, next_wake=None)  # likewise every execution

    def adopt_left_waits(self, look: Callable[[], None]) -> None:
        """Nobody else parks waits on this database."""

    def resumes(self, stale: list[int], in_hand: Container[int]) -> list[int]:
        return stale  # nobody else will

    def take_back(self, store: Store) -> Recovery:
        with unit_of_work(store.db):
            released = store.executions.release_leases()
            recovery = Recovery(store.executions.recoverable(), store.triggers.recoverable())
        log.info("boot recovery done", extra={
            "reason": f"{len(recovery.executions)} executions ({released} leases given back), "
                      f"{len(recovery.triggers)} triggers"})
        return recovery

    def drain(self, begin: Callable[[], None], deadline: Deadline) -> timedelta:
        return timedelta(0)  # nobody else would take the triggers posted meanwhile

    def give_back(self, store: Store, owner: str) -> None:
        """Nothing: the work stays at its checkpoint, and the next boot takes it back."""

    def console_warning(self, console: ConsoleConfig) -> str | None:
        return None  # a sign-in holds wherever this process serves it

    def site_limits(self, store: Store, clock: Clock, site: str,
                    lease: timedelta) -> SiteLimits:
        return ALONE  # nobody to share them with: the rate gate's own holds are all there is


# -- shared replicas ----------------------------------------------------------------------------


class IssueLockedKeys:
    """Nothing remembered: another replica may create or end an execution of the issue at any
    moment, so the held keys are read in the creating transaction, under the issue's
    advisory lock, which one replica at a time takes."""

    def known_free(self, keys: Sequence[str]) -> bool:
        return False

    @contextmanager
    def creating(self, store: Store, issue_key: str) -> Iterator[object]:
        with write_lock(store.db):
            lock_issue(store.db, issue_key)
            yield None

    def hold(self, execution_id: int, key: str | None) -> None:
        """Nothing: the store holds it."""

    def release(self, execution_id: int) -> None:
        """Nothing: the store freed it."""


class AlwaysLook:
    """Nothing noted: a shadow version may have been started on another replica meanwhile,
    so every live execution's end looks (one read)."""

    def note(self, keys: Iterable[ShadowKey]) -> None:
        """Nothing."""

    def forget(self, keys: Iterable[ShadowKey]) -> None:
        """Nothing."""

    def settled(self, key: ShadowKey) -> bool:
        return False


class SharedReplicas:
    """One of several replicas on one PostgreSQL database: the database is the queue, the
    others may hold leases at any moment, and they wake each other with ``NOTIFY``."""

    mode_lock: ModeLock = REPLICA_LOCK

    def __init__(self, drain: timedelta) -> None:
        self._drain = drain
        self.unshadowed = AlwaysLook()

    def lock_keys(self) -> LockKeys:
        return IssueLockedKeys()

    def first_reads(self) -> FirstReads:
        return TriggerReads()

    def written_unseen(self, store: Store, read: IssueRead, execution_id: int) -> bool:
        # Another replica's executions are seen through the store: one of the issue saved
        # since the read (a margin earlier, for the replicas' clocks), or not ended, other
        # than this one; its siblings of the same trigger count too.
        if read.since is None:
            return True
        return store.executions.worked_since(read.issue.key, read.since - CLOCK_MARGIN,
                                             excluding=execution_id)

    def runs_here(self, made: list[Made], room: int) -> list[Made]:
        return made[:room]

    def intake_unit(self, store: Store, statements: int) -> AbstractContextManager[object]:
        return write_lock(store.db)  # the announcement, if any, is sent at its commit

    def due_triggers(self, store: Store, now: datetime) -> list[tuple[int, str]]:
        return []  # claimed by whichever replica has an idle trigger actor

    def claim_triggers(self, store: Store, owner: str, free: int, *, now: datetime,
                       expires_at: datetime, first: str | None) -> list[Trigger]:
        return store.triggers.claim_due(owner, free, now=now, expires_at=expires_at,
                                        first=first)

    def claim_executions(self, store: Store, owner: str, free: int, *, now: datetime,
                         expires_at: datetime, woken_before: datetime) -> ExecutionClaim:
        claimed = store.executions.claim_due(owner, free, now=now, expires_at=expires_at,
                                             woken_before=woken_before)
        more = len(claimed) == free
        return ExecutionClaim(claimed, more,
                              None if more else store.executions.next_wake(now))

    def adopt_left_waits(self, look: Callable[[], None]) -> None:
        look()  # a replica that is gone, or behind, leaves its waits to the others

    def resumes(self, stale: list[int], in_hand: Container[int]) -> list[int]:
        # what is not in hand here is claimed by whichever replica has room
        return [work_id for work_id in stale if work_id in in_hand]

    def take_back(self, store: Store) -> Recovery:
        # Other replicas may hold leases this very moment: what is due and unheld is claimed
        # like any other due work.
        log.info("joined the replicas; claiming due work from the store")
        return Recovery()

    def drain(self, begin: Callable[[], None], deadline: Deadline) -> timedelta:
        """Readiness turns false at once and no new work is taken here, while the triggers
        posted meanwhile are still stored for the others, for ``cluster.drain``: a load
        balancer stops sending before the port closes."""
        begin()
        left = deadline.remaining()
        return self._drain if left is None else min(self._drain, timedelta(seconds=left))

    def give_back(self, store: Store, owner: str) -> None:
        """Release every lease this replica holds and wake the others, so they resume its
        work now rather than when the leases expire. When the database cannot be reached,
        the leases simply expire."""
        try:
            with write_lock(store.db):
                executions = store.executions.release_owner(owner)
                triggers = store.triggers.release_owner(owner)
                store.replicas.gave_back(owner)
                notify_work(store.db)
        except StoreUnavailable:
            log.warning("leases not given back: the database cannot be reached; the other "
                        "replicas resume this work when they expire")
            return
        log.info("leases given back to the other replicas", extra={
            "reason": f"{executions} executions, {triggers} triggers"})

    def site_limits(self, store: Store, clock: Clock, site: str,
                    lease: timedelta) -> SiteLimits:
        return StoredSiteLimits(store.replicas, clock, site, lease)

    def console_warning(self, console: ConsoleConfig) -> str | None:
        if console.session_secret:
            return None
        return ("console.session_secret is not set: each replica signs its own console "
                "sessions, so a sign-in holds only on the replica that took it")
