"""Jira's admin webhooks into the real runtime, on both engines: the signature, the refusals,
each kind of delivery and what it starts, and repeats."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from falcon import testing

from tests.factories import example_policy, jira_delivery, policy_body
from tests.fakes import FakeJira, issue
from tests.harness import Harness
from tests.http.conftest import API_KEYS, Api
from ticket_dispatcher.domain.model import JiraUser
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.http.webhooks import signature

SECRET = "It's a Secret to Everybody"
OLD_SECRET = "the-secret-before-rotation-0123"
ROUTE = "/jira/webhooks"
ALICE = JiraUser("acc-alice", "alice@example.com", "alice")
BOB = JiraUser("acc-bob", "bob@example.com", "bob")


class Jira:
    """Posts deliveries the way Jira does: the raw body, signed, with its identifier."""

    def __init__(self, api: Api, secret: str = SECRET):
        self.api = api.as_role(None)
        self.secret = secret
        self.sent = 0

    def send(self, body: dict | bytes, *, identifier: str | None = None,
             secret: str | None = None, headers: dict | None = None) -> testing.Result:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.sent += 1
        sent = {"Content-Type": "application/json",
                "X-Hub-Signature": signature(secret or self.secret, raw),
                "X-Atlassian-Webhook-Identifier": identifier or f"delivery-{self.sent}"}
        sent.update(headers or {})
        return self.api.post(ROUTE, body=raw, headers={k: v for k, v in sent.items()
                                                       if v is not None})


@pytest.fixture
def world(store):
    jira = FakeJira(issue(key="TCID-1", labels=()),
                    issue(key="TCOC-7", project_key="TCOC", priority="P3", labels=(),
                          assignee=ALICE),
                    issue(key="TCT-3", project_key="TCT", priority="P2", labels=(),
                          assignee=ALICE, l2_assignee=BOB))
    for user in (ALICE, BOB):
        jira.users[user.account_id] = user
    harness = Harness(store, jira=jira, NOTIFICATIONS_ENABLED="true",
                      JIRA_WEBHOOK_SECRETS=f"{SECRET},{OLD_SECRET}",
                      AUTH_API_KEYS=API_KEYS, AUTH_FAILURE_BURST="3").start()
    services = Services(store=harness.store, config=harness.config, clock=harness.clock,
                        runtime=harness.runtime, metrics=harness.metrics)
    api = Api(testing.TestClient(create_app(services)), services)
    for name in ("priority-assignee", "priority-l2"):
        created = api.post("/dispatch/policies", json=example_policy(name)).json
        assert api.post(f"/dispatch/policies/{created['id']}/activate").status_code == 200
    ordinary = api.post("/dispatch/policies", json=policy_body()).json
    assert api.post(f"/dispatch/policies/{ordinary['id']}/activate").status_code == 200
    yield harness, api, Jira(api)
    harness.stop()


def triggers(harness: Harness) -> list:
    items, _ = harness.store.triggers.page(limit=200)
    return sorted(items, key=lambda trigger: trigger.id)


def test_the_signature_is_the_one_atlassian_publishes():
    assert signature(SECRET, b"Hello World!") == (
        "sha256=a4771c39fbe90f317c7824e83ddef3caae9cb3d976c214ace1f2937e133263c9")


def test_a_created_issue_becomes_an_ordinary_trigger_and_is_assigned(world):
    harness, api, jira = world

    answer = jira.send(jira_delivery(key="TCID-1"))
    harness.wait_idle()

    assert answer.status_code == 202, answer.json
    [trigger] = triggers(harness)
    assert answer.json == {"status": "accepted", "trigger_ids": [trigger.id]}
    assert trigger.source == "jira_issue_created" and trigger.status.value == "completed"
    [execution] = [harness.execution(n) for n in trigger.execution_ids]
    assert harness.store.policies.get(execution.policy_id).name == "Assign TCID tickets"


def test_a_repeated_delivery_answers_2xx_and_starts_nothing(world):
    harness, api, jira = world
    body = jira_delivery(key="TCID-1")

    first = jira.send(body, identifier="b6a1f3-retried")
    harness.wait_idle()
    again = jira.send(body, identifier="b6a1f3-retried")
    harness.wait_idle()

    assert first.status_code == 202 and again.status_code == 200
    assert again.json["status"] == "duplicate"
    assert len(triggers(harness)) == 1


@pytest.mark.parametrize("headers", [
    {"X-Hub-Signature": None},
    {"X-Hub-Signature": "sha256=" + "0" * 64},
    {"X-Hub-Signature": "sha1=abc"},
])
def test_a_missing_or_wrong_signature_is_refused_and_stores_nothing(world, headers):
    harness, api, jira = world

    answer = jira.send(jira_delivery(), headers=headers)

    assert answer.status_code == 401
    assert "signature" in answer.json["description"].lower()
    assert triggers(harness) == []
    assert harness.metrics.registry.get_sample_value(
        "ticket_manager_dispatch_jira_webhooks_total",
        {"event": "unknown", "outcome": "unauthorized"}) == 1


def test_a_body_signed_with_another_secret_is_refused(world):
    harness, api, jira = world

    answer = jira.send(jira_delivery(), secret="a-secret-this-service-does-not-know")

    assert answer.status_code == 401 and triggers(harness) == []


def test_failed_signatures_are_throttled_like_failed_keys(world):
    harness, api, jira = world

    statuses = [jira.send(jira_delivery(), secret="wrong").status_code for _ in range(4)]

    assert statuses == [401, 401, 401, 429]


def test_the_previous_secret_still_works_while_it_is_rotated(world):
    harness, api, jira = world

    assert jira.send(jira_delivery(), secret=OLD_SECRET).status_code == 202


@pytest.mark.parametrize("body, problem", [
    (b"not json", "not valid JSON"),
    (b'{"hello": "world"}', "webhookEvent"),
    (json.dumps({"webhookEvent": "jira:issue_created"}).encode(), "Jira issue"),
    (json.dumps({"webhookEvent": "jira:issue_updated", "issue": {"key": "TCID-1"}}).encode(),
     "fields"),
])
def test_a_body_that_is_no_jira_delivery_is_a_clear_400(world, body, problem):
    harness, api, jira = world

    answer = jira.send(body)

    assert answer.status_code == 400, answer.json
    assert problem in json.dumps(answer.json)
    assert triggers(harness) == []


@pytest.mark.parametrize("key", ["../../etc/passwd", "tcid-5", "TCID-2\u00a0", "TC\u0130D-2",
                                 "TCID-" + "9" * 3000])
def test_a_delivery_whose_issue_key_is_no_jira_key_is_a_400_that_stores_nothing(world, key):
    harness, api, jira = world

    answer = jira.send(jira_delivery(key=key))

    assert answer.status_code == 400, answer.json
    assert "issue.key" in json.dumps(answer.json)
    assert triggers(harness) == []


def test_a_malformed_identifier_is_refused_on_an_event_the_service_ignores_too(world):
    harness, api, jira = world

    answer = jira.send({**jira_delivery(), "webhookEvent": "comment_created"},
                       identifier="not an id!")

    assert answer.status_code == 400, answer.json
    assert "X-Atlassian-Webhook-Identifier" in json.dumps(answer.json)


@pytest.mark.parametrize("account, kept", [("ok\ud800", "ok\ufffd"), ("a\u0000b", "a\ufffdb")])
def test_an_account_id_no_store_can_hold_is_kept_readable_and_the_triggers_still_list(
        world, account, kept):
    """A NUL or an unpaired surrogate (JSON's escapes carry either) in the person a delivery
    names: PostgreSQL's jsonb refuses both and UTF-8 cannot answer the second; each becomes
    U+FFFD, and the trigger reads and lists as any other."""
    harness, api, jira = world

    answer = jira.send(assigned("TCOC-7", "TCOC", account, priority="P3"))
    harness.wait_idle()

    assert answer.status_code == 202, answer.json
    [shown] = api.get("/dispatch/triggers").json["items"]
    assert shown["input"]["add_label"]["account_id"] == kept
    assert api.get(f"/dispatch/triggers/{shown['id']}").status_code == 200


@pytest.mark.parametrize("stamp", [253402300800000, 2**53 - 1, 10**400, -5, "soon"])
def test_a_timestamp_no_calendar_holds_is_left_out_and_the_delivery_taken(world, stamp):
    harness, api, jira = world

    answer = jira.send(assigned("TCOC-7", "TCOC", ALICE.account_id, timestamp=stamp))

    assert answer.status_code == 202, answer.json
    [trigger] = triggers(harness)
    assert "changed_at" not in trigger.to_json()["input"]["add_label"]


def test_a_fault_of_the_service_is_a_500_counted_as_an_error_not_as_invalid(world, monkeypatch):
    harness, api, jira = world

    def broken(*args, **kwargs):
        raise RuntimeError("a defect")

    monkeypatch.setattr("ticket_dispatcher.http.webhooks.triggers_for", broken)
    answer = jira.send(assigned("TCOC-7", "TCOC", ALICE.account_id))

    assert answer.status_code == 500
    sample = harness.metrics.registry.get_sample_value
    name = "ticket_manager_dispatch_jira_webhooks_total"
    assert sample(name, {"event": "jira:issue_updated", "outcome": "error"}) == 1
    assert sample(name, {"event": "jira:issue_updated", "outcome": "invalid"}) is None


def test_another_event_is_answered_and_ignored(world):
    harness, api, jira = world

    answer = jira.send({**jira_delivery(), "webhookEvent": "comment_created"})

    assert answer.status_code == 200 and answer.json["status"] == "ignored"


def test_a_body_as_large_as_a_real_issue_is_taken_and_a_larger_one_refused(world):
    harness, api, jira = world

    big = jira.send(jira_delivery(key="TCID-1", padding=600_000))
    too_big = jira.send(jira_delivery(key="TCID-1", padding=2_200_000))

    assert big.status_code == 202
    assert too_big.status_code == 413 and "jira.webhook_max_bytes" in too_big.json["description"]


def assigned(key: str, project: str, account: str, **fields) -> dict:
    return jira_delivery("jira:issue_updated", key=key, project=project, assignee=account,
                         changes=[("assignee", None, account, None, account)], **fields)


def test_an_assignee_change_adds_the_label_then_starts_the_assignee_workflow(world):
    harness, api, jira = world

    answer = jira.send(assigned("TCOC-7", "TCOC", ALICE.account_id, priority="P3"))
    harness.wait_idle()

    assert answer.status_code == 202, answer.json
    [trigger] = triggers(harness)
    assert trigger.source == "jira_assignment_assignee"
    assert ("edit_labels", "TCOC-7", ("notify-assignee",), ()) in harness.jira.writes
    assert trigger.execution_ids, trigger.failure_reason
    assert trigger.to_json()["input"]["add_label"]["label"] == "notify-assignee"


def test_an_assignee_change_no_assignee_policy_could_match_starts_nothing(world):
    harness, api, jira = world

    answer = jira.send(assigned("TCID-1", "TCID", ALICE.account_id))

    assert answer.status_code == 200 and answer.json["status"] == "ignored"
    assert triggers(harness) == []


def test_a_change_to_unassigned_starts_nothing(world):
    harness, api, jira = world
    body = jira_delivery("jira:issue_updated", key="TCOC-7", project="TCOC",
                         changes=[("assignee", ALICE.account_id, None, "alice", None)])

    assert jira.send(body).json["status"] == "ignored"


def test_a_late_delivery_for_someone_no_longer_assigned_adds_no_label(world):
    harness, api, jira = world
    harness.jira.put(replace(harness.jira.issues["TCOC-7"], assignee=BOB))

    jira.send(assigned("TCOC-7", "TCOC", ALICE.account_id))
    harness.wait_idle()

    [trigger] = triggers(harness)
    assert trigger.status.value == "completed" and trigger.execution_ids == []
    assert "assignee changed since the delivery" in trigger.failure_reason
    assert not any(write[0] == "edit_labels" for write in harness.jira.writes)


def risen(key: str, project: str, before: str, after: str, **fields) -> dict:
    return jira_delivery("jira:issue_updated", key=key, project=project, priority=after,
                         changes=[("priority", "3", "1", before, after)], **fields)


def test_a_rise_to_urgent_starts_each_role_that_is_set(world):
    harness, api, jira = world
    harness.jira.put(replace(harness.jira.issues["TCT-3"], priority="P1"))

    answer = jira.send(risen("TCT-3", "TCT", "P2", "P1", assignee=ALICE.account_id,
                             l2=BOB.account_id))
    harness.wait_idle()

    assert answer.status_code == 202, answer.json
    assert [t.source for t in triggers(harness)] == ["jira_assignment_assignee",
                                                     "jira_assignment_l2_assignee"]
    labels = {write[2] for write in harness.jira.writes if write[0] == "edit_labels"
              and write[1] == "TCT-3" and not write[3]}
    assert {("notify-assignee",), ("notify-l2-assignee",)} <= labels


@pytest.mark.parametrize("before, after", [("P1", "P0"), ("P1", "P3"), ("P3", "P2")])
def test_no_rise_from_non_urgent_to_urgent_starts_nothing(world, before, after):
    harness, api, jira = world

    answer = jira.send(risen("TCT-3", "TCT", before, after, assignee=ALICE.account_id,
                             l2=BOB.account_id))

    assert answer.status_code == 200 and answer.json["status"] == "ignored"


def test_an_l2_change_starts_the_l2_workflow(world):
    harness, api, jira = world
    body = jira_delivery("jira:issue_updated", key="TCT-3", project="TCT", priority="P2",
                         assignee=ALICE.account_id, l2=BOB.account_id,
                         changes=[("customfield_10053", None, BOB.account_id, None, "bob")])

    assert jira.send(body).status_code == 202
    harness.wait_idle()

    [trigger] = triggers(harness)
    assert trigger.source == "jira_assignment_l2_assignee"
    assert ("edit_labels", "TCT-3", ("notify-l2-assignee",), ()) in harness.jira.writes


def test_a_label_write_refused_by_a_rate_limit_is_retried(world):
    harness, api, jira = world
    harness.jira.write_faults["edit_labels"] = [
        (IntegrationError("jira answered 429", status=429, service="jira", retry_after=30),
         False)]

    jira.send(assigned("TCOC-7", "TCOC", ALICE.account_id))
    harness.wait_idle()

    [trigger] = triggers(harness)
    assert trigger.status.value == "pending" and trigger.retry_count == 1
    assert "label write failed" in trigger.retry_reason
    harness.advance(31)
    harness.wait_idle()
    [trigger] = triggers(harness)
    assert trigger.status.value == "completed" and trigger.execution_ids
    assert ("edit_labels", "TCOC-7", ("notify-assignee",), ()) in harness.jira.writes


def test_a_label_write_refused_for_good_fails_the_trigger_with_the_reason(world):
    harness, api, jira = world
    harness.jira.write_faults["edit_labels"] = [
        (IntegrationError("jira answered 403", status=403, service="jira"), False)]

    jira.send(assigned("TCOC-7", "TCOC", ALICE.account_id))
    harness.wait_idle()

    [trigger] = triggers(harness)
    assert trigger.status.value == "failed"
    assert trigger.failure_reason.startswith("label write failed")


def test_a_created_issue_gets_the_auto_assign_label_where_a_policy_requires_it(world):
    harness, api, jira = world
    labelled = policy_body(name="Assign labelled TCB tickets", trigger={
        "enable": True, "source_in": [], "project_key_in": ["TCB"],
        "issue_label_all": ["auto-dispatch"]})
    created = api.post("/dispatch/policies", json=labelled).json
    assert api.post(f"/dispatch/policies/{created['id']}/activate").status_code == 200
    harness.jira.put(issue(key="TCB-1", project_key="TCB", labels=()))
    harness.jira.put(issue(key="TCB-2", project_key="TCB", labels=(), assignee=ALICE))

    jira.send(jira_delivery(key="TCB-1", project="TCB"))
    jira.send(jira_delivery(key="TCB-2", project="TCB", assignee=ALICE.account_id))
    harness.wait_idle()

    first, second = triggers(harness)
    assert ("edit_labels", "TCB-1", ("auto-dispatch",), ()) in harness.jira.writes
    assert [harness.execution(n).policy_id for n in first.execution_ids] == [created["id"]]
    assert not any(write[:2] == ("edit_labels", "TCB-2") for write in harness.jira.writes)
    assert second.status.value == "completed" and second.execution_ids == []


def test_a_created_issue_a_policy_takes_without_the_label_gets_none(world):
    harness, api, jira = world

    jira.send(jira_delivery(key="TCID-1"))
    harness.wait_idle()

    assert not any(write[0] == "edit_labels" for write in harness.jira.writes)


def test_a_change_whose_workflow_an_automation_rule_started_already_is_not_notified_again(world):
    """While the Automation rules and the webhook both run, the rule's trigger may start the
    workflow and consume the label before the webhook's trigger comes: it must not put the
    label back for a second card."""
    harness, api, jira = world
    changed = harness.clock.now()
    harness.jira.put(replace(harness.jira.issues["TCOC-7"], labels=("notify-assignee",)))
    by_rule = harness.post_trigger("TCOC-7", "jira_assignment_assignee")
    assert by_rule.execution_ids
    harness.jira.put(replace(harness.jira.issues["TCOC-7"], labels=()))  # consumed
    harness.jira.writes.clear()

    jira.send(assigned("TCOC-7", "TCOC", ALICE.account_id,
                       timestamp=int(changed.timestamp() * 1000) - 1000))
    harness.wait_idle()

    by_webhook = triggers(harness)[-1]
    assert by_webhook.status.value == "completed" and by_webhook.execution_ids == []
    assert "started for this change already" in by_webhook.failure_reason
    assert not any(write[0] == "edit_labels" for write in harness.jira.writes)


def test_a_later_change_to_the_same_person_is_notified_again(world):
    harness, api, jira = world
    harness.jira.put(replace(harness.jira.issues["TCOC-7"], labels=("notify-assignee",)))
    harness.post_trigger("TCOC-7", "jira_assignment_assignee")
    harness.jira.put(replace(harness.jira.issues["TCOC-7"], labels=()))
    harness.clock.advance(600)

    jira.send(assigned("TCOC-7", "TCOC", ALICE.account_id, priority="P3",
                       timestamp=int(harness.clock.now().timestamp() * 1000)))
    harness.wait_idle()

    assert triggers(harness)[-1].execution_ids
    assert ("edit_labels", "TCOC-7", ("notify-assignee",), ()) in harness.jira.writes


# --- the delivery's issue as the snapshot ------------------------------------------------------


def now_ms(harness: Harness) -> int:
    return int(harness.clock.now().timestamp() * 1000)


def test_a_fresh_delivery_is_matched_and_run_without_reading_the_issue(world):
    harness, api, jira = world

    assert jira.send(jira_delivery(key="TCID-1", timestamp=now_ms(harness))).status_code == 202
    harness.wait_idle()

    [trigger] = triggers(harness)
    assert trigger.execution_ids and harness.jira.loads == []
    assert "snapshot" not in trigger.to_json()["input"]  # kept, not shown


def test_a_stale_delivery_reads_the_issue(world):
    harness, api, jira = world

    jira.send(jira_delivery(key="TCID-1", timestamp=now_ms(harness) - 11_000))
    harness.wait_idle()

    assert harness.jira.loads == ["TCID-1"]


def test_a_delivery_older_than_an_execution_of_its_issue_reads_the_issue(world):
    """The delivery cannot show what an execution wrote after its event: the issue is read."""
    harness, api, jira = world
    event = now_ms(harness)
    harness.clock.advance(1)
    harness.post_trigger("TCID-1")
    harness.jira.loads.clear()

    jira.send(jira_delivery(key="TCID-1", timestamp=event))
    harness.wait_idle()

    assert harness.jira.loads[:1] == ["TCID-1"]
