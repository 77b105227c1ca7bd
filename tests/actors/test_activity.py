"""Activity is tracked per told message: begun when sent, ended once when handled."""

from __future__ import annotations

import threading

import pykka
import pytest

from ticket_dispatcher.actors.activity import Activity, ActivityError, InFlight, TrackedActor


class Blocking(TrackedActor):
    """Handles each message by waiting for the test to open the gate."""

    def __init__(self, gate: threading.Event, entered: threading.Event, activity: Activity):
        super().__init__(activity)
        self._gate, self._entered = gate, entered
        self.handled: list[str] = []

    def handle(self, message):
        self._entered.set()
        assert self._gate.wait(10), "the test never opened the gate"
        self.handled.append(message)


@pytest.fixture
def blocking():
    gate, entered, activity = threading.Event(), threading.Event(), Activity()
    ref = Blocking.start(gate, entered, activity)
    yield ref, gate, entered, activity
    gate.set()
    ref.stop(timeout=10)


def test_a_told_message_is_in_flight_until_its_handler_returns(blocking):
    ref, gate, entered, activity = blocking

    assert activity.tell(ref, "work")
    assert entered.wait(10)
    assert activity.in_flight == 1 and not activity.wait_idle(0)
    gate.set()

    assert activity.wait_idle(10)
    assert activity.in_flight == 0


def test_ending_the_same_message_twice_is_an_error():
    activity = Activity()
    unit = InFlight(activity)
    with activity._cond:  # counted, as Activity.tell counts it
        activity._count += 1
    unit.end()

    with pytest.raises(ActivityError):
        unit.end()
    assert activity.in_flight == 0


def test_a_message_to_a_stopped_actor_is_not_left_in_flight(blocking):
    ref, gate, _, activity = blocking
    gate.set()
    ref.stop(timeout=10)

    assert activity.tell(ref, "late") is False
    assert activity.in_flight == 0


class Failing(TrackedActor):
    """Crashes on its first message, while more wait in its inbox."""

    def __init__(self, gate: threading.Event, entered: threading.Event, activity: Activity):
        super().__init__(activity)
        self._gate, self._entered = gate, entered

    def handle(self, message):
        self._entered.set()
        assert self._gate.wait(10), "the test never opened the gate"
        raise RuntimeError("boom")


def test_messages_left_in_the_inbox_of_a_crashed_actor_end_their_activity():
    gate, entered, activity = threading.Event(), threading.Event(), Activity()
    ref = Failing.start(gate, entered, activity)
    activity.tell(ref, "first")
    assert entered.wait(10)
    activity.tell(ref, "second")
    activity.tell(ref, "third")

    gate.set()

    assert activity.wait_idle(10)
    assert not ref.is_alive()


class Counter(TrackedActor):
    """Counts the told messages it handled; an ask answers the count."""

    def __init__(self, activity: Activity):
        super().__init__(activity)
        self.handled = 0

    def handle(self, message):
        if message == "count?":
            return self.handled
        self.handled += 1
        return None


def test_messages_left_in_the_inbox_of_a_stopped_actor_end_their_activity(blocking):
    ref, gate, entered, activity = blocking
    activity.tell(ref, "first")
    assert entered.wait(10)
    activity.tell(ref, "second")
    stopping = ref.stop(block=False)  # behind "second" in the inbox
    activity.tell(ref, "third")  # behind the stop: pykka drops it unhandled

    gate.set()

    assert activity.wait_idle(10)
    stopping.get(timeout=10)
    assert not ref.is_alive() and activity.in_flight == 0


def test_an_ask_behind_a_stop_is_answered_that_the_actor_is_dead(blocking):
    ref, gate, entered, activity = blocking
    activity.tell(ref, "first")
    assert entered.wait(10)
    ref.stop(block=False)
    answer = ref.ask("late question", block=False)

    gate.set()

    with pytest.raises(pykka.ActorDeadError):
        answer.get(timeout=10)


def test_a_condition_that_asks_an_actor_holds_once_its_messages_are_handled():
    """The condition is checked without the activity's lock: the actor it asks ends each
    told message's activity under that lock, so checking with it held would stall both."""
    activity = Activity()
    ref = Counter.start(activity)
    try:
        for _ in range(50):
            activity.tell(ref, "work")

        assert activity.wait_for(lambda: ref.ask("count?", timeout=5) == 50, timeout=10)
        assert activity.wait_for(lambda: False, timeout=0.05) is False
    finally:
        ref.stop(timeout=10)
