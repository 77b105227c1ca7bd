"""The executions pages: the list with the API's filters and pages, one execution's life as a
timeline (each condition leaf with the expected value beside the issue's, each action's own
state: an assignment, a card, a page and its ACK wait, an escalation), and cancelling one that
still runs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from falcon import testing

from tests.actors.test_notification_card_runtime import ASSIGNEE, NotificationHarness, put
from tests.console.conftest import Console, build_app, main_text
from tests.domain.test_notification_card import LABEL, SEND, SEVERITY
from tests.domain.test_notification_page import POLL, TIMEOUT, page
from tests.fakes import issue
from tests.harness import assign, rule
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store.database import unit_of_work
from ticket_dispatcher.store.models import RuleExecutionRow

ENGINEERS = ("alice@example.com", "bob@example.com")
NOT_P0 = {"field": "issue.priority", "operator": "in", "values": ["P0"]}
NO_LABEL = {"field": "issue.labels", "operator": "not_contains", "value": "auto"}
HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>']


def engineers(harness) -> None:
    for email in ENGINEERS:
        harness.store.engineers.put(email, dispatch_enabled=True, now=harness.clock.now())
        harness.jira.add_user(email)


def assigned(harness) -> int:
    """A real round-robin assignment behind a rule that did not match: the execution's id."""
    engineers(harness)
    harness.policy(rule(assign(*ENGINEERS), name="business hours", priority=10,
                        when={"all": [NOT_P0, NO_LABEL]}),
                   rule(assign(*ENGINEERS), name="everything else", priority=20))
    [execution_id] = harness.post_trigger().execution_ids
    return execution_id


def section(text: str, start: str, end: str | None = None) -> str:
    """The page's text from ``start`` up to ``end`` (or its end)."""
    after = text.split(start, 1)[1]
    return after.split(end, 1)[0] if end else after


# --- the list -----------------------------------------------------------------------------------


def test_the_list_filters_pages_and_keeps_its_filters_in_the_url(console, harness):
    console.sign_in("viewer")
    harness.policy(rule("test_noop"))
    failing = harness.policy(rule("test_plan_fails"), projects=("FAIL",))
    harness.jira.put(issue(key="FAIL-1", project_key="FAIL"))
    for key in ("TCID-1", "FAIL-1", "TCID-1", "FAIL-1"):
        harness.post_trigger(key)

    everything = console.get("/console/executions")
    failed = console.get("/console/executions", params={"status": "failed"})
    by_policy = console.get("/console/executions", params={"policy_id": str(failing.id),
                                                           "limit": "1"})
    second = console.get("/console/executions", params={"policy_id": str(failing.id),
                                                        "limit": "1", "offset": "1"})

    assert everything.status_code == 200
    rows = re.findall(r'href="/console/executions/(\d+)"', everything.text)
    assert rows == ["4", "3", "2", "1"]  # newest first
    text = main_text(failed.text)
    assert "FAIL-1" in text and "TCID-1 " not in text and "plan_failed" in text
    assert '<option value="failed" selected>' in failed.text  # the form keeps the filter
    assert f'href="/console/policies/{failing.id}"' in failed.text
    assert re.findall(r'href="/console/executions/(\d+)"', by_policy.text) == ["4"]
    assert "1–1 of 2" in main_text(by_policy.text)
    assert (f'href="/console/executions?policy_id={failing.id}&amp;limit=1&amp;offset=1"'
            in by_policy.text)
    assert re.findall(r'href="/console/executions/(\d+)"', second.text) == ["2"]
    assert "2–2 of 2" in main_text(second.text) and 'rel="prev"' in second.text


@pytest.mark.parametrize("params", [{"status": "done"}, {"mode": "live-ish"},
                                    {"policy_id": "x"}, {"trigger_id": "0"},
                                    {"issue_key": "not a key"}, {"limit": "1000"},
                                    {"offset": "-1"}])
def test_a_bad_filter_is_a_400_page_naming_it(open_console, params):
    result = open_console.get("/console/executions", params=params)

    assert result.status_code == 400
    assert result.headers["Content-Type"].startswith("text/html")
    assert next(iter(params)) in main_text(result.text)


def test_an_unknown_execution_is_a_404_page(open_console):
    result = open_console.get("/console/executions/999")

    assert result.status_code == 404
    assert "execution 999 not found" in main_text(result.text)


# --- one execution ------------------------------------------------------------------------------


