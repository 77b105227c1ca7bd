"""Execution workers: the pool's slots as long-lived actors. An execution runs on a worker the
pool already started when one is free, a message about an earlier run is ignored, a failure
past a run's own guard is a crash the supervisor restarts, and the shutdown stops every
worker, idle ones included."""

from __future__ import annotations

import pykka

from tests.factories import OPERATOR_AUTHOR
from tests.fakes import GateAction, RecordingAction, issue
from tests.harness import rule
from ticket_dispatcher.actors.execution import ExecutionRun, ExecutionWorker
from ticket_dispatcher.actors.messages import Cancel
from ticket_dispatcher.domain.execution import ExecutionStatus


def workers() -> list[pykka.ActorRef]:
    return pykka.ActorRegistry.get_by_class(ExecutionWorker)


def issues(h, count: int) -> None:
    for n in range(1, count + 1):
        h.jira.put(issue(key=f"TCID-{n}"))


def test_executions_one_after_another_run_on_the_one_worker_started(make_harness):
    noop = RecordingAction()
    h = make_harness(noop)  # ten slots, one execution at a time
    h.policy(rule("test_noop"))
    issues(h, 5)

    triggers = [h.post_trigger(f"TCID-{n}") for n in range(1, 6)]

    executions = [h.execution(h.trigger(t.id).execution_ids[0]) for t in triggers]
    assert all(e.status is ExecutionStatus.SUCCEEDED for e in executions)
    assert len(workers()) == 1


def test_as_many_workers_as_executions_ran_at_once(make_harness):
    gate = GateAction()
    h = make_harness(gate)
    h.policy(rule("test_gate"))
    issues(h, 4)

    for n in range(1, 4):
        h.post_trigger(f"TCID-{n}", settle=False)
    gate.wait_entered(3)
    started = len(workers())
    gate.open()
    h.wait_idle()
    h.post_trigger("TCID-4")

    assert started == 3
    assert len(workers()) == 3  # the fourth ran on one of them


def test_a_cancel_about_an_earlier_run_leaves_the_workers_next_execution_alone(make_harness):
    gate = GateAction()
    h = make_harness(gate, slots=1)
    h.policy(rule("test_gate"))
    issues(h, 2)
    h.post_trigger("TCID-1", settle=False)
    gate.wait_entered(1)
    gate.open()
    h.wait_idle()  # the first start of this runtime, run 1, has ended
    gate.close()

    second = h.post_trigger("TCID-2", settle=False)
    gate.wait_entered(2)
    [worker] = workers()
    worker.tell(Cancel("meant for the first run", 1))
    gate.open()
    h.wait_idle()

    [execution_id] = h.trigger(second.id).execution_ids
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert workers() == [worker]


def test_a_failure_past_a_runs_guard_is_a_crash_the_supervisor_restarts(make_harness,
                                                                         monkeypatch):
    noop = RecordingAction()
    h = make_harness(noop, slots=1)
    h.policy(rule("test_noop"))
    step, failed = ExecutionRun.step, []

    def fails_once(run: ExecutionRun) -> None:
        if not failed:
            failed.append(run.execution_id)
            raise RuntimeError("past the guard")
        step(run)

    monkeypatch.setattr(ExecutionRun, "step", fails_once)
    trigger = h.post_trigger()

    [execution_id] = h.trigger(trigger.id).execution_ids
    execution = h.execution(execution_id)
    assert failed == [execution_id]
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.restart_count == 1
    assert len(workers()) == 1  # the worker went on


def test_the_shutdown_stops_every_worker_idle_ones_included(make_harness):
    gate = GateAction()
    h = make_harness(gate)
    h.policy(rule("test_gate"))
    issues(h, 2)
    h.post_trigger("TCID-1", settle=False)
    h.post_trigger("TCID-2", settle=False)
    gate.wait_entered(2)
    gate.open()
    h.wait_idle()
    assert len(workers()) == 2

    assert h.runtime.stop(timeout=10)
    h.runtime = None

    assert workers() == []


def test_a_run_takes_its_steps_in_one_message_while_nothing_else_is_told(make_harness,
                                                                       monkeypatch):
    """Nothing waits in the worker's inbox: its steps (start, rule, each action, the end) are
    taken one after another in the message that began the run, with no ``NextStep``."""
    h = make_harness(RecordingAction("test_first"), RecordingAction("test_second"))
    h.policy(rule("test_first", "test_second"))
    issues(h, 1)
    told = h.record_tells(monkeypatch, ExecutionWorker)
    trigger = h.post_trigger("TCID-1")

    [execution_id] = h.trigger(trigger.id).execution_ids
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert [type(message).__name__ for message in told] == ["RunExecution"]


def test_a_message_waiting_in_the_inbox_is_handled_before_the_run_s_next_step(make_harness):
    """A cancel told while a step runs is seen before the next step: the run ends cancelled
    and the next action never runs."""
    gate = GateAction()
    after = RecordingAction("test_after")
    h = make_harness(gate, after)
    h.policy(rule("test_gate", "test_after"))
    issues(h, 1)
    trigger = h.post_trigger("TCID-1", settle=False)
    gate.wait_entered(1)
    h.wait_until(lambda: h.trigger(trigger.id).execution_ids)
    [execution_id] = h.trigger(trigger.id).execution_ids

    h.runtime.cancel(execution_id, "an operator cancelled it", by=OPERATOR_AUTHOR)
    gate.open()
    h.wait_idle()

    execution = h.execution(execution_id)
    assert execution.status is ExecutionStatus.FAILED
    assert execution.failure_code == "cancelled"
    assert after.calls == []
