"""AckWatcher: looks at every parked page wait in batches, without an execution slot.

A page's ACK wait looks for an ACK every ``poll_interval`` until its deadline (docs/design.md,
"ACK waits without a slot"). Run as an execution, each look took a slot, a new actor thread,
a claim, four reads of the store, a Jira read, a Lark read and a checkpoint, so a thousand
waits at a 5 s poll crowded out ordinary dispatches and woke seconds late. The watcher does
the looks that find nothing for all of them at once:

- the pool hands it a just-parked wait (``Watch``, with the execution as it parked) instead of
  setting a timer; one scheduler timer (``Look``) covers the soonest wait;
- at each ``Look`` it takes every wait due within ``WINDOW``. A wait whose ``wake_at`` is its
  deadline goes back to the pool (``WatchedWake``) at that time exactly: the execution itself
  times it out. The
  others, ``BATCH`` at a time: the look is saved first, as the wait's own poll would save it
  (``polls`` + 1 and the next ``wake_at``, only while the wait is still parked as the watcher
  knows it: ``ExecutionRepository.record_looks``), so no other replica claims it meanwhile and
  a restart finds it where the watcher left it; then one Jira search reads their issues, the
  Lark read lists are read concurrently (bounded by the Lark client pool), and the guard
  (``AckWatch.needs_execution``) decides for each;
- a wait the guard has something to say about (an ACK, an invalidation, a read that failed)
  goes back to the pool at once, and its execution reads everything again and acts as it
  always has; every other wait stays here until its next look.

The watcher keeps no state the store does not have: after a restart, boot recovery parks every
wait at its stored ``wake_at``, and its next park hands it to the watcher again. A wait that was
cancelled, woken or claimed meanwhile is dropped at its next look (its save matches no row).
"""

from __future__ import annotations

import heapq
import logging
from datetime import datetime, timedelta

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.messages import Look, Rescheduled, Watch, WatchedWake
from ticket_dispatcher.domain.actions.notification_watch import AckWatch
from ticket_dispatcher.domain.ports import Answer
from ticket_dispatcher.errors import DispatcherError, StoreUnavailable

log = logging.getLogger(__name__)

BATCH = 100  # waits per Jira search (its key list) and per saved batch of looks
# Lark read lists in flight at once: the watcher's reads run beside every live execution's
# Lark calls, on the same client pool and the same peer, and must not crowd them out.
READS_AT_ONCE = 4
WINDOW = timedelta(milliseconds=250)  # a look may come this early, so looks share batches
STORE_RETRY = timedelta(seconds=1)  # the next try when the looks could not be saved