def test_each_leaf_shows_the_expected_value_beside_the_issues_and_why(open_console, harness):
    execution_id = assigned(harness)

    result = open_console.get(f"/console/executions/{execution_id}")

    assert result.status_code == 200
    text = main_text(result.text)
    first = section(text, "Rule 1: business hours", "Rule 2:")
    assert "not_matched" in first
    assert ('not_matched issue.priority in Expected ["P0"] Issue\'s value "P1" Why '
            'issue.priority "P1" not in ["P0"]') in first
    assert ('matched issue.labels not_contains Expected "auto" Issue\'s value '
            '["auto-dispatch"] Why issue.labels ["auto-dispatch"] contains "auto"') in first
    assert "not_matched all of" in first
    second = section(text, "Rule 2: everything else", "Succeeded")
    assert "matched always" in second
    # whom the round robin chose among whom, and why
    assert "Candidates alice@example.com, bob@example.com" in second
    assert "Chosen alice@example.com" in second
    assert "Why round_robin: never dispatched before" in second
    assert "Jira written" in second
    # the trigger and the frozen policy version lead to their pages
    assert 'href="/console/triggers?issue_key=TCID-1"' in result.text
    assert re.search(r'href="/console/policies/\d+">test policy</a>', result.text)
    assert "hx-trigger" not in result.text  # finished: nothing to refresh


def test_a_rule_evaluated_before_trees_were_stored_shows_its_reason(open_console, harness):
    execution_id = assigned(harness)
    with unit_of_work(harness.store.db):
        (RuleExecutionRow.update(evaluation_json={
            "matched": False, "reason": "all failed on [the reason as it was stored]",
            "evaluated_at": "2026-11-30T01:00:00.000Z"})
         .where((RuleExecutionRow.execution == execution_id)
                & (RuleExecutionRow.sequence == 0)).execute())

    text = main_text(open_console.get(f"/console/executions/{execution_id}").text)

    first = section(text, "Rule 1: business hours", "Rule 2:")
    assert "Why: all failed on [the reason as it was stored]" in first
    assert "Issue's value" not in first
    assert "Condition of rule 1 as stored" in first


def test_a_tree_node_this_release_cannot_read_is_shown_as_stored(open_console, harness):
    execution_id = assigned(harness)
    with unit_of_work(harness.store.db):
        (RuleExecutionRow.update(evaluation_json={
            "matched": False, "reason": "r", "evaluated_at": "2026-11-30T01:00:00.000Z",
            "tree": {"all": [{"field": "issue.priority", "operator": "in", "expected": ["P0"],
                              "actual": '"P1"', "matched": False, "reason": "leaf reason"},
                             {"someday": "a newer kind of node"}, "not even an object"],
                     "matched": False}})
         .where((RuleExecutionRow.execution == execution_id)
                & (RuleExecutionRow.sequence == 0)).execute())

    result = open_console.get(f"/console/executions/{execution_id}")

    assert result.status_code == 200
    first = section(main_text(result.text), "Rule 1: business hours", "Rule 2:")
    assert "Why leaf reason" in first
    assert first.count("A part of the condition this release cannot read") == 2
    assert '"someday": "a newer kind of node"' in first


@pytest.mark.parametrize("summary", HOSTILE)
def test_a_hostile_summary_is_shown_as_text_never_as_markup(open_console, harness, summary):
    harness.jira.put(issue(summary=summary))
    harness.policy(rule("test_noop", name=f"rule {summary}",
                        when={"field": "issue.summary", "operator": "contains",
                              "value": summary[:5]}))
    [execution_id] = harness.post_trigger().execution_ids

    result = open_console.get(f"/console/executions/{execution_id}")

    assert summary not in result.text
    assert "<script>alert" not in result.text and "<img" not in result.text
    assert "&lt;" in result.text
    text = main_text(result.text)
    assert f"rule {summary}" in text  # the rule's name
    assert summary.replace('"', '\\"') in text  # the issue's value, as JSON text


def test_an_action_this_page_does_not_know_shows_its_context_as_stored(open_console, harness):
    harness.policy(rule("test_noop"))
    [execution_id] = harness.post_trigger().execution_ids

    result = open_console.get(f"/console/executions/{execution_id}")

    assert '<details open>' in result.text
    assert '"executed": true' in main_text(result.text)


