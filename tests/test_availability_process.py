"""People-aware dispatch through a real ``ticket-dispatcher serve`` process, on both engines,
against the independent fake Jira of tests/peer.py over real HTTP: engineers' time off, working
hours and caps set through the API decide who a round robin hands tickets to, a fallback takes
over when nobody is left, and nobody at all fails the execution with ``no_eligible_candidate``,
counted by the metric and naming everyone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests import process
from tests.peer import FakeJira
from tests.process import wait_until
from tests.test_jira_rate_limit_process import metric

PROJECT = "AVL"
SQUAD = {"alice@example.com": "acc-alice", "bob@example.com": "acc-bob",
         "carol@example.com": "acc-carol"}
LEAD = {"lead@example.com": "acc-lead"}
ISSUES = [f"{PROJECT}-{n}" for n in range(1, 13)]


def policy(**assign: object) -> dict:
    document = process.round_robin_policy("Assign AVL tickets", "people-aware", PROJECT, SQUAD)
    document["rules"][0]["then"][0]["assign"].update(assign)
    return document


class Dispatcher(process.Dispatcher):
    def staff(self) -> None:
        for email, account_id in {**SQUAD, **LEAD}.items():
            self.call("PUT", f"/engineers/{email}", (200, 201),
                      json={"dispatch_enabled": True, "jira_account_id": account_id})

    def away(self, email: str, days: float = 7) -> dict:
        now = datetime.now(UTC)
        return self.call("POST", f"/engineers/{email}/time-off", (201,), json={
            "start": (now - timedelta(hours=1)).isoformat(),
            "end": (now + timedelta(days=days)).isoformat(), "reason": "vacation"})

    def assignees(self, keys: list[str]) -> list[str]:
        for key in keys:
            self.post_trigger(key)
        wait_until(lambda: all(self.finished(key) for key in keys), 30,
                   "every execution to end")
        return [self.assign_context(key)["assignee"] for key in keys]

    def finished(self, key: str) -> bool:
        execution = self.execution_of(key)
        return execution is not None and execution["status"] in ("succeeded", "failed")

    def assign_context(self, key: str) -> dict:
        execution = self.execution_of(key)
        assert execution is not None
        [action] = [a for r in execution["rule_executions"] for a in r["action_executions"]]
        return action["context"]["assign"]


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        for email, account_id in {**SQUAD, **LEAD}.items():
            fake.add_user(email, account_id)
        for key in ISSUES:
            fake.add_issue(key)
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


def test_nobody_on_time_off_is_handed_a_ticket(dispatcher, jira):
    dispatcher.activate(policy())
    dispatcher.away("bob@example.com")

    assigned = dispatcher.assignees(ISSUES[:6])

    assert Counter(assigned) == {"alice@example.com": 3, "carol@example.com": 3}
    context = dispatcher.assign_context(ISSUES[0])
    assert context["candidates"] == list(SQUAD)
    [judged] = context["judged"]  # the one passed over
    assert (judged["email"], judged["eligible"]) == ("bob@example.com", False)
    assert judged["reasons"][0].startswith("on time off until ")
    assert {jira.assignee(key) for key in ISSUES[:6]} == {"acc-alice", "acc-carol"}
    bob = dispatcher.call("GET", "/engineers/bob@example.com")
    assert bob["availability"]["available"] is False


def test_the_fallback_takes_over_then_nobody_fails_naming_everyone(dispatcher):
    dispatcher.activate(policy(fallback={"type": "user", "user": "lead@example.com"}))
    for email in SQUAD:
        dispatcher.away(email)

    [to_lead] = dispatcher.assignees(ISSUES[:1])
    dispatcher.away("lead@example.com")
    dispatcher.post_trigger(ISSUES[1])
    failed = dispatcher.wait_status(ISSUES[1], "failed", timeout=30)

    assert to_lead == "lead@example.com"
    assert failed["failure_code"] == "no_eligible_candidate"
    for email in [*SQUAD, *LEAD]:
        assert email in failed["failure_reason"]
    exposition = requests.get(f"{dispatcher.url}/metrics", timeout=15).text
    assert metric(exposition, "ticket_manager_dispatch_execution_outcomes_total",
                  failure_code="no_eligible_candidate") == 1


def test_working_hours_required_skip_someone_asleep(dispatcher):
    now = datetime.now(UTC)
    awake = f"{now:%H}:00-24:00" if now.hour < 23 else "23:00-24:00"
    day = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")[now.weekday()]
    for email in SQUAD:
        dispatcher.call("PUT", f"/engineers/{email}", json={
            "dispatch_enabled": True, "timezone": "UTC",
            "working_hours": {day: [awake]} if email == "carol@example.com" else {}})
    dispatcher.activate(policy(availability={"working_hours": "required"}))

    assert set(dispatcher.assignees(ISSUES[:3])) == {"carol@example.com"}


@pytest.mark.postgres
def test_replicas_in_shared_mode_judge_by_the_same_time_off(postgres_url, jira):
    """Time off entered through one replica rules its engineer out on every replica: nothing
    about availability is remembered by a process."""
    settings = {"CLUSTER_MODE": "shared", "HTTP_THREADS": "4", "TRIGGER_ACTORS": "2",
                "EXECUTION_SLOTS": "4", "TRIGGER_POLL_INTERVAL": "1s"}
    started = process.Processes(Dispatcher)
    try:
        first = started.start(postgres_url, jira, **settings).wait_serving()
        second = started.start(postgres_url, jira, **settings).wait_serving()
        first.staff()
        first.activate(policy())
        first.away("alice@example.com")
        first.away("carol@example.com")

        via_second = second.assignees(ISSUES[:3])
        via_first = first.assignees(ISSUES[3:6])

        assert set(via_second) == set(via_first) == {"bob@example.com"}
    finally:
        started.stop_all()
