"""Runtime edges through the harness: a slow peer holds only its own caller, and a shutdown
keeps one deadline and records no business failure."""

from __future__ import annotations

import threading
import time

from tests.fakes import FakeJira, issue
from tests.harness import Harness, assign, rule
from ticket_dispatcher.actors.client_ports import JiraPool
from ticket_dispatcher.domain.execution import ActionStatus, ExecutionStatus, TriggerStatus
from ticket_dispatcher.metrics import Metrics

HOLD = 20  # seconds a gate waits at most, so a broken test fails instead of hanging


class GatedJira(FakeJira):
    """A FakeJira whose loads of, or assignments to, chosen issues wait for the test."""

    def __init__(self, *issues):
        super().__init__(*issues)
        self.gate = threading.Event()
        self.held_loads: set[str] = set()
        self.held_assigns: set[str] = set()
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def load_issue(self, key: str):
        if key in self.held_loads:
            self.entered.set()
            assert self.gate.wait(HOLD), "the test never opened the gate"
        with self._lock:
            return super().load_issue(key)

    def assign(self, key: str, account_id: str) -> None:
        if key in self.held_assigns:
            self.entered.set()
            assert self.gate.wait(HOLD), "the test never opened the gate"
        with self._lock:
            super().assign(key, account_id)

    def assign_and_label(self, key: str, account_id: str, remove_labels=(), *,
                         l2: bool = False) -> bool:
        if key in self.held_assigns:
            self.entered.set()
            assert self.gate.wait(HOLD), "the test never opened the gate"
        with self._lock:
            return super().assign_and_label(key, account_id, remove_labels, l2=l2)


def _harness(store, jira: GatedJira, **options) -> Harness:
    h = Harness(store, jira=jira, **options).start()
    h.store.engineers.put("alice@example.com", dispatch_enabled=True,
                          jira_account_id="acc-alice", now=h.clock.now())
    jira.add_user("alice@example.com", "acc-alice")
    h.policy(rule(assign("alice@example.com")))
    return h


def test_a_trigger_whose_issue_load_hangs_holds_only_itself(store):
    jira = GatedJira(*(issue(key=f"TCID-{n}") for n in range(1, 13)))
    jira.held_loads.add("TCID-1")
    h = _harness(store, jira, trigger_actors="4")
    try:
        stuck = h.post_trigger("TCID-1", settle=False)
        assert jira.entered.wait(HOLD)
        others = [h.post_trigger(f"TCID-{n}", settle=False) for n in range(2, 13)]

        h.wait_until(lambda: all(h.trigger(t.id).status is TriggerStatus.COMPLETED
                                 for t in others))
        assert h.trigger(stuck.id).status is TriggerStatus.PROCESSING
        jira.gate.set()
        h.wait_idle()
        assert h.trigger(stuck.id).status is TriggerStatus.COMPLETED
    finally:
        jira.gate.set()
        h.stop()


def test_shutdown_with_a_call_stuck_keeps_its_deadline_and_resumes_after_restart(store):
    jira = GatedJira(issue(key="TCID-1"))
    jira.held_assigns.add("TCID-1")
    pool = JiraPool("jira", lambda: jira, 2, call_timeout=60, queue_timeout=60,
                    metrics=Metrics()).start()
    h = _harness(store, jira, slots=2)
    h.stop()
    h.jira = pool  # the runtime talks to Jira through a real client pool, as in production
    h.start()
    try:
        trigger = h.post_trigger("TCID-1", settle=False)
        assert jira.entered.wait(HOLD)

        started = time.monotonic()
        assert h.runtime.stop(timeout=3), "the runtime did not stop within its deadline"
        took = time.monotonic() - started
        h.runtime = None

        assert took < 3
        [execution_id] = h.trigger(trigger.id).execution_ids
        execution = h.execution(execution_id)
        assert execution.status is ExecutionStatus.EXECUTING  # not a business failure
        [action] = execution.rule_executions[0].action_executions
        assert action.status is ActionStatus.EXECUTING and not action.error

        jira.gate.set()  # the abandoned call lands at Jira after all
        h.jira = jira
        h.start()
        h.wait_idle()

        finished = h.execution(execution_id)
        assert finished.status is ExecutionStatus.SUCCEEDED, finished.failure_reason
        assert jira.assignments() == [("TCID-1", "acc-alice")]  # not twice
    finally:
        jira.gate.set()
        h.stop()
        pool.stop()