def test_a_dry_run_shows_its_business_time_and_what_it_overwrote(open_console, harness):
    engineers(harness)
    policy = harness.policy(rule(assign(*ENGINEERS), name="everything"))
    trigger = harness.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {
        "now": "2026-12-01T02:00:00Z"}})

    text = main_text(open_console.get(f"/console/executions/{trigger.execution_ids[0]}").text)

    assert "dry run plans every action and executes none" in text
    assert "Business time 2026-12-01 02:00:00" in text
    assert '"now": "2026-12-01T02:00:00Z"' in text
    assert "Jira not written" in text  # planned only


def test_a_running_execution_names_its_holder_and_refreshes_itself(open_console, harness):
    harness.policy(rule("test_gate"))
    harness.post_trigger(settle=False)
    gate = harness.registry.get("test_gate")
    gate.wait_entered(1)
    [execution] = harness.executions()

    running = open_console.get(f"/console/executions/{execution.id}")
    gate.open()
    harness.wait_idle()
    finished = open_console.get(f"/console/executions/{execution.id}")

    owner = harness.runtime.status()["leases"]["owner"]
    assert f"Held by {owner} lease until" in main_text(running.text)
    assert "Running On " + owner in main_text(running.text)
    assert (f'hx-get="/console/executions/{execution.id}" hx-trigger="every 5s" '
            'hx-select="#execution-live"') in running.text
    assert "hx-trigger" not in finished.text and owner not in finished.text


def test_a_parked_execution_counts_down_to_its_wake_up(open_console, harness):
    harness.policy(rule("test_wait"))
    [execution_id] = harness.post_trigger().execution_ids

    result = open_console.get(f"/console/executions/{execution_id}")

    text = main_text(result.text)
    assert "Held by nobody: a parked wait holds no lease" in text
    assert "Parked Wakes" in text and "in 60 s" in text
    assert "data-countdown=" in result.text


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_asks_then_cancels_a_parked_execution(console, harness):
    harness.policy(rule("test_wait"))
    [execution_id] = harness.post_trigger().execution_ids
    path = f"/console/executions/{execution_id}/cancel"
    console.sign_in("operator")
    assert f'action="{path}"' in console.get(f"/console/executions/{execution_id}").text

    asked = console.post(path)
    still = harness.execution(execution_id).status
    done = console.post(path, {"confirmed": "yes"})
    again = console.post(path, {"confirmed": "yes"})
    asked_again = console.post(path)

    assert asked.status_code == 200 and "Yes, cancel execution" in asked.text
    assert f"Cancel execution {execution_id} of TCID-1" in main_text(asked.text)
    assert still is ExecutionStatus.EXECUTING
    assert done.status_code == 200
    assert "is cancelled: it was waiting (queued or parked)" in main_text(done.text)
    cancelled = harness.execution(execution_id)
    assert cancelled.status is ExecutionStatus.FAILED and cancelled.failure_code == "cancelled"
    assert cancelled.failure_reason == "cancelled by operator-key from the console"
    assert again.status_code == 409 and asked_again.status_code == 409
    assert "has already finished" in main_text(again.text)
    page_after = console.get(f"/console/executions/{execution_id}").text
    assert f'action="{path}"' not in page_after


def test_cancel_signals_an_execution_in_the_middle_of_an_action(open_console, harness):
    harness.policy(rule("test_gate"))
    harness.post_trigger(settle=False)
    gate = harness.registry.get("test_gate")
    gate.wait_entered(1)
    [execution] = harness.executions()

    done = open_console.post(f"/console/executions/{execution.id}/cancel",
                             {"confirmed": "yes"})
    gate.open()
    harness.wait_idle()

    assert "is being cancelled: it was running" in main_text(done.text)
    assert harness.execution(execution.id).failure_code == "cancelled"
    assert "cancelled by anonymous from the console" in harness.execution(
        execution.id).failure_reason


def test_a_viewer_sees_no_cancel_and_may_not_post_one(console, harness):
    harness.policy(rule("test_wait"))
    [execution_id] = harness.post_trigger().execution_ids
    console.sign_in("viewer")

    shown = console.get(f"/console/executions/{execution_id}")
    refused = console.post(f"/console/executions/{execution_id}/cancel", {"confirmed": "yes"})

    assert shown.status_code == 200 and "/cancel" not in shown.text
    assert refused.status_code == 403
    assert harness.execution(execution_id).status is ExecutionStatus.EXECUTING


def test_cancelling_an_unknown_execution_is_a_404_page(open_console):
    assert open_console.post("/console/executions/999/cancel").status_code == 404


