"""Balanced and random assignment through the whole runtime, on SQLite and PostgreSQL: a
resumed random assignment keeps its draw, dry runs show the counts and the draw, and a failed
count fails the execution with its reason."""

from __future__ import annotations

from tests.domain.test_assign_strategies import Scripted
from tests.fakes import issue
from tests.harness import assign, rule
from ticket_dispatcher.domain.actions.assign import AssignExecutor
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.errors import CallAbandoned

ENGINEERS = ("a@example.com", "b@example.com", "c@example.com")


def staff(h) -> None:
    for email in ENGINEERS:
        h.store.engineers.put(email, dispatch_enabled=True, now=h.clock.now())
        h.jira.add_user(email)


def context_of(execution) -> dict:
    return execution.rule_executions[0].action_executions[0].context["assign"]


def die_in_assign(h) -> None:
    """The next Jira assign is cut by a shutdown before it reaches Jira."""
    original = h.jira.assign_and_label

    def assign_(key, account_id, remove_labels=(), *, l2=False):
        h.jira.assign_and_label = original
        raise CallAbandoned("jira assign: the service is shutting down")

    h.jira.assign_and_label = assign_


def test_a_resumed_random_assignment_keeps_the_person_it_drew(make_harness):
    rng = Scripted(1, 2)  # a second draw would pick c
    h = make_harness(AssignExecutor(ActionType.ASSIGN, rng=rng))
    staff(h)
    h.policy(rule(assign(*ENGINEERS, strategy="random")))
    die_in_assign(h)
    execution_id = h.post_trigger().execution_ids[0]
    interrupted = h.execution(execution_id)
    assert interrupted.status is ExecutionStatus.EXECUTING
    assert context_of(interrupted)["assignee"] == "b@example.com"  # saved with the plan

    h.restart()
    h.wait_idle()

    execution = h.execution(execution_id)
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert context_of(execution)["assignee"] == "b@example.com"
    assert rng.asked == [3]  # drawn once, never again on resume
    assert h.jira.assignments() == [("TCID-1", "acc-b")]
    assert h.jira.issues["TCID-1"].assignee.email == "b@example.com"


def test_a_dry_run_shows_the_random_draw_and_writes_nothing(make_harness):
    h = make_harness(AssignExecutor(ActionType.ASSIGN, rng=Scripted(2)))
    staff(h)
    policy = h.policy(rule(assign(*ENGINEERS, strategy="random")))

    trigger = h.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {}})

    execution = h.execution(trigger.execution_ids[0])
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert context_of(execution)["assignee"] == "c@example.com"
    assert context_of(execution)["reason"] == "random: drawn uniformly among 3 candidates"
    assert h.jira.writes == []


def test_a_live_balanced_assignment_records_every_count(make_harness):
    h = make_harness()
    staff(h)
    h.jira.open_issues.update({"acc-a": 4, "acc-b": 2, "acc-c": 3})
    h.policy(rule(assign(*ENGINEERS, strategy="balanced")))

    execution = h.execution(h.post_trigger().execution_ids[0])

    assert execution.status is ExecutionStatus.SUCCEEDED
    context = context_of(execution)
    assert context["counts"] == {"a@example.com": 4, "b@example.com": 2, "c@example.com": 3}
    assert context["assignee"] == "b@example.com"
    assert h.jira.issues["TCID-1"].assignee.email == "b@example.com"
    assert h.store.engineers.get("b@example.com").last_dispatched_issue == "TCID-1"


def test_a_dry_run_counts_and_shows_them_without_writing(make_harness):
    h = make_harness()
    staff(h)
    h.jira.open_issues.update({"acc-a": 1, "acc-b": 1, "acc-c": 5})
    policy = h.policy(rule(assign(*ENGINEERS, strategy="balanced")))

    trigger = h.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {}})

    context = context_of(h.execution(trigger.execution_ids[0]))
    assert context["counts"] == {"a@example.com": 1, "b@example.com": 1, "c@example.com": 5}
    assert context["assignee"] == "a@example.com"  # a tie: configured order, nobody's turn yet
    assert [w[0] for w in h.jira.writes] == ["find_user_by_email"] * 3  # reads only
    assert all(h.store.engineers.get(e).last_dispatched_at is None for e in ENGINEERS)
    assert all(h.store.engineers.get(e).jira_account_id == "" for e in ENGINEERS)


def test_a_failed_count_fails_the_execution_with_plan_failed_and_its_reason(make_harness):
    h = make_harness()
    staff(h)
    h.jira.failing_counts.add("acc-b")
    h.policy(rule(assign(*ENGINEERS, strategy="balanced")))

    execution = h.execution(h.post_trigger().execution_ids[0])

    assert execution.status is ExecutionStatus.FAILED
    assert execution.failure_code == "plan_failed"
    assert "counting open issues of b@example.com failed" in execution.failure_reason
    assert context_of(execution)["counts"] == {"a@example.com": 0, "c@example.com": 0}
    assert h.jira.calls("assign") == []  # no fallback to another strategy


def test_concurrent_balanced_ties_spread_over_the_tied(make_harness):
    h = make_harness(slots=6)
    staff(h)
    keys = [f"TCID-{n}" for n in range(1, 7)]
    for key in keys:
        h.jira.put(issue(key=key))
    h.policy(rule(assign(*ENGINEERS, strategy="balanced")))

    for key in keys:  # the fake's counts never move: every plan sees a three-way tie
        h.post_trigger(key, settle=False)
    h.wait_idle()

    assert all(e.status is ExecutionStatus.SUCCEEDED for e in h.executions())
    assigned = sorted(i.assignee.email for i in h.jira.issues.values() if i.assignee)
    assert assigned == sorted(ENGINEERS * 2)
