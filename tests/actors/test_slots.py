"""The execution pool's decisions (actors/slots.py), without an actor: which execution takes
the next free slot, which report counts, what parks and when it wakes, and what the sweeper
resumes. Built with a ManualClock and fake workers; no thread starts."""

from __future__ import annotations

from datetime import timedelta

from tests.clocks import ManualClock
from tests.factories import OPERATOR_AUTHOR
from ticket_dispatcher.actors.leases import Hold, Position
from ticket_dispatcher.actors.messages import Cancellation
from ticket_dispatcher.actors.slots import AfterPark, ExecutionSlots
from ticket_dispatcher.domain.execution import Lease
from ticket_dispatcher.domain.matching import NOTIFICATION_LANE, ORDINARY_LANE

LEASE = timedelta(seconds=30)


class FakeWorker:
    def __init__(self, name: str):
        self.name = name
        self.alive = True
        self.runs: list[tuple[int, int]] = []  # (execution id, run) handed to it

    def is_alive(self) -> bool:
        return self.alive


def slots(count: int = 2, share: int = 0) -> tuple[ExecutionSlots[FakeWorker], ManualClock]:
    return ExecutionSlots(count, share), ManualClock()


def start_all(pool: ExecutionSlots[FakeWorker], clock: ManualClock) -> list[int]:
    """Start what the free slots take, each on a new fake worker; the ids started."""
    started = []
    while (execution_id := pool.next_start()) is not None:
        worker = FakeWorker(f"w{execution_id}")
        pool.start(execution_id, clock.now(), lambda run, hold, w=worker: w)
        started.append(execution_id)
    return started


def test_the_free_slots_take_the_queue_in_order_and_the_rest_waits():
    pool, clock = slots(2)
    for execution_id in (1, 2, 3):
        pool.enqueue(execution_id, clock.now())

    assert start_all(pool, clock) == [1, 2]
    assert (len(pool.queue), pool.free(), pool.free_now()) == (1, 0, 0)


def test_a_notification_takes_the_next_free_slot_before_a_backlog_of_ordinary_work():
    pool, clock = slots(1, share=4)
    pool.enqueue(1, clock.now())
    start_all(pool, clock)
    for execution_id in (2, 3, 4):
        pool.enqueue(execution_id, clock.now(), lane=ORDINARY_LANE)
    pool.enqueue(9, clock.now(), lane=NOTIFICATION_LANE)

    pool.release(1, pool.running[1].run)

    assert start_all(pool, clock) == [9]


def test_an_execution_queued_or_running_is_not_queued_again():
    pool, clock = slots(1)
    assert pool.enqueue(1, clock.now())
    start_all(pool, clock)

    assert not pool.enqueue(1, clock.now())  # running
    assert pool.enqueue(2, clock.now())
    assert not pool.enqueue(2, clock.now())  # queued
    assert len(pool.queue) == 1


def test_a_report_of_a_replaced_run_is_ignored_and_a_freed_worker_is_kept_for_the_next():
    pool, clock = slots(1)
    pool.enqueue(1, clock.now())
    start_all(pool, clock)
    run = pool.running[1].run

    assert not pool.release(1, run + 1)  # another run's report
    assert pool.release(1, run)
    assert [w.name for w in pool.idle] == ["w1"]
    assert pool.free_now() == 1


def test_a_dead_worker_is_not_kept():
    pool, clock = slots(1)
    pool.enqueue(1, clock.now())
    start_all(pool, clock)
    pool.running[1].worker.alive = False

    pool.release(1, pool.running[1].run)

    assert pool.idle == []


def test_each_start_is_a_new_run_with_its_own_hold():
    pool, clock = slots(1)
    handed: list[tuple[int, Hold]] = []

    def hand(run: int, hold: Hold) -> FakeWorker:
        handed.append((run, hold))
        return FakeWorker("w")

    for _ in range(2):
        pool.enqueue(1, clock.now())
        pool.start(pool.next_start() or 0, clock.now(), hand)
        pool.release(1, pool.running[1].run)

    assert [run for run, _ in handed] == [1, 2]
    assert handed[0][1] is not handed[1][1]