# --- the notification workflow ------------------------------------------------------------------


class NotificationWorld:
    """The console over a notification harness: a card, App-urgent, one page and its ACK wait,
    then the escalation (Core knows no leader here)."""

    def __init__(self, store):
        self.harness = NotificationHarness(store).start()
        self.harness.policy(
            rule(SEND, name="send", priority=10, on_success="continue"),
            rule({"type": "mark_assignment_message_urgent"}, page(1),
                 {"type": "escalate_assignment_to_leader"}, name="urgent", priority=20,
                 when=SEVERITY),
            source_in=(ASSIGNEE,), labels=(LABEL,))
        services = Services(store=self.harness.store, config=load_config(None, environ={}),
                            clock=self.harness.clock, runtime=self.harness.runtime)
        self.console = Console(testing.TestClient(build_app(services, auth_enabled=False)),
                               services)

    def start(self) -> int:
        put(self.harness, severity="S1", status="WAITING FOR FIRST RESPONSE")
        return self.harness.post_trigger(source=ASSIGNEE).execution_ids[0]

    def text(self, execution_id: int) -> tuple[str, str]:
        result = self.console.get(f"/console/executions/{execution_id}")
        assert result.status_code == 200, result.text[:2000]
        return result.text, main_text(result.text)


@pytest.fixture
def notifications(store):
    world = NotificationWorld(store)
    yield world
    world.harness.wait_idle()
    world.harness.stop()


def test_a_page_waiting_for_its_ack_shows_the_card_the_call_and_the_deadline(notifications):
    execution_id = notifications.start()

    html, text = notifications.text(execution_id)

    card = section(text, "send_assignment_notification", "Rule 2:")
    assert "Target Alice alice@example.com" in card
    assert "Urgency issue.custom_fields.severity = S1 : urgent" in card  # (tags are spaces)
    assert "Lark card: sent" in card and "Jira comment: written" in card
    assert f"Message om_td-{execution_id}-0-0" in card
    assert "Label removed" in card and "Outcome sent" in card
    urgent = section(text, "mark_assignment_message_urgent", "Action 2:")
    assert "Lark App-urgent: sent" in urgent and "marked, and on to paging" in urgent
    paging = section(text, "page_assignment", "Action 3:")
    assert "Attempt 1" in paging and "Oncall page: accepted" in paging
    assert re.search(r"Oncall call \S+", paging)
    assert f"in {TIMEOUT} s" in paging and "waiting for an ACK" in paging
    assert html.count("data-countdown=") >= 2  # the wake-up and the ACK deadline
    assert 'hx-trigger="every 5s"' in html


