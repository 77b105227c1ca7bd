"""The fake Jira's admin webhooks (``/rest/webhooks/1.0/webhook``): register, list, read,
replace and remove, as Jira answers them and never with the secret; every body it cannot take
is Jira's 400 naming the field, and stores nothing; and the project's own admin-webhook client
speaks it."""

from __future__ import annotations

import pytest

from tests.sandbox.calls import JIRA_AUTH, assert_jira_error
from ticket_dispatcher.config import JiraConfig
from ticket_dispatcher.integrations.jira_webhooks_admin import (
    JiraWebhookAdmin,
    WebhookRegistration,
)

WEBHOOKS = "/sandbox/jira/rest/webhooks/1.0/webhook"
SECRET = "registered-secret-never-answered"
URL = "http://localhost:8080/api/v1/ticketmanager/jira/webhooks"


def webhook_body(**changes) -> dict:
    return {"name": "ticket-dispatcher", "url": URL,
            "events": ["jira:issue_created", "jira:issue_updated"],
            "filters": {"issue-related-events-section": 'project in ("TCID")'},
            "excludeBody": False, "secret": SECRET, **changes}


def register(client, body=None):
    return client.simulate_post(WEBHOOKS, json=webhook_body() if body is None else body,
                                headers=JIRA_AUTH)


def test_register_answers_201_with_the_webhook_as_jira_shows_it(client, clock, sandbox):
    result = register(client)

    assert result.status_code == 201, result.text
    assert result.json == {
        "self": f"http://falconframework.org{WEBHOOKS}/1",
        "name": "ticket-dispatcher", "url": URL,
        "events": ["jira:issue_created", "jira:issue_updated"],
        "filters": {"issue-related-events-section": 'project in ("TCID")'},
        "excludeBody": False, "enabled": True,
        "lastUpdatedUser": "bot@example.com",
        "lastUpdated": int(clock.now().timestamp() * 1000),
    }
    assert result.headers["location"] == result.json["self"]
    [stored] = sandbox.jira_webhooks.webhooks()
    assert stored.spec.secret == SECRET
    assert SECRET not in repr(stored)


def test_list_and_read_one_show_each_webhook_and_never_a_secret(client):
    register(client)
    register(client, webhook_body(name="another", url="https://other.example/hook",
                                  events=[], filters={}))

    listed = client.simulate_get(WEBHOOKS, headers=JIRA_AUTH)
    second = client.simulate_get(f"{WEBHOOKS}/2", headers=JIRA_AUTH)

    assert listed.status_code == second.status_code == 200
    assert [(w["self"].rsplit("/", 1)[1], w["name"]) for w in listed.json] == \
        [("1", "ticket-dispatcher"), ("2", "another")]
    assert second.json == listed.json[1]
    assert SECRET not in listed.text + second.text


def test_put_replaces_the_webhook_under_its_id(client, clock, sandbox):
    register(client)
    clock.advance(60)

    result = client.simulate_put(f"{WEBHOOKS}/1", headers=JIRA_AUTH, json=webhook_body(
        filters={"issue-related-events-section": ""}, secret="rotated", enabled=False))

    assert result.status_code == 200, result.text
    assert (result.json["self"], result.json["filters"], result.json["enabled"]) == \
        (f"http://falconframework.org{WEBHOOKS}/1", {"issue-related-events-section": ""}, False)
    assert result.json["lastUpdated"] == int(clock.now().timestamp() * 1000)
    [stored] = sandbox.jira_webhooks.webhooks()
    assert (stored.id, stored.spec.secret) == (1, "rotated")


def test_delete_removes_the_webhook(client, sandbox):
    register(client)

    removed = client.simulate_delete(f"{WEBHOOKS}/1", headers=JIRA_AUTH)
    after = client.simulate_get(f"{WEBHOOKS}/1", headers=JIRA_AUTH)

    assert (removed.status_code, removed.text) == (204, "")
    assert_jira_error(after, 404)
    assert sandbox.jira_webhooks.webhooks() == []


@pytest.mark.parametrize("webhook_id", ["2", "abc", "0x1", "\u0661", "-1"])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_an_id_that_names_no_webhook_is_404(client, method, webhook_id):
    register(client)

    result = client.simulate_request(method, f"{WEBHOOKS}/{webhook_id}", headers=JIRA_AUTH,
                                     json=webhook_body())

    assert assert_jira_error(result, 404)["errorMessages"] == ["The webhook does not exist."]


def test_a_put_to_no_webhook_is_404_before_its_body_is_read(client):
    result = client.simulate_put(f"{WEBHOOKS}/7", headers=JIRA_AUTH, body="not json")

    assert_jira_error(result, 404)