def test_a_parked_execution_wakes_at_its_time_with_one_timer_for_the_soonest():
    pool, clock = slots(2)
    now = clock.now()
    assert pool.parked_run(1, now + timedelta(seconds=60), now, watched=False) \
        is AfterPark.PARKED
    assert pool.wake_timer() == now + timedelta(seconds=60)
    pool.park(2, now + timedelta(seconds=10))
    assert pool.wake_timer() == now + timedelta(seconds=10)  # sooner: a new timer
    pool.park(3, now + timedelta(seconds=30))
    assert pool.wake_timer() is None  # the armed one fires sooner

    assert pool.wake_due(clock.advance(10)) == [2]
    assert pool.wake_timer() == now + timedelta(seconds=30)
    assert pool.wake_due(clock.advance(50)) == [3, 1]
    assert pool.parked == {}


def test_a_wait_the_watcher_can_keep_is_left_to_it_and_a_cancelled_one_runs_to_end():
    pool, clock = slots(2)
    now, later = clock.now(), clock.now() + timedelta(minutes=5)

    assert pool.parked_run(1, later, now, watched=True) is AfterPark.WATCHED
    assert pool.wake_timer() is None  # no timer here: the watcher wakes it
    pool.cancels[2] = Cancellation("operator", OPERATOR_AUTHOR)
    assert pool.parked_run(2, later, now, watched=True) is AfterPark.QUEUED
    assert 2 in pool.queue


def test_a_watched_wake_runs_the_wait_unless_it_was_cancelled_meanwhile():
    pool, clock = slots(2)
    pool.parked_run(1, clock.now() + timedelta(minutes=5), clock.now(), watched=True)
    pool.parked_run(2, clock.now() + timedelta(minutes=5), clock.now(), watched=True)
    pool.cancelled(2)

    assert pool.watched_wake(1, clock.now(), adopted=False)
    assert not pool.watched_wake(2, clock.now(), adopted=False)
    assert pool.watched_wake(3, clock.now(), adopted=True)  # taken from the store


def test_the_watchers_rescheduling_moves_or_forgets_the_waits():
    pool, clock = slots(2)
    later = clock.now() + timedelta(minutes=5)
    pool.parked_run(1, later, clock.now(), watched=True)
    pool.parked_run(2, later, clock.now(), watched=True)

    pool.rescheduled({1: later + timedelta(minutes=1), 2: None, 3: later, 4: later}, {4})

    assert pool.parked == {1: later + timedelta(minutes=1), 4: later}


def test_an_interrupted_run_is_retried_after_a_backoff_that_grows_while_it_makes_no_progress():
    pool, clock = slots(1)
    waits = []
    for _ in range(3):
        pool.enqueue(1, clock.now())
        start_all(pool, clock)
        run = pool.running[1].run
        pool.interrupted(1, run)
        assert pool.release(1, run)
        due, attempt = pool.retry_at(1, clock.now())
        waits.append((attempt, due - clock.now()))
        assert pool.retry_due(1, clock.now())
        assert pool.retrying == {}

    assert [attempt for attempt, _ in waits] == [1, 2, 3]
    assert timedelta(milliseconds=250) <= waits[0][1] <= timedelta(milliseconds=500)
    assert timedelta(seconds=1) <= waits[2][1] <= timedelta(seconds=2)


def test_a_run_that_advanced_starts_a_new_series_of_interruptions():
    pool, clock = slots(1)
    pool.interruptions[1] = 4
    pool.enqueue(1, clock.now())
    start_all(pool, clock)
    running = pool.running[1]
    running.hold.position = Position("TCID-1", 1, "rule", "assign")

    pool.interrupted(1, running.run)
    pool.release(1, running.run)

    assert pool.retry_at(1, clock.now())[1] == 1


