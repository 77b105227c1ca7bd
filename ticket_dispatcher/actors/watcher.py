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

import heapq
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.messages import Adopt, Look, Rescheduled, Watch, WatchedWake
from ticket_dispatcher.domain.actions.notification_watch import AckWatch, ack_watch
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.domain.ports import Answer
from ticket_dispatcher.errors import DispatcherError, StoreUnavailable

log = logging.getLogger(__name__)

BATCH = 100  # waits per Jira search (its key list) and per saved batch of looks
# Lark read lists in flight at once: the watcher's reads run beside every live execution's
# Lark calls, on the same client pool and the same peer, and must not crowd them out.
READS_AT_ONCE = 4
WINDOW = timedelta(milliseconds=250)  # a look may come this early, so looks share batches
STORE_RETRY = timedelta(seconds=1)  # the next try when the looks could not be saved
# Shared mode: how often the watcher takes the due waits nobody looked at. Each replica's own
# are looked at before they are due, so a due one is another's that is gone or behind.
ADOPT_EVERY = timedelta(seconds=1)
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


@dataclass(slots=True)
class _Wait:
    """A watched wait between two looks: its ``wake_at`` as stored, and whether it is only to
    be handed back to the pool then (``plain``: no look; its execution runs at its time)."""

    wake_at: datetime
    plain: bool = False
    adopted: bool = False  # taken from the store (shared mode), not handed in by the pool


