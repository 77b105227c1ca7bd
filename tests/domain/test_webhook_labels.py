"""The label step of a trigger a Jira webhook delivery made, decided on the live issue before
matching (docs/design.md, "Triggers from a Jira webhook"). The runtime's tests of the same
step through real actors are in tests/http/test_jira_webhooks.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from tests.domain.test_matching import make_issue, make_policy
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.domain.webhooks import (
    STARTED_ALREADY,
    LabelStep,
    WebhookTrigger,
    required_label,
    role_label_step,
)

CHANGED = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
ALICE = JiraUser("acc-alice", "alice@example.com")
BOB = JiraUser("acc-bob", "bob@example.com")


def role_input(account_id: str = ALICE.account_id, **extra) -> dict:
    made = WebhookTrigger("jira_assignment_assignee", "notify-assignee", "assignee", account_id,
                          changed_at=CHANGED, **extra)
    return made.to_input("TCID-1", "delivery-1")


def never_started(since: datetime) -> bool:
    raise AssertionError("the store is asked only when all else says to add the label")


def test_a_role_trigger_adds_its_label_while_the_issue_shows_the_delivery_s_person():
    asked: list[datetime] = []

    def started_since(since: datetime) -> bool:
        asked.append(since)
        return False

    step = role_label_step(_assigned(ALICE), role_input(), started_since)

    assert step == LabelStep(label="notify-assignee") and asked == [CHANGED]


def test_a_role_trigger_behind_a_later_change_ends_without_the_label():
    step = role_label_step(_assigned(BOB), role_input(), never_started)

    assert step == LabelStep(ends="the assignee changed since the delivery; the label "
                                  "notify-assignee was not added")


def test_a_role_trigger_whose_workflow_already_started_ends_without_the_label():
    step = role_label_step(_assigned(ALICE), role_input(), lambda since: True)

    assert step == LabelStep(ends=f"{STARTED_ALREADY}; the label notify-assignee was not added")


def test_a_label_already_on_the_issue_or_a_trigger_of_no_role_adds_nothing():
    on = _assigned(ALICE, labels=("notify-assignee",))

    assert role_label_step(on, role_input(), never_started) == LabelStep()
    assert role_label_step(_assigned(ALICE), {"issue_key": "TCID-1"}, never_started) == LabelStep()


def test_a_created_issue_gets_the_auto_assign_label_only_where_a_policy_needs_it():
    needs_label = make_policy(1, issue_label_all=("auto-dispatch",))
    created = WebhookTrigger("jira_issue_created", "auto-dispatch").to_input("TCID-1", "d-1")

    assert required_label(make_issue(), created, "jira_issue_created",
                          [needs_label]) == "auto-dispatch"
    assert required_label(_assigned(ALICE), created, "jira_issue_created", [needs_label]) is None
    assert required_label(make_issue(), created, "jira_issue_created",
                          [make_policy(2, project_key_in=("OTHER",))]) is None
    assert required_label(make_issue(), role_input(), "jira_issue_created",
                          [needs_label]) is None


def _assigned(person: JiraUser, labels: tuple[str, ...] = ()) -> Issue:
    return replace(make_issue(labels=labels), assignee=person)