def test_an_ack_ends_the_wait_and_says_what_counted_as_the_ack(notifications):
    execution_id = notifications.start()
    notifications.harness.lark.readers[f"om_td-{execution_id}-0-0"] = ["ou_alice"]

    notifications.harness.advance(POLL)

    html, text = notifications.text(execution_id)
    paging = section(text, "page_assignment", "Action 3:")
    assert re.search(r"Outcome ack acknowledged: the target read the card in Lark, at "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d", paging), paging
    assert "Jira ACK comment: written" in paging
    assert re.search(r"Looks for an ACK \d", paging)
    assert "waiting for an ACK" not in text and "data-countdown" not in html
    escalation = section(text, "escalate_assignment_to_leader")
    assert "skipped" in escalation


def test_no_ack_is_a_timeout_then_the_escalation_with_its_verdict(notifications):
    execution_id = notifications.start()

    for _ in range(TIMEOUT // POLL + 1):
        notifications.harness.advance(POLL)

    _, text = notifications.text(execution_id)
    paging = section(text, "page_assignment", "Action 3:")
    assert "Outcome timeout no ACK before the deadline" in paging
    escalation = section(text, "escalate_assignment_to_leader")
    assert "Outcome no_leader" in escalation
    assert "escalation: " in escalation  # its warning says why Jira was not changed


def test_a_triggers_executions_say_while_it_is_pending_and_refresh_until_processed(
        open_console, harness):
    trigger = harness.store.triggers.create("jira_automation", "TCID-7", policy_id=None,
                                            dryrun=None, now=harness.clock.now())

    pending = open_console.get("/console/executions", params={"trigger_id": trigger.id})
    harness.store.triggers.fail(trigger.id, "issue load failed: jira answered 404",
                                harness.clock.now())
    failed = open_console.get("/console/executions", params={"trigger_id": trigger.id})

    text = main_text(pending.text)
    assert f"Trigger {trigger.id} (jira_automation, TCID-7 ) is pending" in text
    assert "its executions appear here once it is processed" in text
    assert 'hx-trigger="every 2s"' in pending.text
    assert "is failed : issue load failed: jira answered 404" in main_text(failed.text)
    assert 'hx-trigger="every 2s"' not in failed.text
    assert open_console.get("/console/executions",
                            params={"trigger_id": 999_999}).status_code == 404


def test_the_timeline_says_who_was_passed_over_and_why(open_console, harness):
    engineers(harness)
    now = harness.clock.now()
    harness.store.time_off.add(TimeOff(None, ENGINEERS[0], now - timedelta(hours=1),
                                       now + timedelta(days=2), "parental leave", "api"), now)
    harness.policy(rule(assign(*ENGINEERS), name="everyone"))
    [execution_id] = harness.post_trigger().execution_ids

    text = main_text(open_console.get(f"/console/executions/{execution_id}").text)

    assert f"Chosen {ENGINEERS[1]}" in text
    assert (f"Passed over {ENGINEERS[0]}: not eligible: on time off until Wed 2026-12-02 "
            f"01:00 UTC (parental leave)") in text


def test_replay_asks_then_posts_a_failed_executions_trigger_again(console, harness):
    policy = harness.policy(rule("test_plan_fails"))
    [execution_id] = harness.post_trigger().execution_ids
    path = f"/console/executions/{execution_id}/replay"
    console.sign_in("operator")
    shown = console.get(f"/console/executions/{execution_id}")
    assert f'action="{path}"' in shown.text
    assert "completed: an execution failed" in main_text(shown.text)

    asked = console.post(path)
    before = len(harness.store.triggers.page()[0])
    forged = console.post(path, {"confirmed": "yes"}, token="made-up")
    done = console.post(path, {"confirmed": "yes"})
    harness.wait_idle()

    assert asked.status_code == 200 and "Yes, replay execution" in asked.text
    assert (f"Post a new jira_automation trigger for TCID-1 (policy {policy.id} only)"
            in main_text(asked.text))
    assert forged.status_code == 403
    assert before == 1 and done.status_code == 200
    newest = harness.store.triggers.page()[0][0]
    assert f"Trigger {newest.id} was posted for TCID-1 (a replay of execution {execution_id})" \
        in main_text(done.text)
    assert newest.policy_id == policy.id and len(newest.execution_ids) == 1


def test_a_succeeded_execution_offers_no_replay_and_refuses_one(console, harness):
    harness.policy(rule("test_noop"))
    [execution_id] = harness.post_trigger().execution_ids
    console.sign_in("operator")

    shown = console.get(f"/console/executions/{execution_id}").text
    refused = console.post(f"/console/executions/{execution_id}/replay")

    assert "/replay" not in shown and "an execution failed" not in shown
    assert refused.status_code == 409
    assert "only a failed execution is replayed" in main_text(refused.text)


def test_a_failure_is_told_once_and_the_policy_shows_its_own_creation(open_console, harness):
    engineers(harness)
    now = harness.clock.now()
    for email in ENGINEERS:
        harness.store.time_off.add(TimeOff(None, email, now - timedelta(hours=1),
                                           now + timedelta(days=2), "offsite", "api"), now)
    policy = harness.policy(rule(assign(*ENGINEERS), name="everyone"))
    harness.clock.advance(3 * 3600)
    [execution_id] = harness.post_trigger().execution_ids
    execution = harness.store.executions.get(execution_id)
    assert execution.failure_code == "no_eligible_candidate"

    html = open_console.get(f"/console/executions/{execution_id}").text
    # what the page says, without the records it also shows as stored, folded away
    text = main_text(re.sub(r"<details>.*?</details>", "", html, flags=re.S))

    assert text.count(execution.failure_reason) == 1
    assert text.count("offsite") == len(ENGINEERS)  # in the failure only
    assert "Passed over every candidate, each for the reason the execution's failure" in text
    policy_step = section(text, f"Policy {policy.id}, version", "Rule 1:")
    assert f"Created {policy.created_at:%Y-%m-%d %H:%M:%S}" in policy_step
    assert f"{execution.created_at:%Y-%m-%d %H:%M:%S}" not in policy_step
    assert re.search(r"\d{4}-\d\d-\d\dT", text) is None  # no ISO time among what is read
