"""Assignments through the whole runtime: round-robin fairness and concurrent dispatch state,
on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from tests.fakes import FakeJira, issue
from tests.harness import assign, rule
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus

ENGINEERS = ("a@example.com", "b@example.com", "c@example.com")
BOUND = 10  # seconds: the longest a held read waits before the test fails


def staff(h) -> None:
    for email in ENGINEERS:
        h.store.engineers.put(email, dispatch_enabled=True, now=h.clock.now())
        h.jira.add_user(email)


def test_round_robin_spreads_thirty_dispatches_evenly(make_harness):
    h = make_harness()
    staff(h)
    h.policy(rule(assign(*ENGINEERS)))

    for n in range(1, 31):
        h.jira.put(issue(key=f"TCID-{n}"))
        h.post_trigger(f"TCID-{n}")
        h.clock.advance(1)  # dispatches happen at distinct times

    assignees = Counter(i.assignee.email for i in h.jira.issues.values())
    assert assignees == {email: 10 for email in ENGINEERS}
    assert all(e.status is ExecutionStatus.SUCCEEDED for e in h.executions())


def test_concurrent_dispatches_lose_no_engineer_state(make_harness):
    h = make_harness(slots=10)
    staff(h)
    h.policy(rule(assign(*ENGINEERS)))
    keys = [f"TCID-{n}" for n in range(1, 11)]
    for key in keys:
        h.jira.put(issue(key=key))

    for key in keys:
        h.post_trigger(key, settle=False)
    h.wait_idle()

    assert all(e.status is ExecutionStatus.SUCCEEDED for e in h.executions())
    assigned: dict[str, set[str]] = {}
    for key, account_id in h.jira.assignments():
        assigned.setdefault(h.jira.users[account_id].email, set()).add(key)
    assert sum(len(keys) for keys in assigned.values()) == 10
    for email, issues in assigned.items():
        engineer = h.store.engineers.get(email)
        assert engineer.last_dispatched_at is not None
        assert engineer.last_dispatched_issue in issues
        assert engineer.jira_account_id  # the cached account survived the concurrent updates


def test_dry_run_plans_an_assignment_but_never_writes_to_jira(make_harness):
    h = make_harness()
    staff(h)
    policy = h.policy(rule(assign(*ENGINEERS)))

    trigger = h.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {}})

    execution = h.execution(trigger.execution_ids[0])
    context = execution.rule_executions[0].action_executions[0].context["assign"]
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert context["assignee"] == "a@example.com"
    assert h.jira.writes == []
    assert h.store.engineers.get("a@example.com").last_dispatched_at is None


def test_no_candidates_fails_the_execution_and_keeps_the_reason(make_harness):
    h = make_harness()
    h.policy(rule(assign("nobody@example.com")))

    execution = h.execution(h.post_trigger().execution_ids[0])

    assert execution.failure_code == "no_candidates"
    context = execution.rule_executions[0].action_executions[0].context["assign"]
    assert "nobody@example.com" in context["reason"]


class FirstReadHeld(FakeJira):
    """Jira whose first read of an issue answers as the issue was when it was read, but only
    once the test opens the gate: that trigger's read is in flight meanwhile."""

    def __init__(self, *issues):
        super().__init__(*issues)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def load_issue(self, key):
        found = super().load_issue(key)
        if not self.entered.is_set():
            self.entered.set()
            assert self.gate.wait(BOUND), "the test never opened the gate"
        return found


@pytest.mark.parametrize("loaded", [True, False], ids=["versions loaded", "fresh replica"])
def test_an_execution_whose_issue_lost_the_required_label_since_its_trigger_does_nothing(
        make_harness, monkeypatch, loaded):
    """The interleaving: two copies of one trigger (a request stored late by a paused replica,
    and the client's re-send) processed side by side. The first copy's trigger read the issue
    with ``auto-dispatch``; the second copy's execution assigned it and removed the label; the
    first copy's execution, created once the second had ended, starts on an issue without the
    label. Its trigger's read is not reused (an execution of the issue ran since it began): it
    reads the issue, and assigns nothing: its rules are not matched, for that reason."""
    h = make_harness(jira=FirstReadHeld(issue(key="TCID-7")))
    staff(h)
    h.policy(rule(assign(*ENGINEERS)), labels=("auto-dispatch",))
    if not loaded:  # as in a replica that matched no trigger since it started (shared mode)
        monkeypatch.setattr(h.store.policies, "known", lambda policy_id: None)
    first = h.post_trigger("TCID-7", settle=False)
    assert h.jira.entered.wait(BOUND)

    second = h.post_trigger("TCID-7", settle=False)
    h.wait_until(lambda: h.trigger(second.id).status is TriggerStatus.COMPLETED
                 and h.execution(h.trigger(second.id).execution_ids[0]).status.terminal)
    h.jira.gate.set()
    h.wait_idle()

    [execution] = [h.execution(i) for i in h.trigger(first.id).execution_ids]
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert [key for key, _ in h.jira.assignments()] == ["TCID-7"]  # the second copy's
    [evaluated] = execution.rule_executions
    assert evaluated.outcome.value == "not_matched"
    assert "no longer has the label auto-dispatch" in evaluated.evaluation["reason"]
    assert h.jira.loads == ["TCID-7"] * 3  # both triggers, and the first copy's execution


def test_a_trigger_that_names_its_policy_runs_it_whatever_labels_the_issue_has(make_harness):
    h = make_harness()
    staff(h)
    policy = h.policy(rule(assign(*ENGINEERS)), labels=("auto-dispatch",))
    h.jira.put(issue(key="TCID-8", labels=()))

    trigger = h.post_trigger("TCID-8", policy_id=policy.id)

    [execution] = [h.execution(i) for i in trigger.execution_ids]
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert [key for _, key, _ in h.jira.calls("assign")] == ["TCID-8"]