class AckWatcher(TrackedActor):
    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef):
        super().__init__()
        self._deps = deps
        self._pool = pool
        self._watches: dict[int, AckWatch] = {}
        self._looks: dict[int, datetime] = {}  # each wait's next look (its wake_at, mostly)
        self._due: list[tuple[datetime, int]] = []  # (next look, execution id); stale entries
        self._look_at: datetime | None = None  # when the armed Look timer fires
        self._failing = False  # the batched reads are failing (logged once per streak)

    def handle(self, message):
        if isinstance(message, Watch):
            self._keep(message.watch)
        elif isinstance(message, Look):
            self._look_at = None
            if not self._deps.stopping.is_set():
                self._look()
        self._arm()

    # -- the timer --------------------------------------------------------------------------

    def _arm(self) -> None:
        soonest = self._soonest()
        if soonest is None or self._deps.stopping.is_set():
            return
        if self._look_at is None or soonest < self._look_at:
            self._look_at = soonest
            self._deps.tell_at(soonest, self.actor_ref, Look(), label="ack-watch")

    def _soonest(self) -> datetime | None:
        while self._due:
            at, execution_id = self._due[0]
            if self._looks.get(execution_id) == at:
                return at
            heapq.heappop(self._due)  # a superseded entry
        return None

    # -- a look -----------------------------------------------------------------------------

    def _look(self) -> None:
        now = self._deps.clock.now()
        due: list[AckWatch] = []
        while (soonest := self._soonest()) is not None and soonest <= now:
            _, execution_id = heapq.heappop(self._due)
            del self._looks[execution_id]
            due.append(self._watches.pop(execution_id))
        deadlines = [watch for watch in due if watch.at_deadline]
        for watch in deadlines:
            self._wake(watch)
        self._deps.metrics.ack_looks_counted("deadline", len(deadlines))
        looking = [watch for watch in due if not watch.at_deadline]
        for start in range(0, len(looking), BATCH):
            batch = looking[start:start + BATCH]
            try:
                self._look_at_batch(batch, now)
            except Exception:  # never lose a wait: its execution looks for itself
                if self._deps.stopping.is_set():
                    return  # e.g. the store already closed; the next boot parks them again
                log.exception("ACK watcher failed on a batch; waking its waits")
                for watch in batch:
                    self._forget(watch.execution_id)
                    self._wake(watch)

    def _look_at_batch(self, batch: list[AckWatch], now: datetime) -> None:
        saved = self._save_looks(batch, now)
        if saved is None:
            return
        self._deps.metrics.ack_looks_counted("gone", len(batch) - len(saved))
        if not saved:
            return
        issues = self._read_issues(saved)
        readers = self._read_readers(saved)
        woken, parked = [], {}
        for watch in saved:
            if watch.needs_execution(issues[watch.execution_id],
                                     readers.get(watch.execution_id), now):
                woken.append(watch)
            else:
                parked[watch.execution_id] = watch.wake_at
                self._keep(watch)
        for watch in woken:
            self._wake(watch)
        self._deps.metrics.ack_looks_counted("woken", len(woken))
        self._deps.metrics.ack_looks_counted("parked", len(parked))
        if parked:
            self._deps.activity.tell(self._pool, Rescheduled(parked))

    def _save_looks(self, batch: list[AckWatch], now: datetime) -> list[AckWatch] | None:
        """Count each look and park it until the next, in the store first; the waits saved.
        None when the store is away: each keeps its stored wake and is looked at again soon
        (the store's health logs the outage)."""
        looks = [(watch.execution, watch.rule, watch.record_look(now)) for watch in batch]
        try:
            saved = self._deps.store.executions.record_looks(looks)
        except StoreUnavailable:
            for watch, (_, _, previous) in zip(batch, looks, strict=True):
                watch.undo_look(previous)
                self._keep(watch, at=now + STORE_RETRY)
            return None
        return [watch for watch in batch if watch.execution_id in saved]

    def _read_issues(self, batch: list[AckWatch]) -> dict[int, object]:
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

    def _read_readers(self, batch: list[AckWatch]) -> dict[int, object]:
        """Each card's readers (or the error), for the waits whose guard asks Lark."""
        asking = [watch for watch in batch if watch.message_id]
        if not asking:
            return {}
        answers: list[Answer] = self._deps.ports.lark.read_user_ids_each(
            [watch.message_id for watch in asking], READS_AT_ONCE)
        return {watch.execution_id: answer.value if answer.ok else answer.error
                for watch, answer in zip(asking, answers, strict=True)}

    def _keep(self, watch: AckWatch, at: datetime | None = None) -> None:
        """Hold ``watch`` until its next look: ``WINDOW`` before its ``wake_at``, so that the
        looks due close together share a batch; at its deadline exactly (the execution's own
        wake); or at ``at``."""
        look = at or (watch.wake_at if watch.at_deadline else watch.wake_at - WINDOW)
        self._watches[watch.execution_id] = watch
        self._looks[watch.execution_id] = look
        heapq.heappush(self._due, (look, watch.execution_id))

    def _forget(self, execution_id: int) -> None:
        self._watches.pop(execution_id, None)
        self._looks.pop(execution_id, None)

    def _wake(self, watch: AckWatch) -> None:
        self._deps.activity.tell(self._pool, WatchedWake(watch.execution_id))

    def _reads_work(self) -> None:
        if self._failing:
            self._failing = False
            log.info("ACK watcher: the batched Jira search answers again")

    def _reads_fail(self, what: str, exc: DispatcherError) -> None:
        if not self._failing:
            self._failing = True
            log.warning("ACK watcher: %s failed; the waits it covered are woken to read for "
                        "themselves", what, extra={"reason": exc.message})