def test_a_retry_timer_of_an_execution_already_running_again_does_nothing():
    pool, clock = slots(1)
    pool.retrying[1] = clock.now()
    pool.enqueue(1, clock.now())  # queued by something else meanwhile: its retry is dropped

    assert not pool.retry_due(1, clock.now())


def test_boot_recovery_queues_what_is_due_and_parks_or_watches_the_rest():
    pool, clock = slots(5)
    now = clock.now()
    later = now + timedelta(minutes=1)
    found = [(1, None), (2, now - timedelta(seconds=1)), (3, later)]

    assert pool.recover(found, now, watching=True) == [(3, later)]
    assert (list(pool.parked), pool.wake_timer()) == ([3], None)

    pool, clock = slots(5)
    assert pool.recover(found, now, watching=False) == []
    assert start_all(pool, clock) == [1, 2]
    assert pool.wake_timer() == later


def test_the_sweeper_resumes_what_nobody_holds_and_replaces_a_hung_run():
    pool, clock = slots(3)
    for execution_id in (1, 2):
        pool.enqueue(execution_id, clock.now())
    start_all(pool, clock)
    pool.park(3, clock.now() + timedelta(hours=1))
    hung = pool.running[1]
    hung.hold.claimed(Lease("me", 1), clock.now(), LEASE)
    clock.advance(LEASE.total_seconds() + 1)
    pool.running[2].hold.progress_at = clock.now()  # showed progress

    given_up = pool.sweep(1, clock.now(), LEASE)

    assert given_up is hung.worker and hung.hold.lost
    assert 1 in pool.queue and 1 not in pool.running
    assert pool.sweep(2, clock.now(), LEASE) is None and 2 in pool.running
    assert pool.sweep(3, clock.now(), LEASE) is None and 3 not in pool.queue  # parked here
    assert pool.sweep(4, clock.now(), LEASE) is None and 4 in pool.queue
    reasons = [r["reason"] for r in pool.view(clock.now()).figures["sweeper"]["recent"]]
    assert reasons == ["no actor held it", "hung actor replaced"]


def test_only_claimed_runs_that_show_progress_are_renewed():
    pool, clock = slots(3)
    for execution_id in (1, 2, 3):
        pool.enqueue(execution_id, clock.now())
    start_all(pool, clock)
    for execution_id in (1, 2):
        pool.running[execution_id].hold.claimed(Lease("me", 1),
                                                clock.now(), LEASE)
    clock.advance(LEASE.total_seconds() + 1)
    pool.running[2].hold.progress_at = clock.now()

    assert list(pool.renewable(clock.now(), LEASE)) == [2]  # 1 hung, 3 not claimed yet


def test_a_claim_starts_what_is_not_running_here_and_sets_one_timer_for_the_soonest_wait():
    pool, clock = slots(3)
    pool.enqueue(1, clock.now())
    start_all(pool, clock)
    pool.park(2, clock.now() + timedelta(hours=1))
    soon = clock.now() + timedelta(seconds=5)

    assert pool.claimed([1, 2, 3], more=False) == [2, 3]
    assert 2 not in pool.parked and not pool.more
    assert pool.pull_timer(soon) == soon
    assert pool.pull_timer(soon + timedelta(seconds=1)) is None
    pool.pulled(clock.advance(5))
    assert pool.more and pool.pull_at is None


def test_the_admin_view_lists_the_runs_and_the_soonest_parked():
    pool, clock = slots(2)
    pool.enqueue(1, clock.now())
    start_all(pool, clock)
    pool.park(7, clock.now() + timedelta(minutes=2))
    pool.park(8, clock.now() + timedelta(minutes=1))

    view = pool.view(clock.advance(3))

    assert view.figures["busy"] == 1 and view.figures["parked"] == 2
    assert view.running[0]["execution_id"] == 1 and view.running[0]["lease"] is None
    assert [p["execution_id"] for p in view.parked] == [8, 7]
