"""The client pool's calls as a plain object, without pykka: a call goes to an idle worker or
waits in one FIFO queue, a stopping worker hands its unbegun call on, queue time and call time
are separate limits, and shutdown never lets an unbegun call begin.

The workers are names and an inbox the test empties: each test runs the calls it was handed,
in its own thread, when it chooses. Callers wait in threads of their own; every wait is bounded.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import pytest

from ticket_dispatcher.actors.call_queue import Call, CallQueue, PooledCall
from ticket_dispatcher.errors import CallAbandoned, IntegrationError, LeaseLost, OutcomeUnknown
from ticket_dispatcher.integrations.call_policy import calls_first, first_calls
from ticket_dispatcher.metrics import Metrics

WAIT = 5  # seconds: the bound on every wait for something that should happen at once


@dataclass(frozen=True)
class Worker:
    actor_urn: str


class Inbox:
    """The workers' inboxes: what the queue sent to whom, in order. A worker in ``stopped``
    refuses, as a stopped actor does."""

    def __init__(self) -> None:
        self.sent: list[tuple[Worker, PooledCall]] = []
        self.stopped: set[Worker] = set()
        self._arrived = threading.Semaphore(0)
        self._taken = 0

    def send(self, worker: Worker, pooled: PooledCall) -> bool:
        if worker in self.stopped:
            return False
        self.sent.append((worker, pooled))
        self._arrived.release()
        return True

    def take(self) -> tuple[Worker, PooledCall]:
        """The next call sent, once it has been."""
        assert self._arrived.acquire(timeout=WAIT), "no call was sent to a worker"
        self._taken += 1
        return self.sent[self._taken - 1]

    def recipients(self) -> list[str]:
        return [worker.actor_urn for worker, _ in self.sent]


class Client:
    """A stand-in client that logs what it was asked."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def add(self, a: int, b: int = 0) -> int:
        self.log.append(f"add {a} {b}")
        return a + b

    def record(self, tag: str) -> str:
        self.log.append(tag)
        return tag

    def fail(self, message: str) -> None:
        raise IntegrationError(message, status=502, service="echo")

    def lane(self, tag: str) -> str:
        """Logs whether the call is made as a notification's (first under a budget)."""
        self.log.append(f"{tag} first={first_calls.get()}")
        return tag


class Caller(threading.Thread):
    """One caller in its own thread; keeps its answer or its exception."""

    def __init__(self, call) -> None:
        super().__init__(daemon=True)
        self._call = call
        self.answer = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.answer = self._call()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc

    def result(self):
        self.join(WAIT)
        assert not self.is_alive(), "the caller is still waiting"
        return self.answer, self.error


def start_caller(call) -> Caller:
    caller = Caller(call)
    caller.start()
    return caller


def queue_of(*names: str, inbox: Inbox, call_timeout: float = WAIT,
             queue_timeout: float = WAIT) -> CallQueue[Worker]:
    """A started queue over workers named ``names``; the last one is handed out first."""
    queue = CallQueue("echo", inbox.send, call_timeout=call_timeout,
                      queue_timeout=queue_timeout, metrics=Metrics())
    queue.start(lambda: [Worker(name) for name in names])
    return queue


class QueueProbe(deque):
    """Stands in for the queue's wait queue to tell the test when a caller has joined it."""

    def __init__(self) -> None:
        super().__init__()
        self._joined = threading.Semaphore(0)

    def append(self, item) -> None:
        super().append(item)
        self._joined.release()

    def insert(self, index, item) -> None:
        super().insert(index, item)
        self._joined.release()

    def wait_joined(self) -> None:
        assert self._joined.acquire(timeout=WAIT), "no caller joined the queue"


def probe_queue(queue: CallQueue[Worker]) -> QueueProbe:
    probe = QueueProbe()
    queue._queue = probe
    return probe


@pytest.fixture
def inbox() -> Inbox:
    return Inbox()


@pytest.fixture
def client() -> Client:
    return Client()


