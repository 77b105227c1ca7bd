"""Trigger requests before the start of new triggers: a trigger actor waits, for at most
``intake_priority``, while trigger requests are being accepted; nothing already started waits.

Waiting for the actors is the bounded ``wait_until``; the only time that passes for real is the
product's own bound, in the tests that are about it.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes import RecordingAction
from tests.harness import rule
from tests.process import wait_until
from ticket_dispatcher.actors.intake import IntakePriority
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus
from ticket_dispatcher.metrics import PREFIX

BOUND = 10  # seconds: the longest any wait of these tests may take before it fails


class Turn:
    """``wait_turn`` on a thread of its own, as a trigger actor calls it."""

    def __init__(self, gate: IntakePriority):
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(gate,), daemon=True)
        self._thread.start()

    def _run(self, gate: IntakePriority) -> None:
        gate.wait_turn()
        self.done.set()


# -- the gate alone ----------------------------------------------------------------------------

def test_a_turn_is_at_once_when_no_request_is_being_accepted():
    held = []
    gate = IntakePriority(BOUND, on_held=held.append)
    with gate.accepting():
        pass

    assert Turn(gate).done.wait(BOUND)
    assert held == []


def test_a_turn_waits_until_every_request_being_accepted_is_answered():
    held = []
    gate = IntakePriority(BOUND * 3, on_held=held.append)
    first, second = gate.accepting(), gate.accepting()
    first.__enter__()
    second.__enter__()
    turn = Turn(gate)
    wait_until(lambda: gate.waiting == 1, BOUND, "a turn waits")

    first.__exit__(None, None, None)
    assert not turn.done.is_set() and gate.waiting == 1  # one is still being accepted
    second.__exit__(None, None, None)

    assert turn.done.wait(BOUND)
    assert len(held) == 1 and 0 <= held[0] < BOUND * 3
    assert gate.waiting == 0


def test_a_request_that_fails_ends_its_acceptance_too():
    gate = IntakePriority(BOUND * 3)
    with pytest.raises(RuntimeError), gate.accepting():
        turn = Turn(gate)
        wait_until(lambda: gate.waiting == 1, BOUND, "a turn waits")
        raise RuntimeError("the insert failed")

    assert turn.done.wait(BOUND)


def test_a_stream_that_never_pauses_holds_a_turn_for_the_bound_only():
    held = []
    gate = IntakePriority(0.05, on_held=held.append)
    with gate.accepting():
        started = time.monotonic()
        gate.wait_turn()
        waited = time.monotonic() - started

    assert 0.05 <= waited < BOUND
    assert len(held) == 1 and held[0] >= 0.05


def test_a_bound_of_zero_never_waits():
    held = []
    gate = IntakePriority(0, on_held=held.append)
    with gate.accepting():
        assert Turn(gate).done.wait(BOUND)
    assert held == []


def test_stop_ends_every_wait_and_no_turn_waits_after_it():
    gate = IntakePriority(BOUND * 3)
    with gate.accepting():
        turns = [Turn(gate), Turn(gate)]
        wait_until(lambda: gate.waiting == 2, BOUND, "both turns wait")
        gate.stop()
        assert all(turn.done.wait(BOUND) for turn in turns)
        assert Turn(gate).done.wait(BOUND)


# -- in the runtime ------------------------------------------------------------------------------

def held_seconds(harness) -> float:
    return harness.metrics.registry.get_sample_value(
        PREFIX + "trigger_intake_priority_seconds_total") or 0.0


def test_a_trigger_starts_once_the_requests_being_accepted_are_answered(make_harness):
    h = make_harness(RecordingAction(), intake_priority="10s")
    h.policy(rule("test_noop"))
    intake = h.runtime.deps.intake

    with intake.accepting():  # another trigger request, still being accepted
        posted = h.post_trigger("TCID-1", settle=False)
        wait_until(lambda: intake.waiting == 1, BOUND, "the trigger actor waits")
        assert h.trigger(posted.id).status is TriggerStatus.PENDING  # acknowledged, not claimed
        actors = h.runtime.status()["trigger_actors"]  # what /admin/actors shows
        assert actors["busy"] == 1 and actors["waiting_for_intake"] == 1
    h.wait_idle()
    assert h.runtime.status()["trigger_actors"]["waiting_for_intake"] == 0

    trigger = h.trigger(posted.id)
    assert trigger.status is TriggerStatus.COMPLETED
    [execution] = [h.execution(i) for i in trigger.execution_ids]
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert 0 < held_seconds(h) < BOUND


def test_with_intake_priority_zero_a_trigger_never_waits(make_harness):
    h = make_harness(RecordingAction(), intake_priority="0s")
    h.policy(rule("test_noop"))

    with h.runtime.deps.intake.accepting():
        trigger = h.post_trigger("TCID-1")  # settles while the other request is accepted

    assert trigger.status is TriggerStatus.COMPLETED
    assert held_seconds(h) == 0


def test_started_executions_never_wait_for_the_intake(make_harness):
    h = make_harness(RecordingAction("test_wait", park_for=60), intake_priority="10s")
    h.policy(rule("test_wait"))
    [execution_id] = h.post_trigger("TCID-1").execution_ids
    assert h.execution(execution_id).status is ExecutionStatus.EXECUTING  # parked for 60 s

    with h.runtime.deps.intake.accepting():
        h.advance(61)  # its timer fires and it runs to the end meanwhile
        assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert held_seconds(h) == 0


def test_a_stop_ends_the_wait_of_a_trigger_and_leaves_it_for_the_next_boot(make_harness):
    h = make_harness(RecordingAction(), intake_priority="10s")
    h.policy(rule("test_noop"))
    intake = h.runtime.deps.intake

    with intake.accepting():
        posted = h.post_trigger("TCID-1", settle=False)
        wait_until(lambda: intake.waiting == 1, BOUND, "the trigger actor waits")
        started = time.monotonic()
        assert h.runtime.stop(timeout=5)
        assert time.monotonic() - started < 5
    assert h.trigger(posted.id).status is TriggerStatus.PENDING

    h.start()  # the next boot processes it
    h.wait_idle()
    assert h.trigger(posted.id).status is TriggerStatus.COMPLETED
