"""AckWatcher: looks at every parked page wait in batches, without an execution slot.

A page's ACK wait looks for an ACK every ``poll_interval`` until its deadline (docs/design.md,
"ACK waits without a slot"). Run as an execution, each look took a slot, a new actor thread,
a claim, four reads of the store, a Jira read, a Lark read and a checkpoint, so many parked
waits crowded out ordinary dispatches and woke late (bench/README.md, the parked waits). The
watcher does the looks that find nothing for all of them at once:

- the pool hands it the parked waits (``Watch``: an execution id and its stored ``wake_at``):
  a page wait just parked by its execution, and at boot every execution recovery finds
  parked; one scheduler timer (``Look``) covers the soonest;
- at each ``Look`` it takes every wait due within ``WINDOW``, ``BATCH`` at a time, and reads
  their executions from the store (one query for the batch). One that moved on meanwhile
  (ended, claimed, parked again at another time) is dropped; one that is not a page wait the
  watcher can keep (``ack_watch``: a retry of its issue load, a wake at its deadline, a step
  half done) goes back to the pool (``WatchedWake``) at its ``wake_at`` exactly, and its
  execution runs as it would have. For the others the look is saved first, as the wait's
  own poll would save it (``polls`` + 1 and the next ``wake_at``, only while the wait is
  still parked as the watcher read it: ``ExecutionRepository.record_looks``), so no other
  replica claims it meanwhile and a restart finds it where the watcher left it; then one
  Jira search reads their issues, the Lark read lists are read concurrently (bounded by
  ``READS_AT_ONCE``), and the guard (``AckWatch.needs_execution``) decides for each;
- a wait the guard has something to say about (an ACK, an invalidation, a read that failed)
  goes back to the pool at once, and its execution reads everything again and acts as it
  always has; every other wait stays here until its next look.

In shared mode each replica's watcher looks at the waits its own pool parked, before they are
due; so a wait still due after its ``wake_at`` is one whose replica is gone (or behind). Every
``ADOPT_EVERY`` the watcher takes such waits from the store (``adopt_due``, as many as its pace
allows: their ``wake_at`` moved to the next ``WINDOW``, so no other replica takes them too) and
looks at them as its own, instead of each taking a slot to look for itself. Should the replica
that parked one look at it after all, the look saved first wins, and the other's matches no
row.

Between two looks the watcher holds an id and two times per wait, nothing of the execution:
ten thousand waits are a few megabytes, and what it acts on is always what the store holds.

The looks are paced (``ack_watch.looks_per_second``): each saved look parks its wait until the
next free turn of one schedule whose turns are ``1 / looks_per_second`` apart, and never sooner
than its ``poll_interval``. A few hundred waits are looked at every poll as before; ten thousand
take turns, a round of them all lasting ``watched / looks_per_second``, so Lark, Jira and this
process see a bounded rate however many pages wait. The turns never run more than one round
of the waits still watched past a wait's poll, so they come back as waits end. A deadline is
never paced: the execution's own wake at its deadline is exact.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.messages import Adopt, Look, Rescheduled, Watch, WatchedWake
from ticket_dispatcher.actors.watch_schedule import (
    ADOPT_EVERY,
    BATCH,
    WINDOW,
    WatchedWait,
    WatchSchedule,
)
from ticket_dispatcher.domain.actions.notification_watch import AckWatch, ack_watch
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.domain.ports import Answer
from ticket_dispatcher.errors import DispatcherError, StoreUnavailable
from ticket_dispatcher.integrations.call_policy import calls_first

log = logging.getLogger(__name__)

# Lark read lists in flight at once: the watcher's reads run beside every live execution's
# Lark calls, on the same client pool and the same peer, and must not crowd them out.
READS_AT_ONCE = 4
STORE_RETRY = timedelta(seconds=1)  # the next try when the looks could not be saved
_RUNNING = (ExecutionStatus.CREATED, ExecutionStatus.EXECUTING)


@dataclass(frozen=True)
class WatchRound:
    """The ACK watcher as it last saw itself: the waits it watches, and how long one round of
    looks at them all lasts at the paced rate."""

    watched: int = 0
    round_seconds: float = 0.0


class WatchFigures:
    """Where the watcher leaves its latest ``WatchRound`` (one reference, replaced whole) for
    the admin view to read."""

    def __init__(self) -> None:
        self.last = WatchRound()


class AckWatcher(TrackedActor):
    """The actor around ``WatchSchedule`` (actors/watch_schedule.py), which says which waits
    are due and when each is looked at again: this shell reads the store, Jira and Lark for
    the waits due, asks the guard, and tells the pool what to run."""

    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef, figures: WatchFigures):
        super().__init__(deps.activity)
        self._deps = deps
        self._pool = pool
        self._figures = figures
        self._schedule = WatchSchedule(deps.config.ack_watch.looks_per_second)
        self._failing = False  # the batched reads are failing (logged once per streak)

    def on_start(self) -> None:
        # Replicas look for the waits one of them left; a single process leaves none.
        self._deps.cluster.adopt_left_waits(self._adopt_later)

    def handle(self, message: object) -> None:
        schedule = self._schedule
        if isinstance(message, Watch):
            for execution_id, wake_at in message.waits:
                schedule.keep(execution_id, WatchedWait(wake_at))
        elif isinstance(message, Look):
            schedule.fired()
            if not self._deps.stopping.is_set():
                self._look()
        elif isinstance(message, Adopt):
            if not self._deps.stopping.is_set():
                self._adopt()
                self._adopt_later()
        if not self._deps.stopping.is_set() and (at := schedule.timer()) is not None:
            self._deps.tell_at(at, self.actor_ref, Look(), label="ack-watch")
        watched = len(schedule)
        round_ = schedule.round_of(watched)
        self._deps.metrics.ack_watch(watched, round_)
        self._figures.last = WatchRound(watched, round_.total_seconds())

    # -- a look -----------------------------------------------------------------------------

    def _look(self) -> None:
        now = self._deps.clock.now()
        due = self._schedule.take_due(now)
        for execution_id, wait in due.plain:
            self._wake(execution_id, wait)
        self._deps.metrics.ack_looks_counted("deadline", len(due.plain))
        looking = due.looking
        watched = len(self._schedule) + len(looking)
        for start in range(0, len(looking), BATCH):
            batch = dict(looking[start:start + BATCH])
            try:
                with calls_first():  # a notification's: its lane goes first
                    self._look_at_batch(batch, now, watched)
            except Exception:  # never lose a wait: its execution looks for itself
                if self._deps.stopping.is_set():
                    return  # e.g. the store already closed; the next boot parks them again
                log.exception("ACK watcher failed on a batch; waking its waits")
                for execution_id, wait in batch.items():
                    self._schedule.forget(execution_id)
                    self._wake(execution_id, wait)

    def _look_at_batch(self, batch: dict[int, WatchedWait], now: datetime, watched: int) -> None:
        read = self._read_waits(batch, now)
        if read is None:
            return
        watches, gone = read
        saved = self._save_looks(watches, now, watched)
        if saved is None:
            return
        saved_ids = {watch.execution_id for watch in saved}
        gone += [watch.execution_id for watch in watches if watch.execution_id not in saved_ids]
        self._deps.metrics.ack_looks_counted("gone", len(gone))
        issues = self._read_issues(saved) if saved else {}
        readers = self._read_readers(saved) if saved else {}
        quieted = self._quieted(saved, now) | self._pressed(saved)
        woken = []
        parked: dict[int, datetime | None] = dict.fromkeys(gone)  # the pool forgets these
        for watch in saved:
            wait = batch[watch.execution_id]
            if watch.execution_id in quieted or watch.needs_execution(
                    issues[watch.execution_id], readers.get(watch.execution_id), now):
                woken.append((watch.execution_id, wait))
            else:
                parked[watch.execution_id] = watch.wake_at
                self._schedule.keep(watch.execution_id, WatchedWait(
                    watch.wake_at, plain=watch.at_deadline, adopted=wait.adopted))
        for execution_id, wait in woken:
            self._wake(execution_id, wait)
        self._deps.metrics.ack_looks_counted("woken", len(woken))
        self._deps.metrics.ack_looks_counted("parked", len(parked) - len(gone))
        if parked:
            adopted = frozenset(i for i, wait in batch.items() if wait.adopted)
            self._deps.activity.tell(self._pool, Rescheduled(parked, adopted))

    def _quieted(self, watches: list[AckWatch], now: datetime) -> set[int]:
        """The waits a maintenance window rules now: their executions end them without a
        page (notification_guard.py, ``quiet_ending``). One read of the windows a batch."""
        maintenance = self._deps.ports.maintenance
        windows = maintenance.active(now) if watches else []
        if not windows:
            return set()
        return {watch.execution_id for watch in watches
                if maintenance.ruling(watch.execution, now, windows) is not None}

    def _pressed(self, watches: list[AckWatch]) -> set[int]:
        """The waits whose card's button was pressed: their executions act on the press
        (notification_guard.py). One read a batch, and none while cards carry no buttons."""
        presses = self._deps.ports.presses
        if not presses.buttons or not watches:
            return set()
        return presses.pressed_among([watch.execution_id for watch in watches])

    def _read_waits(self, batch: dict[int, WatchedWait],
                    now: datetime) -> tuple[list[AckWatch], list[int]] | None:
        """The watches of the batch's waits as the store holds them, and the ids of those
        that moved on (ended, or parked again by a run elsewhere); one the watcher cannot keep
        waits for its own wake. None when the store is away: each is looked at again soon."""
        try:
            executions = self._deps.store.executions.get_many(batch)
        except StoreUnavailable:
            for execution_id, wait in batch.items():
                self._schedule.keep(execution_id, wait, at=now + STORE_RETRY)
            return None
        watches, gone = [], []
        for execution_id, wait in batch.items():
            execution = executions.get(execution_id)
            if (execution is None or execution.wake_at != wait.wake_at
                    or execution.status not in _RUNNING):
                gone.append(execution_id)
            elif (watch := ack_watch(execution)) is not None:
                watches.append(watch)
            else:
                self._schedule.keep(execution_id, WatchedWait(wait.wake_at, plain=True,
                                                              adopted=wait.adopted))
        return watches, gone

    def _save_looks(self, watches: list[AckWatch], now: datetime,
                    watched: int) -> list[AckWatch] | None:
        """Count each look and park it until the next, in the store first; the waits saved.
        None when the store is away: each keeps its stored wake and is looked at again soon
        (the store's health logs the outage)."""
        schedule = self._schedule
        looks = [(watch.execution, watch.rule, watch.record_look(
                     now, schedule.next_look(watch.poll, watch.deadline, now, watched)))
                 for watch in watches]
        try:
            saved = self._deps.store.executions.record_looks(looks)
        except StoreUnavailable:
            for watch, (_, _, previous) in zip(watches, looks, strict=True):
                self._schedule.keep(watch.execution_id, WatchedWait(previous), at=now + STORE_RETRY)
            return None
        return [watch for watch in watches if watch.execution_id in saved]

    def _read_issues(self, batch: list[AckWatch]) -> dict[int, Issue | DispatcherError]:
        """Each wait's live issue, or the error the guard is to see instead."""
        keys = sorted({watch.issue_key for watch in batch})
        try:
            found = self._deps.ports.jira.load_issues(keys)
            self._reads_work()
        except DispatcherError as exc:
            self._reads_fail("the Jira search", exc)
            return {watch.execution_id: exc for watch in batch}
        missing = DispatcherError("the issue is missing from the search's answer")
        return {watch.execution_id: found.get(watch.issue_key, missing) for watch in batch}

    def _read_readers(self, batch: list[AckWatch],
                      ) -> dict[int, list[str] | DispatcherError | None]:
        """Each card's readers (or the error), for the waits whose guard asks Lark."""
        asking = [watch for watch in batch if watch.message_id]
        if not asking:
            return {}
        answers: list[Answer[list[str]]] = self._deps.ports.lark.read_user_ids_each(
            [watch.message_id for watch in asking], READS_AT_ONCE)
        return {watch.execution_id: answer.value if answer.ok else answer.error
                for watch, answer in zip(asking, answers, strict=True)}

    def _wake(self, execution_id: int, wait: WatchedWait) -> None:
        self._deps.activity.tell(self._pool, WatchedWake(execution_id, wait.adopted))

    # -- the waits another replica left -------------------------------------------------------

    def _adopt_later(self) -> None:
        self._deps.tell_at(self._deps.clock.now() + ADOPT_EVERY, self.actor_ref, Adopt(),
                           label="ack-adopt")

    def _adopt(self) -> None:
        """Take the due waits that nobody looked at (their replica is gone, or behind) and
        look at them as this replica's own: at most what the pace allows in ``ADOPT_EVERY``,
        twice over. Taking one parks it until ``WINDOW`` from now, so no other replica takes it
        too, and it is looked at by then (a wait that is not is due again)."""
        limit = self._schedule.adopt_limit()
        now = self._deps.clock.now()
        try:
            taken = self._deps.store.executions.adopt_due(now, now + WINDOW, limit)
        except StoreUnavailable:
            return  # the store's health reports the outage; the next round tries again
        for execution_id, wake_at in taken:
            self._schedule.keep(execution_id, WatchedWait(wake_at, adopted=True))

    def _reads_work(self) -> None:
        if self._failing:
            self._failing = False
            log.info("ACK watcher: the batched Jira search answers again")

    def _reads_fail(self, what: str, exc: DispatcherError) -> None:
        if not self._failing:
            self._failing = True
            log.warning("ACK watcher: %s failed; the waits it covered are woken to read for "
                        "themselves", what, extra={"reason": exc.message})
