"""Reserved sources: the notification switch, and the defer of a trigger whose family is busy
while its role label is still on the issue (docs/design.md, "The life of a trigger")."""

from __future__ import annotations

from tests.fakes import issue, notification_stand_ins
from tests.harness import rule
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus

ASSIGNEE = "jira_assignment_assignee"
SEND = {"type": "send_assignment_notification",
        "send_assignment_notification": {"role": "assignee", "label": "notify-assignee"}}
URGENT_ONLY = {"field": "issue.priority", "operator": "in", "values": ["P0"]}


def notification_policy(h):
    """A valid assignee family run by stand-in executors that park for 60 s."""
    return h.policy(rule(SEND, name="notify", priority=10, on_success="continue"),
                    rule("mark_assignment_message_urgent", name="urgent", priority=20,
                         when=URGENT_ONLY),
                    source_in=(ASSIGNEE,), labels=("notify-assignee",))


def test_reserved_source_completes_with_nothing_while_notifications_are_off(make_harness):
    h = make_harness(*notification_stand_ins(park_for=60))
    notification_policy(h)
    h.jira.put(issue(labels=("notify-assignee",)))

    trigger = h.post_trigger(source=ASSIGNEE)

    assert trigger.status is TriggerStatus.COMPLETED
    assert trigger.execution_ids == []
    assert trigger.failure_reason == "assignment notification disabled"


def test_busy_family_with_the_label_still_on_the_issue_defers_the_trigger(make_harness):
    h = make_harness(*notification_stand_ins(park_for=60), NOTIFICATIONS_ENABLED="true")
    notification_policy(h)
    h.jira.put(issue(labels=("notify-assignee",)))
    first = h.post_trigger(source=ASSIGNEE)

    deferred = h.post_trigger(source=ASSIGNEE)

    assert deferred.status is TriggerStatus.PENDING
    assert (deferred.available_at - h.clock.now()).total_seconds() == 5
    h.advance(60)  # the first workflow finishes
    assert h.execution(first.execution_ids[0]).status is ExecutionStatus.SUCCEEDED
    h.advance(5)  # the next poll finds the deferred trigger due and the family idle
    woken = h.trigger(deferred.id)
    assert woken.status is TriggerStatus.COMPLETED and len(woken.execution_ids) == 1


def test_duplicate_deferred_triggers_coalesce_into_one_wake_up(make_harness):
    h = make_harness(*notification_stand_ins(park_for=60), NOTIFICATIONS_ENABLED="true")
    notification_policy(h)
    h.jira.put(issue(labels=("notify-assignee",)))
    first = h.post_trigger(source=ASSIGNEE)

    kept = h.post_trigger(source=ASSIGNEE)
    duplicates = [h.post_trigger(source=ASSIGNEE) for _ in range(3)]

    assert kept.status is TriggerStatus.PENDING
    for duplicate in duplicates:
        assert duplicate.status is TriggerStatus.COMPLETED and duplicate.execution_ids == []
        assert f"coalesced into pending trigger {kept.id}" in duplicate.failure_reason
    h.advance(60)
    h.advance(5)  # the one wake-up left runs once the family is idle
    woken = h.trigger(kept.id)
    assert woken.status is TriggerStatus.COMPLETED and len(woken.execution_ids) == 1
    assert len(h.executions()) == 2  # the first workflow and the one wake-up
    assert h.execution(first.execution_ids[0]).status is ExecutionStatus.SUCCEEDED


def test_deferred_triggers_of_different_issues_each_keep_their_wake_up(make_harness):
    h = make_harness(*notification_stand_ins(park_for=60), NOTIFICATIONS_ENABLED="true")
    notification_policy(h)
    for key in ("TCID-1", "TCID-2"):
        h.jira.put(issue(key=key, labels=("notify-assignee",)))
        h.post_trigger(key, source=ASSIGNEE)

    deferred = [h.post_trigger(key, source=ASSIGNEE) for key in ("TCID-1", "TCID-2")]

    assert [t.status for t in deferred] == [TriggerStatus.PENDING] * 2


def test_busy_family_without_the_label_completes_as_a_no_op(make_harness):
    h = make_harness(*notification_stand_ins(park_for=60), NOTIFICATIONS_ENABLED="true")
    notification_policy(h)
    h.jira.put(issue(labels=("notify-assignee",)))
    h.post_trigger(source=ASSIGNEE)
    h.jira.put(issue(labels=()))  # the running workflow consumed the label

    duplicate = h.post_trigger(source=ASSIGNEE)

    assert duplicate.status is TriggerStatus.COMPLETED
    assert duplicate.execution_ids == []


def test_replacement_in_the_same_family_shares_the_live_lock(make_harness):
    h = make_harness(*notification_stand_ins(park_for=60), NOTIFICATIONS_ENABLED="true")
    original = notification_policy(h)
    h.jira.put(issue(labels=("notify-assignee",)))
    first = h.post_trigger(source=ASSIGNEE)
    replacement = h.store.policies.create_replacement(original.id, original.spec,
                                                      now=h.clock.now())
    h.store.policies.activate(replacement.id, now=h.clock.now())

    second = h.post_trigger(source=ASSIGNEE)

    assert len(first.execution_ids) == 1
    assert second.status is TriggerStatus.PENDING  # deferred: the family is busy


def test_an_explicit_live_run_of_a_notification_policy_is_refused_while_the_switch_is_off(
        make_harness):
    h = make_harness(*notification_stand_ins(park_for=60))
    policy = notification_policy(h)
    h.jira.put(issue(labels=("notify-assignee",)))

    live = h.post_trigger(policy_id=policy.id)
    dry = h.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {}})

    assert (live.status, live.execution_ids) == (TriggerStatus.COMPLETED, [])
    assert live.failure_reason == "assignment notification disabled"
    assert len(dry.execution_ids) == 1  # a dry-run never cards or pages: it may still run