def test_a_call_goes_to_an_idle_worker_whose_run_answers_it(inbox, client):
    queue = queue_of("w1", inbox=inbox)

    caller = start_caller(lambda: queue.call(Call.of(Client.add, 2, b=3)))
    worker, pooled = inbox.take()
    queue.run(worker, pooled, client)

    assert caller.result() == (5, None)
    assert client.log == ["add 2 3"]
    stats = queue.stats()
    assert (stats["calls"], stats["busy"], stats["in_flight"]) == (1, 0, 0)


def test_the_client_method_of_the_calls_name_runs_on_whatever_client_the_worker_holds(inbox):
    class StandIn:
        def add(self, a: int, b: int = 0) -> int:
            return -1

    queue = queue_of("w1", inbox=inbox)

    caller = start_caller(lambda: queue.call(Call.of(Client.add, 2)))
    queue.run(*inbox.take(), StandIn())

    assert caller.result() == (-1, None)


def test_a_client_exception_is_the_callers_and_counted_by_class(inbox, client):
    queue = queue_of("w1", inbox=inbox)

    caller = start_caller(lambda: queue.call(Call.of(Client.fail, "no")))
    queue.run(*inbox.take(), client)

    _, error = caller.result()
    assert isinstance(error, IntegrationError) and error.message == "no"
    assert queue.stats()["errors"] == {"IntegrationError": 1}


def test_a_freed_worker_goes_to_the_oldest_queued_caller(inbox, client):
    queue = queue_of("w1", inbox=inbox)
    first = start_caller(lambda: queue.call(Call.of(Client.record, "first")))
    running = inbox.take()
    probe = probe_queue(queue)
    queued = []
    for tag in ("second", "third"):
        queued.append(start_caller(lambda tag=tag: queue.call(Call.of(Client.record, tag))))
        probe.wait_joined()  # each caller is queued before the next one arrives

    queue.run(*running, client)
    queue.run(*inbox.take(), client)
    queue.run(*inbox.take(), client)

    assert [c.result() for c in [first, *queued]] == [
        ("first", None), ("second", None), ("third", None)]
    assert client.log == ["first", "second", "third"]
    assert inbox.recipients() == ["w1", "w1", "w1"]


def test_a_stopped_worker_is_passed_over_for_the_next_idle_one(inbox, client):
    queue = queue_of("w1", "w2", inbox=inbox)
    inbox.stopped.add(Worker("w2"))  # stopped from outside, not yet retired

    caller = start_caller(lambda: queue.call(Call.of(Client.record, "moved")))
    queue.run(*inbox.take(), client)

    assert caller.result() == ("moved", None)
    assert inbox.recipients() == ["w1"]
    assert queue.stats()["actors"] == 1


def test_a_caller_that_gives_up_while_queued_never_makes_its_call(inbox, client):
    queue = queue_of("w1", inbox=inbox, queue_timeout=0.05)
    held = start_caller(lambda: queue.call(Call.of(Client.record, "held")))
    running = inbox.take()

    with pytest.raises(IntegrationError) as caught:
        queue.call(Call.of(Client.record, "late"))

    assert not isinstance(caught.value, OutcomeUnknown)
    assert "no free client within 0.05 s; the call was not made" in caught.value.message
    queue.run(*running, client)
    assert held.result() == ("held", None)
    assert len(inbox.sent) == 1  # the worker went back idle, not to the caller who left
    assert queue.stats()["gave_up_queued"] == 1


def test_a_call_sent_but_not_taken_within_call_timeout_was_not_made(inbox, client):
    queue = queue_of("w1", inbox=inbox, call_timeout=0.05)

    with pytest.raises(IntegrationError) as caught:
        queue.call(Call.of(Client.record, "stuck in an inbox"))
    queue.run(*inbox.take(), client)  # the worker reaches it at last: its caller has left

    assert not isinstance(caught.value, OutcomeUnknown)
    assert "did not take the call within 0.05 s; the call was not made" in caught.value.message
    assert client.log == [] and queue.stats()["calls"] == 0