BAD_BODIES = [
    (["a", "list"], None),
    (webhook_body(name=None), "name"),
    (webhook_body(name="  "), "name"),
    (webhook_body(name=7), "name"),
    ({k: v for k, v in webhook_body().items() if k != "url"}, "url"),
    (webhook_body(url="ftp://example.com/hook"), "url"),
    (webhook_body(url="/api/v1/ticketmanager/jira/webhooks"), "url"),
    (webhook_body(url="http://[::1/hook"), "url"),
    (webhook_body(url=["http://example.com"]), "url"),
    (webhook_body(events="jira:issue_created"), "events"),
    (webhook_body(events=["jira:issue_created", 3]), "events"),
    (webhook_body(events=[""]), "events"),
    (webhook_body(filters=["project = TCID"]), "filters"),
    (webhook_body(filters={"issue-related-events-section": 1}), "filters"),
    (webhook_body(excludeBody="no"), "excludeBody"),
    (webhook_body(enabled=1), "enabled"),
    (webhook_body(secret=12345), "secret"),
]


@pytest.mark.parametrize("body,field", BAD_BODIES)
@pytest.mark.parametrize("method,path", [("POST", WEBHOOKS), ("PUT", f"{WEBHOOKS}/1")])
def test_a_body_it_cannot_take_is_a_400_naming_the_field_and_stores_nothing(
        client, sandbox, method, path, body, field):
    register(client)
    before = sandbox.jira_webhooks.webhooks()

    result = client.simulate_request(method, path, json=body, headers=JIRA_AUTH)

    error = assert_jira_error(result, 400)
    assert list(error["errors"]) == ([field] if field else [])
    assert bool(error["errorMessages"]) == (field is None)
    assert sandbox.jira_webhooks.webhooks() == before
    assert SECRET not in result.text


@pytest.mark.parametrize("raw", ["", "{", "[1,", "\xff"])
def test_a_body_that_is_no_json_is_a_400(client, sandbox, raw):
    result = client.simulate_post(WEBHOOKS, body=raw.encode("latin-1"), headers=JIRA_AUTH)

    assert_jira_error(result, 400)
    assert sandbox.jira_webhooks.webhooks() == []


def test_several_wrong_fields_are_named_together(client):
    result = register(client, {"name": "", "url": "nowhere", "events": "all"})

    assert sorted(assert_jira_error(result, 400)["errors"]) == ["events", "name", "url"]


def test_null_or_missing_optional_fields_take_jira_defaults(client, sandbox):
    result = register(client, {"name": "bare", "url": URL, "events": None, "filters": None,
                               "excludeBody": None, "secret": None})

    assert result.status_code == 201, result.text
    assert {k: result.json[k] for k in ("events", "filters", "excludeBody", "enabled")} == \
        {"events": [], "filters": {}, "excludeBody": False, "enabled": True}
    assert sandbox.jira_webhooks.webhooks()[0].spec.secret == ""


@pytest.mark.parametrize("authorization", [None, "Bearer token", "Basic bm90LWJhc2U2NA",
                                           "Basic dXNlcg=="])  # "user", no token
def test_without_basic_credentials_it_is_401_and_nothing_is_registered(client, sandbox,
                                                                       authorization):
    headers = {"Authorization": authorization} if authorization else {}

    posted = client.simulate_post(WEBHOOKS, json=webhook_body(), headers=headers)
    listed = client.simulate_get(WEBHOOKS, headers=headers)

    assert_jira_error(posted, 401)
    assert_jira_error(listed, 401)
    assert sandbox.jira_webhooks.webhooks() == []


def test_an_injected_fault_answers_before_the_webhook_is_registered(client, sandbox):
    sandbox.traffic.add_fault("jira", path_contains="/rest/webhooks/", status=503)

    result = register(client)

    assert_jira_error(result, 503)
    assert sandbox.jira_webhooks.webhooks() == []


def test_the_projects_admin_client_registers_updates_and_lists(served, sandbox):
    admin = JiraWebhookAdmin(JiraConfig(base_url=served["jira"], email="admin@example.com",
                                        api_token="token", webhook_secrets=(SECRET,)))
    registration = WebhookRegistration("ticket-dispatcher", URL, 'project in ("TCID")', SECRET)
    try:
        created = admin.create(registration)
        updated = admin.update(created.id, WebhookRegistration(
            "ticket-dispatcher", URL, "", "rotated"))
        registered = admin.registered()
    finally:
        admin.close()

    assert (created.id, created.jql, created.enabled, created.secret_set) == \
        ("1", 'project in ("TCID")', True, None)
    assert (updated.id, updated.jql) == ("1", "")
    assert registered == [updated]
    assert sandbox.jira_webhooks.webhook(1).spec.secret == "rotated"
