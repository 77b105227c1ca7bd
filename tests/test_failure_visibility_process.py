"""What an on-call person reads is true, through a real ``ticket-dispatcher serve`` process on
both engines, against the independent fake Jira of tests/peer.py over real HTTP.

- When everyone is away the execution fails with ``no_eligible_candidate``, naming each person
  and until when; its trigger, though completed, says ``execution_failed`` and is listed by that
  filter; once someone is back, ``POST /dispatch/executions/{id}/replay`` posts a new trigger
  that assigns the issue, and refuses an execution that did not fail.
- A trigger put off by Jira's 429 is listed by ``status=retrying`` (its status stays
  ``pending``), the admin view counts it as a Jira retry and not a database wait, and its log
  line names the next try and the end of the retry budget apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests import process
from tests.process import wait_until
from tests.test_jira_rate_limit_process import RateLimitedJira
from ticket_dispatcher.timeutil import format_time, parse_rfc3339

PROJECT = "AWAY"
SQUAD = {"alice@example.com": "acc-alice", "bob@example.com": "acc-bob"}
RETRY_AFTER = 60  # longer than the Jira client waits itself: the trigger is put off
BUDGET = timedelta(minutes=30)  # transient_retry_budget's default


class Dispatcher(process.Dispatcher):
    def staff(self) -> None:
        for email, account_id in SQUAD.items():
            self.call("PUT", f"/engineers/{email}", (200, 201),
                      json={"dispatch_enabled": True, "jira_account_id": account_id})
        self.activate(process.round_robin_policy(
            "Assign AWAY tickets", "round robin over two", PROJECT, SQUAD))

    def away(self, email: str) -> int:
        now = datetime.now(UTC)
        return self.call("POST", f"/engineers/{email}/time-off", (201,), json={
            "start": (now - timedelta(hours=1)).isoformat(),
            "end": (now + timedelta(days=7)).isoformat(), "reason": "vacation"})["id"]

    def trigger(self, trigger_id: int) -> dict:
        return self.call("GET", f"/dispatch/triggers/{trigger_id}")

    def listed(self, **filters: str) -> list[int]:
        page = self.call("GET", "/dispatch/triggers", params=filters)
        return [item["id"] for item in page["items"]]

    def ended(self, trigger_id: int) -> dict:
        """The one execution of ``trigger_id`` once it has ended."""
        def done() -> dict | None:
            ids = self.trigger(trigger_id)["output"]["execution_ids"]
            if not ids:
                return None
            execution = self.call("GET", f"/dispatch/executions/{ids[0]}")
            return execution if execution["status"] in ("succeeded", "failed") else None

        return wait_until(done, 30, f"trigger {trigger_id}'s execution ends")

    def log_entries(self, message: str) -> list[dict]:
        entries = [json.loads(line) for line in self.lines if line.startswith("{")]
        return [entry for entry in entries if entry.get("msg") == message]


@pytest.fixture
def jira() -> Iterator[RateLimitedJira]:
    with RateLimitedJira() as fake:
        for email, account_id in SQUAD.items():
            fake.add_user(email, account_id)
        for number in (1, 2):
            fake.add_issue(f"{PROJECT}-{number}")
        yield fake


@pytest.fixture
def dispatcher(db_url, jira) -> Iterator[Dispatcher]:
    started = process.Processes(Dispatcher)
    try:
        dispatcher = started.start(db_url, jira).wait_serving()
        dispatcher.staff()
        yield dispatcher
    finally:
        started.stop_all()


@pytest.mark.timeout(120)
def test_nobody_eligible_is_a_failure_everywhere_and_is_replayed_once_someone_is_back(
        dispatcher, jira):
    alice_away = dispatcher.away("alice@example.com")
    dispatcher.away("bob@example.com")

    first = dispatcher.post_trigger(f"{PROJECT}-1")["id"]
    failed = dispatcher.ended(first)
    trigger = dispatcher.trigger(first)

    assert failed["failure_code"] == "no_eligible_candidate"
    for email in SQUAD:
        assert f"{email} on time off until " in failed["failure_reason"]
    assert (trigger["status"], trigger["execution_failed"]) == ("completed", True)
    assert dispatcher.listed(execution_failed="true") == [first]
    assert first not in dispatcher.listed(execution_failed="false")

    dispatcher.call("DELETE", f"/engineers/alice@example.com/time-off/{alice_away}", (204,))
    response = requests.post(
        f"{dispatcher.url}{process.BASE}/dispatch/executions/{failed['id']}/replay", timeout=15)
    assert response.status_code == 202, response.text
    replay = response.json()["trigger_id"]
    assert set(response.json()) == {"trigger_id"}
    assert response.headers["Location"] == f"{process.BASE}/dispatch/triggers/{replay}"
    succeeded = dispatcher.ended(replay)

    assert succeeded["status"] == "succeeded" and succeeded["issue_key"] == f"{PROJECT}-1"
    assert jira.assignee(f"{PROJECT}-1") == "acc-alice"
    assert dispatcher.trigger(replay)["execution_failed"] is False
    assert dispatcher.listed(execution_failed="true") == [first]
    refused = dispatcher.call("POST", f"/dispatch/executions/{succeeded['id']}/replay", (409,))
    assert "only a failed execution is replayed" in refused["description"]
    dispatcher.call("POST", "/dispatch/executions/999999/replay", (404,))
    assert not dispatcher.log_problems()


@pytest.mark.timeout(120)
def test_a_trigger_put_off_by_jira_is_listed_retrying_and_counted_apart(dispatcher, jira):
    jira.rate_limit(120, retry_after=RETRY_AFTER)

    put_off = dispatcher.post_trigger(f"{PROJECT}-2")["id"]
    trigger = wait_until(lambda: (t := dispatcher.trigger(put_off))["retries"]["count"] and t,
                         30, "the trigger is put off")
    retrying = dispatcher.listed(status="retrying")
    actors = dispatcher.call("GET", "/admin/actors")
    [line] = dispatcher.log_entries("trigger's issue load met a passing fault; it is tried again")

    assert retrying == [put_off]
    assert trigger["status"] == "pending" and put_off in dispatcher.listed(status="pending")
    assert trigger["retries"]["next_at"] == trigger["available_at"]
    assert actors["retries"] == {"database_waits": 0, "jira_retries": 1}
    assert actors["pool"]["database_waits"] == 0
    assert actors["trigger_actors"]["database_waits"] == 0
    assert line["trigger_id"] == put_off
    assert line["next_try"] == trigger["available_at"]
    since = parse_rfc3339(trigger["retries"]["since"])
    assert line["deadline"] == format_time(since + BUDGET)
    assert parse_rfc3339(line["next_try"]) - since >= timedelta(seconds=RETRY_AFTER)
