"""The OpenAPI document is the truth: schemathesis against the served app.

Every documented operation is fuzzed in-process (WSGI) against the app of ``create_app`` with the
real actor runtime behind it (the harness: real actors, fake Jira), on each engine. Each operation
gets a fresh database seeded with one resource of each kind at id 1 (and the documented example
email and issue key), so the examples and the boundary values reach the found-resource paths, not
only 404s.

Bounded and deterministic: the same cases on every run. Phases: the documented examples, the
coverage phase (boundaries and each constraint broken once, every case the document implies) and
``MAX_EXAMPLES`` fuzzed cases; no stateful phase. Checks: no 5xx, every status code, content type
and response body as documented. A failure prints the case as a curl command.

``schema.parametrize()`` on a schema loaded from ``document()`` (what ``/openapi.json`` serves,
checked in test_service_endpoints.py) rather than ``schemathesis.pytest.from_fixture``: the lazy
loader of schemathesis 4.32 sets ``request.node._nodeid``, which pytest 9 no longer has.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fakes import RecordingAction
from tests.harness import Harness, rule
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.model import PolicySpec
from ticket_dispatcher.domain.shadow import Decision
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.openapi import POLICY_EXAMPLE, document
from ticket_dispatcher.http.services import Services

# An operator key (operator may call every operation) of at least 24 characters.
OPERATOR_KEY = "fuzz-operator-key-0123456789abcdef"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
MAX_EXAMPLES = 25

# The coverage phase breaks each constraint of a policy body once: ~1,800 cases per operation.
# POST /dispatch/policies keeps it (validator and store write); these three share its parser
# and insert, and get the examples and the fuzzed cases only, which keeps the run bounded.
SHARED_POLICY_BODY_OPERATIONS = [f"PUT {API_BASE}/dispatch/policies/{{policy_id}}",
                                 f"POST {API_BASE}/dispatch/policies/{{policy_id}}/replacements",
                                 f"POST {API_BASE}/dispatch/policies/validate"]
# Policy 1 is in shadow only for the operation that stops a shadow (so it can answer 204); for
# every other one it is a draft not in shadow, which POST .../shadow can start (201).
STOP_SHADOW_OPERATION = f"DELETE {API_BASE}/dispatch/policies/{{policy_id}}/shadow"
SCHEMATHESIS_CONFIG = schemathesis.Config.from_dict({
    # The key is sent by the test; generated X-API-KEY values would only test 401s.
    "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True,
                   "with-security-parameters": False},
    "phases": {"stateful": {"enabled": False}},
    "operations": [{"include-name": SHARED_POLICY_BODY_OPERATIONS,
                    "phases": {"coverage": {"enabled": False}}}],
})
schema = schemathesis.openapi.from_dict(document(), config=SCHEMATHESIS_CONFIG)


def _seed(harness: Harness, *, shadowing: bool) -> None:
    """Policy 1 a draft, policy 2 active; trigger 1 ran execution 1, parked (cancellable) on
    policy 2; policy 1 decided differently beside it in shadow once (its report lists the
    case); the context of TCID-1 and the engineer alice@example.com exist."""
    store, now = harness.store, harness.clock.now()
    draft = store.policies.create(PolicySpec.from_json(POLICY_EXAMPLE), now=now)
    harness.policy(rule("test_wait"))
    harness.post_trigger("TCID-1")
    store.shadows.record(policy_id=draft.id, family_id=draft.family_id, trigger_id=1,
                         issue_key="TCID-1", live_execution_id=1, now=now,
                         shadow=Decision(["business hours"], ["assign"], "bob@example.com"))
    store.shadows.settle(store.executions.get(1), now)
    if shadowing:
        store.shadows.start(draft.id, now=now)
    store.contexts.ensure_default("TCID-1", now)
    store.engineers.put("alice@example.com", dispatch_enabled=True, display_name="Alice",
                        now=now)


@pytest.fixture
def fuzzed_app(store, request):
    config = load_config(None, environ={
        "TICKET_DISPATCHER_AUTH_API_KEYS": f"fuzz-operator:operator:{OPERATOR_KEY}",
        "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "0",  # 429s would drown every other answer
    })
    harness = Harness(store, RecordingAction("test_wait", park_for=60)).start()
    try:
        _seed(harness, shadowing=STOP_SHADOW_OPERATION in request.node.name)
        yield create_app(Services(store=harness.store, config=config, clock=harness.clock,
                                  runtime=harness.runtime))
    finally:
        harness.stop()


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented(case, fuzzed_app):
    case.call_and_validate(app=fuzzed_app, headers={"X-API-KEY": OPERATOR_KEY}, checks=CHECKS)