def test_a_begun_call_past_call_timeout_is_an_unknown_outcome(inbox):
    queue = queue_of("w1", inbox=inbox, call_timeout=0.05)
    entered, release = threading.Event(), threading.Event()

    class Slow:
        def record(self, tag: str) -> str:
            entered.set()
            release.wait(WAIT)
            return tag

    caller = start_caller(lambda: queue.call(Call.of(Slow.record, "slow")))
    running = threading.Thread(target=queue.run, args=(*inbox.take(), Slow()), daemon=True)
    running.start()
    assert entered.wait(WAIT)

    _, error = caller.result()
    assert isinstance(error, OutcomeUnknown) and "may take effect" in error.message
    assert (queue.stats()["busy"], queue.stats()["unknown_outcomes"]) == (1, 1)
    release.set()
    running.join(WAIT)
    assert queue.stats()["busy"] == 0


def test_a_call_whose_caller_guard_fails_when_it_would_begin_is_never_made(inbox, client):
    queue = queue_of("w1", inbox=inbox)

    def guard() -> None:
        raise LeaseLost("the lease ran out")

    caller = start_caller(lambda: queue.call(Call.of(Client.record, "x"), guard))
    queue.run(*inbox.take(), client)

    assert isinstance(caller.result()[1], LeaseLost)
    assert client.log == [] and queue.stats()["calls"] == 0


def test_a_call_sent_but_not_begun_when_abandoned_never_begins(inbox, client):
    queue = queue_of("w1", inbox=inbox)
    caller = start_caller(lambda: queue.call(Call.of(Client.record, "sent")))
    worker, pooled = inbox.take()

    queue.abandon()

    _, error = caller.result()
    assert isinstance(error, CallAbandoned) and "the call was not made" in str(error)
    queue.run(worker, pooled, client)  # the worker takes it from its inbox and skips it
    assert client.log == [] and queue.stats()["calls"] == 0
    with pytest.raises(CallAbandoned):
        queue.call(Call.of(Client.record, "new"))


def test_once_abandoned_a_running_call_sends_no_request():
    queue = CallQueue("echo", Inbox().send, call_timeout=WAIT, queue_timeout=WAIT,
                      metrics=Metrics())
    queue.check_sending(None)  # open: nothing to refuse

    queue.abandon()

    with pytest.raises(CallAbandoned, match="the request was not sent"):
        queue.check_sending(None)


def test_a_call_behind_a_stopping_worker_goes_to_another(inbox, client):
    queue = queue_of("w1", "w2", inbox=inbox)
    caller = start_caller(lambda: queue.call(Call.of(Client.record, "moved")))
    doomed, _ = inbox.take()

    queue.retire(doomed)  # it stops with the call still in its inbox
    queue.run(*inbox.take(), client)

    assert caller.result() == ("moved", None)
    assert inbox.recipients() == ["w2", "w1"]
    assert queue.stats()["actors"] == 1 and queue.stats()["calls"] == 1


def test_when_the_last_worker_stops_every_waiting_call_is_refused_unmade(inbox, client):
    queue = queue_of("w1", inbox=inbox)
    sent = start_caller(lambda: queue.call(Call.of(Client.record, "sent")))
    worker, _ = inbox.take()
    probe = probe_queue(queue)
    queued = start_caller(lambda: queue.call(Call.of(Client.record, "queued")))
    probe.wait_joined()

    queue.retire(worker)

    for caller in (sent, queued):
        _, error = caller.result()
        assert isinstance(error, IntegrationError) and "stopped" in error.message
    assert client.log == []


def test_close_refuses_queued_and_later_calls_and_stops_every_worker(inbox, client):
    queue = queue_of("w1", "w2", inbox=inbox)
    busy = [start_caller(lambda tag=tag: queue.call(Call.of(Client.record, tag)))
            for tag in ("a", "b")]
    running = [inbox.take(), inbox.take()]
    probe = probe_queue(queue)
    queued = start_caller(lambda: queue.call(Call.of(Client.record, "queued")))
    probe.wait_joined()

    stopped = queue.close(lambda worker: worker.actor_urn)

    assert sorted(stopped) == ["w1", "w2"]
    assert "not made" in queued.result()[1].message
    with pytest.raises(IntegrationError, match="stopped"):
        queue.call(Call.of(Client.record, "later"))
    for worker, pooled in running:  # running calls end as they would
        queue.run(worker, pooled, client)
    assert sorted(c.result()[0] for c in busy) == ["a", "b"]
    assert len(inbox.sent) == 2


