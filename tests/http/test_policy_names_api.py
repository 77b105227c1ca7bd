"""A policy names only what the service can see: the trigger intake and the policy validator
judge a source by one rule, and activation refuses (422) every name the runtime could never
match or use."""

from __future__ import annotations

import re

import pytest
from falcon import testing

from tests.factories import policy_body
from tests.http.conftest import API_KEYS, Api
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services

SOURCES = ["jira_automation", "manual", "a", "a" * 64, "policy.check-2",  # accepted
           "Jira Automation", "Jira_Automation", "1abc", "_x", "a" * 65, "jira\u00e9", "JIRA"]


@pytest.fixture
def intake_api(harness) -> Api:
    """The API with the actor runtime behind it and no trigger rate limit."""
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
                                        "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "0"})
    services = Services(store=harness.store, config=config, clock=harness.clock,
                        runtime=harness.runtime)
    return Api(testing.TestClient(create_app(services)), services)


def intake_refuses(api: Api, source: str) -> bool:
    result = api.as_role("automation").post("/dispatch/triggers", json={
        "source": source, "input": {"issue_key": "TCID-1"}})
    assert result.status_code in (202, 400), result.json
    return result.status_code == 400


def validator_refuses(api: Api, source: str) -> bool:
    body = policy_body()
    body["trigger"]["source_in"] = [source]
    result = api.as_role("viewer").post("/dispatch/policies/validate", json=body)
    assert result.status_code == 200, result.json
    return [e["path"] for e in result.json["errors"]] == ["trigger.source_in[0]"]


def test_intake_and_validator_refuse_exactly_the_same_sources(intake_api, harness):
    verdicts = {source: (intake_refuses(intake_api, source),
                         validator_refuses(intake_api, source)) for source in SOURCES}
    harness.wait_idle()

    assert {s for s, (intake, _) in verdicts.items() if intake} == set(SOURCES[5:])
    assert {s: v for s, v in verdicts.items() if v[0] != v[1]} == {}


def loose_policy() -> dict:
    """A policy whose every name passes the old, looser checks and fails the runtime's."""
    body = policy_body()
    body["trigger"].update(source_in=["Jira Automation"], project_key_in=["tcid"],
                           issue_label_all=["auto dispatch"])
    rule = body["rules"][0]
    rule["then"] = [
        {"type": "assign", "assign": {"receiver": {"type": "user", "user": "alice@localhost"},
                                      "strategy": "first"}},
        {"type": "assign", "assign": {"receiver": {"type": "group", "group": ".."},
                                      "strategy": "first"}},
        {"type": "triage", "triage": {"labels_add": ["needs review"]}},
    ]
    return body


LOOSE_PATHS = {
    "trigger.source_in[0]", "trigger.project_key_in[0]", "trigger.issue_label_all[0]",
    "rules[0].then[0].assign.receiver.user", "rules[0].then[1].assign.receiver.group",
    "rules[0].then[2].triage.labels_add[0]",
}


def test_validate_lists_every_name_the_runtime_could_not_use(api):
    result = api.post("/dispatch/policies/validate", json=loose_policy())

    assert result.status_code == 200
    assert result.json["valid"] is False
    assert {e["path"] for e in result.json["errors"]} == LOOSE_PATHS


def test_such_a_draft_is_stored_but_activation_answers_422_with_every_name(api):
    created = api.post("/dispatch/policies", json=loose_policy())
    assert created.status_code == 201, created.json

    result = api.post(f"/dispatch/policies/{created.json['id']}/activate")

    assert result.status_code == 422
    assert result.json["code"] == "policy_invalid"
    assert {e["path"] for e in result.json["errors"]} == LOOSE_PATHS
    assert api.get(f"/dispatch/policies/{created.json['id']}").json["status"] == "draft"


def test_a_policy_as_get_returns_it_is_refused_by_create_and_by_validate(api):
    written = api.post("/dispatch/policies", json=policy_body()).json
    created = api.get(f"/dispatch/policies/{written['id']}").json

    refused = api.post("/dispatch/policies", json=created)
    judged = api.post("/dispatch/policies/validate", json=created)

    assert refused.status_code == 400
    assert judged.status_code == 200 and judged.json["valid"] is False
    assert {e["message"] for e in judged.json["errors"]} == {"is assigned by the server"}
    assert {e["path"] for e in judged.json["errors"]} == {
        "id", "family_id", "version", "status", "created_at", "updated_at", "activated_at",
        "origin", "rules[0].id"}


def test_the_openapi_document_describes_source_and_project_names_by_the_same_rules():
    from ticket_dispatcher.domain.catalog import PROJECT, SOURCE
    from ticket_dispatcher.http.openapi import document

    schemas = document()["components"]["schemas"]
    patterns = {
        "source": (schemas["TriggerBody"]["properties"]["source"]["pattern"], SOURCE),
        "source_in": (schemas["PolicyTriggerBody"]["properties"]["source_in"]["items"]
                      ["pattern"], SOURCE),
        "project_key_in": (schemas["PolicyTriggerBody"]["properties"]["project_key_in"]
                           ["items"]["pattern"], PROJECT),
    }
    names = [*SOURCES, "TCID", "tcid", "A_1", "1A", "A" * 33, "TC-ID"]
    disagreements = {
        (where, name) for where, (pattern, rule) in patterns.items() for name in names
        if (re.search(pattern, name) is not None) != rule(name)
    }
    assert disagreements == set()