class AckWatcher(TrackedActor):
    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef, figures: WatchFigures):
        super().__init__(deps.activity)
        self._deps = deps
        self._pool = pool
        self._figures = figures
        self._waits: dict[int, _Wait] = {}
        self._looks: dict[int, datetime] = {}  # each wait's next look (its wake_at, mostly)
        # (next look, execution id) of the waits to look at, and of the plain ones (their
        # wake); both with stale entries, which ``_looks`` tells apart
        self._due: list[tuple[datetime, int]] = []
        self._wakes: list[tuple[datetime, int]] = []
        self._look_at: datetime | None = None  # when the armed Look timer fires
        self._looked_at: datetime | None = None  # the last look
        self._failing = False  # the batched reads are failing (logged once per streak)
        rate = deps.config.ack_watch.looks_per_second
        self._turn = timedelta(seconds=1 / rate) if rate else None  # None: no pacing
        self._next_turn: datetime | None = None  # the schedule's next free turn

    def on_start(self) -> None:
        # Replicas look for the waits one of them left; a single process leaves none.
        self._deps.cluster.adopt_left_waits(self._adopt_later)

    def handle(self, message: object) -> None:
        if isinstance(message, Watch):
            for execution_id, wake_at in message.waits:
                self._keep(execution_id, _Wait(wake_at))
        elif isinstance(message, Look):
            self._look_at = None
            if not self._deps.stopping.is_set():
                self._look()
        elif isinstance(message, Adopt):
            if not self._deps.stopping.is_set():
                self._adopt()
                self._adopt_later()
        self._arm()
        watched = len(self._waits)
        round_ = self._round(watched)
        self._deps.metrics.ack_watch(watched, round_)
        self._figures.last = WatchRound(watched, round_.total_seconds())

    def _round(self, watched: int) -> timedelta:
        """How long one look at each of ``watched`` waits takes at the paced rate."""
        return self._turn * watched if self._turn is not None else timedelta(0)

    def _next_look(self, watch: AckWatch, now: datetime, watched: int) -> datetime:
        """When to look at ``watch`` again after a look at ``now``: its poll later, or the
        schedule's next free turn when that is later (but never more than a round of the
        ``watched`` waits past its poll, so the turns of waits that ended are given back)."""
        soonest = now + watch.poll
        if self._turn is None:
            return soonest
        turn = min(self._next_turn or soonest, soonest + self._round(watched))
        look = max(soonest, turn)
        if look < watch.deadline:  # the wake at its deadline takes no turn
            self._take_turn(look)
        return look

    def _take_turn(self, look: datetime) -> None:
        if self._turn is not None:
            self._next_turn = max(self._next_turn or look, look + self._turn)

    # -- the timer --------------------------------------------------------------------------

    def _arm(self) -> None:
        """One timer for the next ``Look``: at the soonest plain wake exactly, or ``WINDOW``
        before the soonest look, but not sooner than ``WINDOW`` after the last look, so that
        a steady stream of looks is taken in batches of ``WINDOW``'s worth."""
        if self._deps.stopping.is_set():
            return
        times = []
        if (wake := self._soonest(self._wakes)) is not None:
            times.append(wake)
        if (look := self._soonest(self._due)) is not None:
            times.append(max(look - WINDOW, self._looked_at + WINDOW) if self._looked_at
                         else look - WINDOW)
        if not times:
            return
        soonest = min(times)
        if self._look_at is None or soonest < self._look_at:
            self._look_at = soonest
            self._deps.tell_at(soonest, self.actor_ref, Look(), label="ack-watch")

    def _soonest(self, heap: list[tuple[datetime, int]]) -> datetime | None:
        while heap:
            at, execution_id = heap[0]
            if self._looks.get(execution_id) == at:
                return at
            heapq.heappop(heap)  # a superseded entry
        return None

    def _take(self, heap: list[tuple[datetime, int]], until: datetime) -> list[tuple[int, _Wait]]:
        taken = []
        while (soonest := self._soonest(heap)) is not None and soonest <= until:
            _, execution_id = heapq.heappop(heap)
            del self._looks[execution_id]
            taken.append((execution_id, self._waits.pop(execution_id)))
        return taken

    # -- a look -----------------------------------------------------------------------------

    def _look(self) -> None:
        now = self._deps.clock.now()
        self._looked_at = now
        plain = self._take(self._wakes, now)
        for execution_id, wait in plain:
            self._wake(execution_id, wait)
        self._deps.metrics.ack_looks_counted("deadline", len(plain))
        looking = self._take(self._due, now + WINDOW)
        watched = len(self._waits) + len(looking)
        for start in range(0, len(looking), BATCH):
            batch = dict(looking[start:start + BATCH])
            try:
                self._look_at_batch(batch, now, watched)
            except Exception:  # never lose a wait: its execution looks for itself
                if self._deps.stopping.is_set():
                    return  # e.g. the store already closed; the next boot parks them again
                log.exception("ACK watcher failed on a batch; waking its waits")
                for execution_id, wait in batch.items():
                    self._forget(execution_id)
                    self._wake(execution_id, wait)

    def _look_at_batch(self, batch: dict[int, _Wait], now: datetime, watched: int) -> None:
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
        woken = []
        parked: dict[int, datetime | None] = dict.fromkeys(gone)  # the pool forgets these
        for watch in saved:
            wait = batch[watch.execution_id]
            if watch.needs_execution(issues[watch.execution_id],
                                     readers.get(watch.execution_id), now):
                woken.append((watch.execution_id, wait))
            else:
                parked[watch.execution_id] = watch.wake_at
                self._keep(watch.execution_id, _Wait(watch.wake_at, plain=watch.at_deadline,
                                                     adopted=wait.adopted))
        for execution_id, wait in woken:
            self._wake(execution_id, wait)
        self._deps.metrics.ack_looks_counted("woken", len(woken))
        self._deps.metrics.ack_looks_counted("parked", len(parked) - len(gone))
        if parked:
            adopted = frozenset(i for i, wait in batch.items() if wait.adopted)
            self._deps.activity.tell(self._pool, Rescheduled(parked, adopted))

    def _read_waits(self, batch: dict[int, _Wait],
                    now: datetime) -> tuple[list[AckWatch], list[int]] | None:
        """The watches of the batch's waits as the store holds them, and the ids of those
        that moved on (ended, or parked again by a run elsewhere); one the watcher cannot keep
        waits for its own wake. None when the store is away: each is looked at again soon."""
        try:
            executions = self._deps.store.executions.get_many(batch)
        except StoreUnavailable:
            for execution_id, wait in batch.items():
                self._keep(execution_id, wait, at=now + STORE_RETRY)
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
                self._keep(execution_id, _Wait(wait.wake_at, plain=True, adopted=wait.adopted))
        return watches, gone

    def _save_looks(self, watches: list[AckWatch], now: datetime,
                    watched: int) -> list[AckWatch] | None:
        """Count each look and park it until the next, in the store first; the waits saved.
        None when the store is away: each keeps its stored wake and is looked at again soon
        (the store's health logs the outage)."""
        looks = [(watch.execution, watch.rule,
                  watch.record_look(now, self._next_look(watch, now, watched)))
                 for watch in watches]
        try:
            saved = self._deps.store.executions.record_looks(looks)
        except StoreUnavailable:
            for watch, (_, _, previous) in zip(watches, looks, strict=True):
                self._keep(watch.execution_id, _Wait(previous), at=now + STORE_RETRY)
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

    def _keep(self, execution_id: int, wait: _Wait, at: datetime | None = None) -> None:
        """Hold a wait until its next look, at its ``wake_at`` (up to ``WINDOW`` sooner: the
        looks due close together share a batch) or at ``at``; or, when it is only to be
        handed back (``plain``), until its ``wake_at`` exactly."""
        look = at or wait.wake_at
        self._waits[execution_id] = wait
        self._looks[execution_id] = look
        if wait.plain and at is None:
            heapq.heappush(self._wakes, (look, execution_id))
            return
        heapq.heappush(self._due, (look, execution_id))
        self._take_turn(look)

    def _forget(self, execution_id: int) -> None:
        self._waits.pop(execution_id, None)
        self._looks.pop(execution_id, None)

    def _wake(self, execution_id: int, wait: _Wait) -> None:
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
        limit = (max(1, round(2 * ADOPT_EVERY / self._turn)) if self._turn is not None
                 else 5 * BATCH)
        now = self._deps.clock.now()
        try:
            taken = self._deps.store.executions.adopt_due(now, now + WINDOW, limit)
        except StoreUnavailable:
            return  # the store's health reports the outage; the next round tries again
        for execution_id, wake_at in taken:
            self._keep(execution_id, _Wait(wake_at, adopted=True))

    def _reads_work(self) -> None:
        if self._failing:
            self._failing = False
            log.info("ACK watcher: the batched Jira search answers again")

    def _reads_fail(self, what: str, exc: DispatcherError) -> None:
        if not self._failing:
            self._failing = True
            log.warning("ACK watcher: %s failed; the waits it covered are woken to read for "
                        "themselves", what, extra={"reason": exc.message})
