"""The triggers page: a trigger that waits out a passing fault of Jira shows its retries (how
many, since when, the last reason, the next try), in the page and in the API alike."""

from __future__ import annotations

from tests.console.conftest import main_text
from tests.harness import rule
from tests.http.conftest import KEYS
from ticket_dispatcher.domain.execution import TriggerStatus
from ticket_dispatcher.integrations.http import IntegrationRejected


def test_a_trigger_retrying_a_rate_limit_shows_its_retries_and_next_try(console, harness):
    console.sign_in("viewer")
    harness.policy(rule("test_noop"))
    harness.jira.fail_next("TCID-1", times=2, error=lambda: IntegrationRejected(
        "jira GET /rest/api/2/issue/TCID-1 failed: HTTP 429", status=429, service="jira",
        retry_after=40))

    trigger = harness.post_trigger()

    assert trigger.status is TriggerStatus.PENDING
    page = main_text(console.get("/console/triggers").text)
    row = page.split(f"{trigger.id} TCID-1", 1)[1]
    assert "1 retry since" in row and "next try" in row
    assert "HTTP 429" in row
    shown = console.get(f"/api/v1/ticketmanager/dispatch/triggers/{trigger.id}",
                        headers={"X-API-KEY": KEYS["viewer"]}).json
    assert shown["retries"]["count"] == 1 and shown["retries"]["next_at"]

    harness.advance(40)
    harness.advance(80)
    assert harness.trigger(trigger.id).status is TriggerStatus.COMPLETED
    row = main_text(console.get("/console/triggers").text).split(f"{trigger.id} TCID-1", 1)[1]
    assert "2 retries since" in row and "next try" not in row.split("TCID", 1)[0]


def test_a_trigger_whose_execution_failed_is_not_shown_green(console, harness):
    console.sign_in("viewer")
    harness.policy(rule("test_plan_fails"))
    failed = harness.post_trigger("TCID-1")

    page = console.get("/console/triggers", params={"execution_failed": "true"}).text
    others = console.get("/console/triggers", params={"execution_failed": "false"}).text

    assert failed.status is TriggerStatus.COMPLETED
    assert 'class="status status-failed">completed: an execution failed<' in page
    assert "status-completed" not in page and "TCID-1" in main_text(page)
    assert "TCID-1" not in main_text(others)