def test_a_call_before_start_is_refused():
    queue = CallQueue("echo", Inbox().send, call_timeout=WAIT, queue_timeout=WAIT,
                      metrics=Metrics())

    with pytest.raises(IntegrationError, match="not started"):
        queue.call(Call.of(Client.add, 1))


def test_latency_is_call_time_and_the_longest_wait_the_oldest_queued_callers(inbox, client):
    queue = queue_of("w1", inbox=inbox)
    held = start_caller(lambda: queue.call(Call.of(Client.record, "held")))
    running = inbox.take()
    probe = probe_queue(queue)
    queued = start_caller(lambda: queue.call(Call.of(Client.record, "queued")))
    probe.wait_joined()
    probe[0].queued_at -= 60  # as if it had waited a minute for its worker

    assert queue.stats()["longest_wait_seconds"] >= 60
    queue.run(*running, client)
    queue.run(*inbox.take(), client)

    assert held.result()[1] is None and queued.result()[1] is None
    assert queue.stats()["last_latency_ms"] < 60_000
    assert queue.stats()["longest_wait_seconds"] == 0


# --- batches ----------------------------------------------------------------------------------


def test_a_batch_holds_at_most_its_bound_in_the_pool_and_answers_in_order(inbox, client):
    queue = queue_of("w1", "w2", "w3", inbox=inbox)
    batch = start_caller(lambda: queue.call_each(
        [Call.of(Client.add, n) for n in range(3)], at_once=2))

    first, second = inbox.take(), inbox.take()
    assert len(inbox.sent) == 2  # the third waits for one of these to end
    queue.run(*second, client)
    third = inbox.take()
    queue.run(*first, client)
    queue.run(*third, client)

    assert batch.result() == ([(0, None), (1, None), (2, None)], None)
    assert client.log == ["add 1 0", "add 0 0", "add 2 0"]


def test_a_batch_call_queued_past_queue_timeout_is_answered_not_made(inbox, client):
    queue = queue_of("w1", inbox=inbox, queue_timeout=0.05)
    held = start_caller(lambda: queue.call(Call.of(Client.record, "held")))
    running = inbox.take()

    [(answer, error)] = queue.call_each([Call.of(Client.record, "late")], at_once=1)

    assert answer is None and isinstance(error, IntegrationError)
    assert "the call was not made" in error.message
    queue.run(*running, client)
    assert held.result() == ("held", None)
    assert len(inbox.sent) == 1 and queue.stats()["gave_up_queued"] == 1


def test_abandon_ends_a_batch_and_its_unbegun_calls_never_begin(inbox, client):
    queue = queue_of("w1", inbox=inbox)
    batch = start_caller(lambda: queue.call_each(
        [Call.of(Client.record, "first"), Call.of(Client.record, "second")], at_once=1))
    first = inbox.take()

    queue.abandon()

    assert isinstance(batch.result()[1], CallAbandoned)
    queue.run(*first, client)  # skipped: its caller has left
    assert client.log == [] and len(inbox.sent) == 1


def test_a_notifications_call_waits_ahead_of_ordinary_ones_and_is_made_as_its(inbox, client):
    queue = queue_of("w1", inbox=inbox)
    probe = probe_queue(queue)
    running = start_caller(lambda: queue.call(Call.of(Client.lane, "running")))
    busy = inbox.take()
    ordinary = start_caller(lambda: queue.call(Call.of(Client.lane, "ordinary")))
    probe.wait_joined()

    def notification() -> str:
        with calls_first():
            return queue.call(Call.of(Client.lane, "notification"))

    first = start_caller(notification)
    probe.wait_joined()
    queue.run(*busy, client)
    queue.run(*inbox.take(), client)
    queue.run(*inbox.take(), client)

    assert [c.result() for c in (running, first, ordinary)] == [
        ("running", None), ("notification", None), ("ordinary", None)]
    assert client.log == ["running first=False", "notification first=True",
                          "ordinary first=False"]
