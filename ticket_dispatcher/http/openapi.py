"""The OpenAPI 3 document of the API, served at ``/openapi.json``.

Written out by hand so it says what a client needs, and kept true by tests:
``tests/http/test_service_endpoints.py`` checks that every route and method the app serves is
documented here and nothing more, and ``tests/http/test_openapi_fuzz.py`` runs schemathesis
against the served app on both engines: every status, content type and response body
the server answers must be the one documented here.

Request bodies describe what a *valid* policy holds (docs/policies.md), with the field, operator,
weekday and action vocabularies read from ``domain/catalog.py`` so the document cannot drift from
the validator. Responses describe what the server can answer, which is wider: a draft may be
saved with problems that only block its activation, so a stored rule's ``when`` and
``then`` are documented by their JSON shape only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import falcon

from ticket_dispatcher import __version__
from ticket_dispatcher.domain import catalog, jql
from ticket_dispatcher.domain.actions import balanced
from ticket_dispatcher.domain.catalog import FieldKind
from ticket_dispatcher.domain.conditions import MAX_CONDITION_DEPTH
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    ExecutionMode,
    ExecutionStatus,
    RuleOutcome,
    TriggerStatus,
)
from ticket_dispatcher.domain.issues import ISSUE_KEY
from ticket_dispatcher.domain.maintenance import MAX_REASON as MAX_WINDOW_REASON
from ticket_dispatcher.domain.maintenance import Effect, Every, WindowState
from ticket_dispatcher.domain.model import MAX_ACCOUNT_ID, MAX_DISPLAY_NAME, PolicyStatus
from ticket_dispatcher.domain.shadow import DIFFERENCES
from ticket_dispatcher.domain.validation import MAX_POLICY_NAME
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.auth import PUBLIC
from ticket_dispatcher.http.binding import MAX_ID
from ticket_dispatcher.store.audit import MAX_LIMIT as MAX_AUDIT_LIMIT
from ticket_dispatcher.store.audit import Via

# --- small builders -----------------------------------------------------------------------------


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict, description: str = "OK", headers: dict | None = None) -> dict:
    response: dict[str, Any] = {"description": description,
                                "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def _enum(values: Iterable[object]) -> dict:
    return {"type": "string", "enum": [str(value) for value in values]}


def _object(properties: dict, required: Iterable[str] | None = None, *, closed: bool = True,
            **extra: Any) -> dict:
    """An object schema; ``required`` defaults to every property (what ``to_json`` emits)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties,
              "required": list(properties if required is None else required)}
    if not schema["required"]:
        del schema["required"]
    if closed:
        schema["additionalProperties"] = False
    schema.update(extra)
    return schema


def _anchored(pattern: re.Pattern) -> str:
    """A server regex as a JSON Schema pattern anchored at both ends (JSON Schema searches)."""
    body = pattern.pattern.removeprefix("^").removesuffix("$")
    body = body.removeprefix(r"\A").removesuffix(r"\Z")
    return f"^(?:{body})$"


# The server's own patterns (http/dispatch.py, http/engineers.py, domain/issues.py).
SOURCE_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"
ISSUE_KEY_PATTERN = _anchored(ISSUE_KEY)
# Path segments cannot hold "/"; the server lower-cases and trims the email.
EMAIL_PATTERN = r"^[^@\s/]+@[^@\s/]+\.[^@\s/]+$"
PROJECT_KEY_PATTERN = r"^[A-Z][A-Z0-9_]{0,31}$"
HHMM_PATTERN = r"^(?:[01][0-9]|2[0-3]):[0-5][0-9]$"
END_PATTERN = r"^(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]|24:00)$"  # 24:00 reaches midnight
DURATION_PATTERN = r"^[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d)$"
INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
ID = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
TEXT = {"type": "string", "minLength": 1, "pattern": r"\S"}  # not blank
TIME = {"type": "string", "format": "date-time"}
MAYBE_TIME = {**TIME, "nullable": True}
STRINGS = {"type": "array", "items": {"type": "string"}}
WORKING_HOURS = {
    "type": "object", "nullable": True,
    "description": "weekday (mon … sun) -> local HH:MM-HH:MM spans; a day left out is not "
                   "worked; null: any time",
    "properties": {day: {"type": "array", "items": {
        "type": "string", "pattern": "^[0-9]{2}:[0-9]{2}-[0-9]{2}:[0-9]{2}$"}}
        for day in ("mon", "tue", "wed", "thu", "fri", "sat", "sun")},
    "additionalProperties": False}
CAP = {"type": "integer", "minimum": 1, "nullable": True,
       "description": "open issues at which no more are assigned; null: no cap"}


# --- responses every operation shares ----------------------------------------------------------

_ERRORS = {  # status -> (name under components/responses, description)
    "400": ("BadRequest", "Bad input: malformed or too deeply nested JSON (http.max_json_depth),"
                          " a wrong field, control characters in text or parameters; errors[] "
                          "names each problem by its JSON path"),
    "401": ("Unauthorized", "No X-API-KEY header, or a key that is not configured"),
    "403": ("Forbidden", "The key's role may not call this operation"),
    "404": ("NotFound", "No such resource (an id out of range names no resource either)"),
    "409": ("Conflict", "The resource's state forbids this move"),
    "413": ("PayloadTooLarge", "The body is over http.max_body_bytes (triggers: 64 KiB)"),
    "415": ("UnsupportedMediaType", "The body is not application/json"),
    "422": ("PolicyInvalid", "The policy is not valid; errors[] lists every problem"),
    "429": ("RateLimited", "Rate limited (repeated authentication failures from this address, "
                           "or this key's trigger rate); wait Retry-After seconds"),
    "503": ("Unavailable", "Not available now (no database connection, or no actor runtime); "
                           "retry later"),
}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying",
                                "schema": {"type": "string"}}}
_LOCATION = {"Location": {"description": "The path of the created resource",
                          "schema": {"type": "string"}}}


def _error_responses() -> dict:
    return {name: _json(_ref("Error"), description,
                        _RETRY_AFTER if code in ("429", "503") else None)
            for code, (name, description) in _ERRORS.items()}


def _error(code: str) -> dict:
    return {"$ref": f"#/components/responses/{_ERRORS[code][0]}"}


def _op(summary: str, responses: dict, *, errors: tuple = (), body: str | None = None,
        params: list | None = None, public: bool = False, database: bool = True) -> dict:
    """One operation. Every operation may answer 400 (parameters are checked for control
    characters on every route); an authenticated one also 401/403/429, and one that takes a
    database connection 503 (http/middleware.py)."""
    shared: tuple[str, ...] = ("400",) if public else ("400", "401", "403", "429")
    if database:
        shared += ("503",)
    codes = sorted((set(shared) | set(errors)) - set(responses))  # e.g. /readyz's own 503
    operation: dict = {"summary": summary,
                       "responses": {**responses, **{code: _error(code) for code in codes}}}
    if body:
        operation["requestBody"] = {
            "required": True, "content": {"application/json": {"schema": _ref(body)}},
        }
        operation["responses"].update({code: _error(code) for code in ("413", "415")})
    if params:
        operation["parameters"] = params
    if public:
        operation["security"] = []
    return operation


def _path_param(name: str, schema: dict, example: object) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": schema, "example": example}


def _query(name: str, schema: dict, description: str = "") -> dict:
    parameter = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        parameter["description"] = description
    return parameter


_PAGING = [
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
    _query("offset", {"type": "integer", "minimum": 0, "maximum": MAX_ID, "default": 0}),
]
_POLICY_ID = [_path_param("policy_id", ID, 1)]
_EXECUTION_ID = [_path_param("execution_id", ID, 1)]
_ISSUE_KEY = [_path_param("issue_key", {"type": "string", "pattern": ISSUE_KEY_PATTERN},
                          "TCID-1")]
_EMAIL = [_path_param("email", {"type": "string", "pattern": EMAIL_PATTERN, "maxLength": 254},
                      "alice@example.com")]

_TRIGGER_FILTERS = [
    _query("status", _enum([*TriggerStatus, "retrying"]),
           "A trigger status; or retrying: the pending triggers waiting for their next try "
           "after a passing fault of Jira (their status stays pending, retries.next_at says "
           "when)"),
    _query("source", {"type": "string", "pattern": SOURCE_PATTERN}),
    _query("issue_key", {"type": "string", "pattern": ISSUE_KEY_PATTERN}),
    _query("created_after", TIME, "Created at or after this time (RFC 3339 with an offset)"),
    _query("created_before", TIME, "Created before this time; later than created_after"),
    _query("execution_failed", {"type": "boolean"},
           "true: only triggers one of whose executions failed; false: only those none did"),
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
    _query("cursor", {"type": "string"}, "The next_cursor of the previous page, as given"),
]


def _page_of(name: str) -> dict:
    return _object({"items": {"type": "array", "items": _ref(name)},
                    "total": {"type": "integer", "minimum": 0}})


# --- paths -------------------------------------------------------------------------------------


def _service_paths() -> dict:
    readiness = _ref("Readiness")
    return {
        "/healthz": {"get": _op("Liveness", {"200": _json(_ref("Liveness"))}, public=True,
                                database=False)},
        "/readyz": {"get": _op(
            "Readiness: database reachable, boot recovery done, not shutting down",
            {"200": _json(readiness), "503": _json(readiness, "Not ready; checks says why")},
            public=True, database=False)},
        "/openapi.json": {"get": _op("This document", {"200": _json({"type": "object"})},
                                     public=True, database=False)},
        # Public by default; with auth.metrics_public = false a viewer key (then 401/403).
        "/metrics": {"get": _op(
            "Prometheus metrics (public unless auth.metrics_public is false)",
            {"200": {"description": "Prometheus text exposition format",
                     "content": {"text/plain": {"schema": {"type": "string"}}}}},
            errors=("401", "403"), public=True, database=False)},
        f"{API_BASE}/dispatch/options": {"get": _op(
            "Fields, operators, action types, receivers, strategies, reserved sources",
            {"200": _json(_ref("Options"))}, database=False)},
    }


def _policy_paths() -> dict:
    policy = {"200": _json(_ref("Policy"))}
    edited = {"200": _json(_ref("PolicyWritten"))}
    created = {"201": _json(_ref("PolicyWritten"), "Created", _LOCATION)}
    return {
        f"{API_BASE}/dispatch/policies": {
            "get": _op("List policies (by id)", {"200": _json(_page_of("Policy"))},
                       params=[_query("status", _enum(PolicyStatus)),
                               _query("family_id", {"type": "string"}), *_PAGING]),
            "post": _op("Create a draft policy (a draft may hold problems that block its "
                        "activation)", created, body="PolicyBody"),
        },
        f"{API_BASE}/dispatch/policies/validate": {"post": _op(
            "Validate a policy body without saving it",
            {"200": _json(_ref("ValidationResult"))}, body="PolicyBody")},
        f"{API_BASE}/dispatch/policies/{{policy_id}}": {
            "get": _op("Read a policy", policy, params=_POLICY_ID, errors=("404",)),
            "put": _op("Edit a draft policy", edited, body="PolicyBody", params=_POLICY_ID,
                       errors=("404", "409")),
            "delete": _op("Delete a draft policy", {"204": {"description": "Deleted"}},
                          params=_POLICY_ID, errors=("404", "409")),
        },
        f"{API_BASE}/dispatch/policies/{{policy_id}}/activate": {"post": _op(
            "Activate a version; the family's active version becomes superseded", policy,
            params=_POLICY_ID, errors=("404", "409", "422"))},
        f"{API_BASE}/dispatch/policies/{{policy_id}}/deactivate": {"post": _op(
            "Deactivate the active version", policy, params=_POLICY_ID, errors=("404", "409"))},
        f"{API_BASE}/dispatch/policies/{{policy_id}}/replacements": {"post": _op(
            "Create the next draft version in the same family", created, body="PolicyBody",
            params=_POLICY_ID, errors=("404",))},
        f"{API_BASE}/dispatch/policies/{{policy_id}}/shadow": {
            "post": _op("Put a draft in shadow for its family: evaluated beside every live "
                        "trigger the family's active version handles, writing nothing (409: "
                        "not a draft, or the family has a shadow)",
                        {"201": _json(_ref("ShadowReport"), "In shadow", _LOCATION)},
                        params=_POLICY_ID, errors=("404", "409")),
            "get": _op("What a version decided in shadow beside the live one (zero counts for "
                       "one never shadowed)", {"200": _json(_ref("ShadowReport"))},
                       params=_POLICY_ID, errors=("404",)),
            "delete": _op("Stop the shadow (404: the policy is not in shadow)",
                          {"204": {"description": "Stopped"}}, params=_POLICY_ID,
                          errors=("404",)),
        },
    }


def _dispatch_paths() -> dict:
    return {
        f"{API_BASE}/dispatch/contexts/{{issue_key}}": {
            "get": _op("Read an issue's dispatch context", {"200": _json(_ref("DispatchContext"))},
                       params=_ISSUE_KEY, errors=("404",)),
            "delete": _op("Delete a context (refused while a notification intent or marker "
                          "exists)", {"204": {"description": "Deleted"}}, params=_ISSUE_KEY,
                          errors=("404", "409")),
        },
        f"{API_BASE}/dispatch/triggers": {
            "get": _op("List triggers (newest first), a page at a time by cursor",
                       {"200": _json(_ref("TriggerPage"))}, params=_TRIGGER_FILTERS),
            "post": _op(
                "Post a trigger: persisted pending, processed asynchronously",
                {"202": _json(_ref("Trigger"), "Accepted; Location names the trigger",
                              _LOCATION)},
                body="TriggerBody", errors=("409",))},
        f"{API_BASE}/dispatch/triggers/{{trigger_id}}": {"get": _op(
            "Read a trigger", {"200": _json(_ref("Trigger"))},
            params=[_path_param("trigger_id", ID, 1)], errors=("404",))},
        f"{API_BASE}/dispatch/executions": {"get": _op(
            "List executions (newest first)", {"200": _json(_page_of("Execution"))}, params=[
                _query("issue_key", {"type": "string", "pattern": ISSUE_KEY_PATTERN}),
                _query("status", _enum(ExecutionStatus)), _query("mode", _enum(ExecutionMode)),
                _query("policy_id", ID), _query("trigger_id", ID), *_PAGING])},
        f"{API_BASE}/dispatch/executions/{{execution_id}}": {"get": _op(
            "Read an execution with its rule and action snapshots",
            {"200": _json(_ref("Execution"))}, params=_EXECUTION_ID, errors=("404",))},
        f"{API_BASE}/dispatch/executions/{{execution_id}}/replay": {"post": _op(
            "Replay a failed execution (operator): its trigger's source posted again on the "
            "live issue, for the execution's policy (a reserved source: matched again); "
            "409 when the execution did not fail, or a live execution holds the policy's "
            "lock on the issue", {"202": _json(_object({"trigger_id": ID}),
                                               "Accepted; Location names the new trigger",
                                               _LOCATION)},
            params=_EXECUTION_ID, errors=("404", "409"))},
    }


def _operator_paths() -> dict:
    engineer = _ref("Engineer")
    return {
        f"{API_BASE}/admin/actors": {"get": _op(
            "The live actor system: supervisor, pool, running executions, parked, trigger "
            "actors, clients; from memory, also while the database is down (503: no actor "
            "runtime)", {"200": _json(_ref("ActorStatus"))}, errors=("503",),
            database=False)},
        f"{API_BASE}/admin/executions/{{execution_id}}/cancel": {"post": _op(
            "Cancel a non-terminal execution", {
                "200": _json(_ref("Execution"), "Cancelled: it was queued or parked"),
                "202": _json(_ref("Execution"), "Signalled: its running actor stops at its "
                                                "next step"),
            }, params=_EXECUTION_ID, errors=("404", "409"))},
        f"{API_BASE}/engineers": {"get": _op(
            "List engineers (by email)", {"200": _json(_page_of("Engineer"))},
            params=[_query("dispatch_enabled", {"type": "boolean"}), *_PAGING])},
        f"{API_BASE}/engineers/{{email}}": {
            "get": _op("Read an engineer", {"200": _json(engineer)}, params=_EMAIL,
                       errors=("404",)),
            "put": _op("Create or update an engineer (the email is lower-cased)", {
                "200": _json(engineer, "Updated"), "201": _json(engineer, "Created"),
            }, body="EngineerBody", params=_EMAIL),
            "delete": _op("Delete an engineer and their time off",
                          {"204": {"description": "Deleted"}}, params=_EMAIL, errors=("404",)),
        },
        f"{API_BASE}/engineers/{{email}}/time-off": {
            "get": _op("An engineer's time off, by start: what has not ended, or everything "
                       "with past=true", {"200": _json(_page_of("TimeOff"))},
                       params=[*_EMAIL, _query("past", {"type": "boolean", "default": False}),
                               *_PAGING], errors=("404",)),
            "post": _op("Add time off: no assignment and, where a page says so, no page "
                        "while it lasts", {"201": _json(_ref("TimeOff"), "Added")},
                        body="TimeOffBody", params=_EMAIL, errors=("404",)),
        },
        f"{API_BASE}/engineers/{{email}}/time-off/{{entry_id}}": {
            "delete": _op("Delete time off (a calendar feed's returns at its next refresh if "
                          "the feed still holds it)", {"204": {"description": "Deleted"}},
                          params=[*_EMAIL, _path_param("entry_id", ID, 1)], errors=("404",)),
        },
    }


def _webhook_paths() -> dict:
    answer = _object({
        "status": {"type": "string", "enum": ["accepted", "duplicate", "ignored"]},
        "reason": {"type": "string"}, "trigger_ids": {"type": "array", "items": ID}},
        required=("status",))
    operation = _op(
        "Take a Jira admin webhook delivery (jira:issue_created, jira:issue_updated), signed "
        "with X-Hub-Signature under jira.webhook_secrets; no API key. A body over "
        "jira.webhook_max_bytes is 413", {
            "202": _json(answer, "Accepted: the triggers it made are stored"),
            "200": _json(answer, "Nothing new started: a repeat of a delivery taken before "
                                 "(same X-Atlassian-Webhook-Identifier), another event, or a "
                                 "change the service does not act on")},
        public=True, errors=("401", "413", "429", "503"), params=[
            {"name": "X-Hub-Signature", "in": "header", "required": True,
             "schema": {"type": "string", "pattern": "^sha256=[0-9a-fA-F]{64}$"}},
            {"name": "X-Atlassian-Webhook-Identifier", "in": "header", "required": False,
             "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"}}])
    operation["requestBody"] = {"required": True, "content": {"application/json": {
        "schema": {"type": "object", "description": "Jira's delivery: webhookEvent, issue "
                   "(key and fields), changelog (items), timestamp"}}}}
    return {f"{API_BASE}/jira/webhooks": {"post": operation}}


def _card_action_paths() -> dict:
    toast = _object({"type": {"type": "string", "enum": ["info", "success", "warning", "error"]},
                     "content": {"type": "string"}}, required=("type", "content"))
    answer = _object({
        "challenge": {"type": "string", "description": "Lark's URL check, answered"},
        "toast": toast,
        "card": _object({"type": {"type": "string", "enum": ["raw"]},
                         "data": {"type": "object", "description": "The card, its buttons "
                                  "replaced by what the press did"}})})
    header = [{"name": name, "in": "header", "required": False, "schema": {"type": "string"}}
              for name in ("X-Lark-Signature", "X-Lark-Request-Timestamp",
                           "X-Lark-Request-Nonce")]
    operation = _op(
        "Take Lark's callback of a button pressed on a notification card (card.action.trigger, "
        "schema 2.0), or Lark's URL check; no API key: with lark.encrypt_key the body is "
        "encrypted and X-Lark-Signature signs it, with lark.verification_token the body's token "
        "must match; a timestamp more than 5 minutes from now is stale. 404 with neither "
        "configured", {
            "200": _json(answer, "The answer Lark shows: a toast, and for a press that acted "
                                 "the card updated in place; a repeat of an event answers the "
                                 "same")},
        public=True, errors=("400", "401", "404", "413", "429", "503"), params=header)
    operation["requestBody"] = {"required": True, "content": {"application/json": {
        "schema": {"type": "object", "description": "{\"encrypt\": …}, or the callback: "
                   "schema, header (event_id, event_type, token), event (operator.open_id, "
                   "action.value {action: ack|escalate, execution_id}, "
                   "context.open_message_id)"}}}}
    return {f"{API_BASE}/lark/card-actions": {"post": operation}}


def _audit_paths() -> dict:
    records = _object({"records": {"type": "array", "items": _ref("AuditRecord")},
                       "next_cursor": {"type": "string", "nullable": True}})
    return {f"{API_BASE}/audit": {"get": _op(
        "The audit trail, newest first (operators only): who changed what, how, with its "
        "values before and after; format=jsonl exports the same records as JSON lines, the "
        "next page's cursor in X-Next-Cursor", {
            "200": {"description": "OK", "content": {
                "application/json": {"schema": records},
                "application/x-ndjson": {"schema": {"type": "string"}}}}},
        params=[_query("actor", {"type": "string"}, "An API key's name or a proxy's email"),
                _query("object_type", {"type": "string"}, "policy, engineer, execution, "
                       "trigger, context or console_session"),
                _query("object_id", {"type": "string"}),
                _query("action", {"type": "string"}, "e.g. policy.activated"),
                _query("since", TIME, "At or after this time (RFC 3339 with an offset)"),
                _query("until", TIME, "Before this time; later than since"),
                _query("format", {"type": "string", "enum": ["json", "jsonl"],
                                  "default": "json"}),
                _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_AUDIT_LIMIT,
                                 "default": 100}),
                _query("cursor", {"type": "string"},
                       "The next_cursor of the previous page, as given")])}}


def _maintenance_paths() -> dict:
    window = _ref("MaintenanceWindow")
    return {
        f"{API_BASE}/maintenance-windows": {
            "get": _op("Maintenance windows by start, newest first, those in a state alone "
                       "with state", {"200": _json(_object({
                           "windows": {"type": "array", "items": window}}))},
                       params=[_query("state", _enum(WindowState))]),
            "post": _op("Create a maintenance window (operator): hold or quiet the work of "
                        "its scope from start (now when left out) to end, maybe every day or "
                        "week until a time", {"201": _json(window, "Created", _LOCATION)},
                        body="MaintenanceWindowBody"),
        },
        f"{API_BASE}/maintenance-windows/{{window_id}}/end": {"post": _op(
            "End a window early (the series, for a recurring one); the triggers it holds "
            "run at once (409: it has ended)", {"200": _json(window, "Ended")},
            params=[_path_param("window_id", ID, 1)], errors=("404", "409"))},
    }


def _report_paths() -> dict:
    percentiles = _object({"p50": {"type": "number", "nullable": True},
                           "p90": {"type": "number", "nullable": True}})
    person = _object({
        "email": {"type": "string"}, "assigned": {"type": "integer"},
        "assigned_by_policy": {"type": "object", "additionalProperties": {"type": "integer"}},
        "open_now": {"type": "integer", "nullable": True},
        **{name: {"type": "integer"} for name in (
            "cards", "urgent", "pages", "escalations_received", "escalations_away")},
        "interruptions": _object({band: {"type": "integer"}
                                  for band in ("business", "off", "sleep")}),
        "ack_seconds": _object({"p50": {"type": "number", "nullable": True},
                                "p90": {"type": "number", "nullable": True},
                                "by_source": _object({source: percentiles for source in (
                                    "card_read", "status_change", "button")})})})
    member = _object({"email": {"type": "string"}, "assigned": {"type": "integer"},
                      "eligible_hours": {"type": "number"}, "fair_share": {"type": "number"}})
    ratio = {"type": "number", "nullable": True}
    rotation = _object({"rotation": {"type": "string"}, "policy": {"type": "string"},
                        "members": {"type": "array", "items": member}, "cv": ratio,
                        "max_over_fair": ratio, "min_over_fair": ratio})
    report = _object({
        "from": TIME, "to": TIME, "complete_from": {**TIME, "nullable": True},
        "scope": _object({"kind": {"type": "string"},
                          "value": {"type": "string", "nullable": True}}),
        "people": {"type": "array", "items": person},
        "rotations": {"type": "array", "items": rotation},
        "weekly_pages": {"type": "array", "items": _object({"week": TIME,
                                                            "pages": {"type": "integer"}})}})
    return {f"{API_BASE}/reports/burden": {"get": _op(
        "Who carries the load (viewers and operators): per person the assignments, "
        "notifications, interruptions by band and time to acknowledge; per rotation the "
        "spread of assignments against an even share of eligible time (docs/burden-report.md). "
        "400 when from is after to, the period is over 400 days, or the scope names nothing",
        {"200": {"description": "OK", "content": {
            "application/json": {"schema": report},
            "text/csv": {"schema": {"type": "string"}}}}},
        params=[_query("from", TIME, "Start (RFC 3339 with an offset); default: to less 28 "
                       "days"),
                _query("to", TIME, "End (RFC 3339 with an offset); default: now"),
                _query("policy", {"type": "string"},
                       "A policy's name: every version of its family counts"),
                _query("project", {"type": "string"}, "A Jira project key"),
                _query("rotation", {"type": "string"},
                       "An assign action's receiver, as the report names it (group:sre)"),
                _query("format", {"type": "string", "enum": ["json", "csv"],
                                  "default": "json"})])}}


def _paths() -> dict:
    return {**_service_paths(), **_policy_paths(), **_dispatch_paths(), **_operator_paths(),
            **_webhook_paths(), **_card_action_paths(), **_audit_paths(), **_maintenance_paths(),
            **_report_paths()}


# --- conditions: one leaf variant per operand shape, vocabularies from catalog -----------------

# Which operand each operator takes (domain/conditions.py); a new operator in the catalog without
# an entry here fails the document's tests.
OPERANDS = {
    "eq": "value", "ne": "value", "contains": "value", "not_contains": "value", "regex": "value",
    "in": "values", "not_in": "values",
    "before": "moment", "after": "moment",
    "time_window": "time_window",
    "exists": None, "not_exists": None,
}
_OPERAND_NAMES = {"value": "Value", "values": "Values", "moment": "Moment",
                  "time_window": "Window", None: "Presence"}
# ignore_case applies to these operand kinds only (a rule problem elsewhere).
_CASE_FOLDING = ("value", "values")


def _fields_of(kind: FieldKind) -> list[str]:
    return [name for name, field_kind in catalog.FIELDS.items() if field_kind is kind]


def _leaf(kind: FieldKind, operators: list[str], operand: str | None) -> dict:
    properties: dict = {"field": _enum(_fields_of(kind)), "operator": _enum(operators)}
    required = ["field", "operator"]
    if operand == "value":
        properties["value"] = {"type": "string", "description": "for regex: an RE2 pattern, "
                               "searched (no backreferences or lookaround)"}
    elif operand == "values":
        properties["values"] = {"type": "array", "minItems": 1, "items": {"type": "string"}}
    elif operand == "moment":
        operand = "value"
        properties["value"] = {**TIME, "description": "RFC 3339 with an offset"}
    elif operand == "time_window":
        properties["time_window"] = _ref("TimeWindow")
    if operand in _CASE_FOLDING:
        properties["ignore_case"] = {"type": "boolean"}
    if operand:
        required.append(operand)
    return _object(properties, required)


def _leaf_variants() -> dict[str, dict]:
    """``StringValueLeaf``, ``TimeWindowLeaf`` ...: one per field kind and operand shape."""
    variants = {}
    for kind in FieldKind:
        by_operand: dict[str | None, list[str]] = {}
        for operator in catalog.OPERATORS[kind]:
            by_operand.setdefault(OPERANDS[operator], []).append(operator)
        for operand, operators in by_operand.items():
            name = f"{kind.value.title()}{_OPERAND_NAMES[operand]}Leaf"
            variants[name] = _leaf(kind, operators, operand)
    return variants


def _composite(key: str) -> dict:
    return _object({key: {"type": "array", "minItems": 1, "items": _ref("Condition")}})


def _condition_schemas() -> dict:
    leaves = _leaf_variants()
    return {
        "Condition": {
            "description": "A composite (always, all, any, not) or a leaf; all, "
                           f"any and not nest at most {MAX_CONDITION_DEPTH} levels",
            "oneOf": [_ref(name) for name in ("Always", "All", "Any", "Not", *leaves)]},
        "Always": _object({"always": {"type": "boolean", "enum": [True]}}),
        "All": _composite("all"),
        "Any": _composite("any"),
        "Not": _object({"not": _ref("Condition")}),
        **leaves,
        "TimeWindow": _object({
            "timezone": {"type": "string", "description": "IANA zone, e.g. Asia/Shanghai"},
            "weekdays": {"type": "array", "minItems": 1, "uniqueItems": True,
                         "items": _enum(catalog.WEEKDAYS)},
            "start": {"type": "string", "pattern": HHMM_PATTERN},
            "end": {"type": "string", "pattern": END_PATTERN, "description": "later than start"},
        }, description="Half-open [start, end) in local time of the zone"),
    }


# --- actions -----------------------------------------------------------------------------------


def _receiver_schemas() -> dict:
    email = {"type": "string", "pattern": r"^[^@\s]+@[^@\s]+$"}
    targets = {"user": email, "users": {"type": "array", "minItems": 1, "items": email},
               "group": TEXT, "oncall_team": TEXT}
    return {"Receiver": {"oneOf": [
        _object({"type": _enum([kind]), kind: targets[kind.value]})
        for kind in catalog.ReceiverType]}}


def _action_configs() -> dict[str, dict | None]:
    assign = _object({
        "receiver": _ref("Receiver"), "strategy": _enum(catalog.Strategy),
        "count_jql": {**TEXT, "maxLength": balanced.MAX_COUNT_JQL_LENGTH, "description": (
            f"balanced only: the JQL whose issues count as a candidate's open ones; "
            f"{jql.ACCOUNT} becomes each candidate's Jira account id, quoted. Default: "
            f"{balanced.DEFAULT_COUNT_JQL}")}},
        ("receiver", "strategy"))
    roles = [role.role for role in catalog.NOTIFICATION_ROLES]
    duration = {"type": "string", "pattern": DURATION_PATTERN}
    configs = {
        catalog.ActionType.ASSIGN: assign,
        catalog.ActionType.ASSIGN_L2: assign,
        catalog.ActionType.TRIAGE: _object({
            "priority": TEXT, "components": STRINGS, "labels_add": STRINGS,
            "labels_remove": STRINGS, "fields": {"type": "object"}}, (), minProperties=1),
        catalog.ActionType.SEND_ASSIGNMENT_NOTIFICATION: _object(
            {"role": _enum(roles), "label": TEXT}),
        catalog.ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT: None,
        catalog.ActionType.PAGE_ASSIGNMENT: _object({
            "attempt": {**INT32, "minimum": 1},
            "ack_pending_statuses": {"type": "array", "minItems": 1, "uniqueItems": True,
                                     "items": TEXT},
            "ack_timeout": duration, "poll_interval": duration},
            description="0 < poll_interval <= ack_timeout"),
        catalog.ActionType.ESCALATE_ASSIGNMENT_TO_LEADER: None,
    }
    return {action.value: config for action, config in configs.items()}


def _action_schema(action: str, config: dict | None) -> dict:
    if config is None:  # takes no configuration: the key may be absent, null or {}
        empty = {"type": "object", "additionalProperties": False, "nullable": True}
        return _object({"type": _enum([action]), action: empty}, ["type"])
    return _object({"type": _enum([action]), action: config})


def _action_schemas() -> dict:
    configs = _action_configs()
    return {"Action": {"oneOf": [_action_schema(action, config)
                                 for action, config in configs.items()]},
            **_receiver_schemas()}


# --- bodies and resources ----------------------------------------------------------------------

# A policy as a client writes it; a test checks that it is valid.
POLICY_EXAMPLE = {
    "name": "Assign TCID tickets", "description": "",
    "trigger": {"enable": True, "source_in": [], "project_key_in": ["TCID"],
                "issue_label_all": []},
    "rules": [{
        "name": "business hours", "priority": 10,
        "when": {"all": [
            {"field": "issue.priority", "operator": "in", "values": ["P0", "P1"]},
            {"field": "now", "operator": "time_window", "time_window": {
                "timezone": "Asia/Shanghai", "weekdays": ["mon", "tue", "wed", "thu", "fri"],
                "start": "09:00", "end": "18:00"}}]},
        "then": [{"type": "assign", "assign": {
            "receiver": {"type": "oncall_team", "oncall_team": "sre"},
            "strategy": "round_robin"}}],
        "transition": {"on_success": "terminate"}}],
}
TRIGGER_EXAMPLE = {"source": "jira_automation", "input": {"issue_key": "TCID-1"}}


def _policy_schemas() -> dict:
    transition = _object({"on_success": _enum(catalog.OnSuccess)}, ())
    trigger_lists = {
        "source_in": {"type": "array", "items": {"type": "string", "pattern": SOURCE_PATTERN}},
        "project_key_in": {"type": "array",
                           "items": {"type": "string", "pattern": PROJECT_KEY_PATTERN}},
        "issue_label_all": {"type": "array", "items": TEXT},
    }
    policy = {
        "id": ID, "family_id": {"type": "string", "maxLength": 20},
        "version": {"type": "integer", "minimum": 1}, "status": _enum(PolicyStatus),
        "name": {"type": "string"}, "description": {"type": "string"},
        "trigger": _ref("PolicyTrigger"),
        "rules": {"type": "array", "items": _ref("Rule"),
                  "description": "In run order: (priority, id)"},
        "created_at": TIME, "updated_at": TIME, "activated_at": MAYBE_TIME,
        "origin": {"type": "string", "enum": ["api", "console", "cli", "apply"],
                   "nullable": True, "description": "How the version was made (apply: "
                   "`ticket-dispatcher policy apply`); null before it was kept"}}
    warnings = {"type": "array", "items": _ref("Problem"),
                "description": "What will fail though it is no error, each at its path: an "
                               "email a user or users receiver names that is not a "
                               "dispatch-enabled engineer now (one may be added later)"}
    return {
        "PolicyTriggerBody": _object({"enable": {"type": "boolean"}, **trigger_lists}, ()),
        "RuleBody": _object({
            "name": TEXT, "priority": INT32, "when": _ref("Condition"),
            "then": {"type": "array", "minItems": 1, "items": _ref("Action")},
            "transition": transition}, ["name", "priority", "when", "then"]),
        "PolicyBody": _object({
            "name": {**TEXT, "maxLength": MAX_POLICY_NAME}, "description": {"type": "string"},
            "trigger": _ref("PolicyTriggerBody"),
            "rules": {"type": "array", "minItems": 1, "items": _ref("RuleBody")}},
            ["name", "rules"], example=POLICY_EXAMPLE,
            description="A policy as written: no id, family_id, version, status, timestamps "
                        "or rule ids (all server-assigned)"),
        "PolicyTrigger": _object({"enable": {"type": "boolean"}, "source_in": STRINGS,
                                  "project_key_in": STRINGS, "issue_label_all": STRINGS}),
        "Rule": _object({
            "id": ID, "name": {"type": "string"}, "priority": INT32,
            "when": {"type": "object", "description": "The condition as saved"},
            "then": {"type": "array", "items": _object({"type": {"type": "string"}}, ["type"],
                                                       closed=False)},
            "transition": _object({"on_success": _enum(catalog.OnSuccess)})},
            description="A stored rule; a draft's rule may hold problems that block activation"),
        "Policy": _object(policy),
        "PolicyWritten": _object({**policy, "warnings": warnings},
                                 description="The policy as stored, with what will fail in it "
                                             "though it is no error"),
        "ValidationResult": _object({"valid": {"type": "boolean"},
                                     "errors": {"type": "array", "items": _ref("Problem")},
                                     "warnings": warnings}),
        **_shadow_schemas(),
    }


def _shadow_schemas() -> dict:
    count = {"type": "integer", "minimum": 0}
    kinds = [kind.value for kind in DIFFERENCES]
    return {
        "ShadowDecision": _object({
            "matched_rules": {**STRINGS, "description": "The rules that matched, in run order"},
            "actions": {**STRINGS, "description": "Their action types"},
            "assignee": {"type": "string", "nullable": True,
                         "description": "Whom the first assign or assign_l2 chose"},
            "notification_steps": {**STRINGS, "description": "e.g. page_assignment#1"},
            "error": {"type": "string", "description": "Why the evaluation ended early; "
                                                       "empty when it did not"}}),
        "ShadowCase": _object({
            "trigger_id": ID, "issue_key": {"type": "string"}, "live_execution_id": ID,
            "kind": _enum(kinds), "live": _ref("ShadowDecision"),
            "shadow": _ref("ShadowDecision"), "decided_at": MAYBE_TIME}),
        "ShadowReport": _object({
            "policy_id": ID, "family_id": {"type": "string"},
            "shadowing": {"type": "boolean", "description": "In shadow now"},
            "started_at": {**MAYBE_TIME, "description": "null when not in shadow"},
            "seen": {**count, "description": "agreed + differed + pending"},
            "agreed": count, "differed": count,
            "pending": {**count, "description": "Evaluated; the live execution has not ended"},
            "dropped": {**count, "description": "Not evaluated: the service was busy"},
            "differences": _object({kind: count for kind in kinds},
                                   description="differed, by kind"),
            "latest_differences": {"type": "array", "items": _ref("ShadowCase"),
                                   "description": "Newest first"}}),
    }


def _dispatch_schemas() -> dict:
    now = {"type": "string", "format": "date-time", "nullable": True,
           "description": "The business time of the dry-run; absent or null: the real time"}
    dryrun_body = _object({"overwrite_data": _object({"now": now}, (), nullable=True)}, (),
                          nullable=True)
    dryrun = _object({"overwrite_data": _object({"now": {"type": "string", "nullable": True}},
                                                ())}, nullable=True)
    return {
        "TriggerBody": _object({
            "source": {"type": "string", "pattern": SOURCE_PATTERN},
            "input": _object({"issue_key": {"type": "string", "pattern": ISSUE_KEY_PATTERN}}),
            "policy_id": {**ID, "nullable": True,
                          "description": "Run exactly this policy; not with a reserved source"},
            "dryrun": dryrun_body}, ["source", "input"], example=TRIGGER_EXAMPLE),
        "TriggerPage": _object({
            "items": {"type": "array", "items": _ref("Trigger")},
            "next_cursor": {"type": "string", "nullable": True,
                            "description": "Pass as cursor for the next page; null on the "
                                           "last page"}},
            description="No total: follow next_cursor until it is null"),
        "Trigger": _object({
            "id": ID, "source": {"type": "string"},
            "input": _object({
                "issue_key": {"type": "string"},
                "webhook_delivery": {"type": "string", "description": "A Jira webhook's "
                                     "trigger: the delivery's identifier"},
                "add_label": {"type": "object", "description": "A Jira webhook's role "
                              "trigger: the label it adds to the issue first, and the role's "
                              "account (and urgent rule) the live issue must still show"}},
                required=("issue_key",)),
            "policy_id": {**ID, "nullable": True}, "dryrun": dryrun,
            "status": _enum(TriggerStatus), "available_at": TIME,
            "output": _object({"execution_ids": {"type": "array", "items": ID}}),
            "failure_reason": {"type": "string"},
            "created_at": TIME, "updated_at": TIME, "completed_at": MAYBE_TIME,
            "execution_failed": {"type": "boolean", "description": "One of its executions "
                                 "failed (the trigger itself may be completed)"},
            "retries": _object({
                "count": {"type": "integer", "minimum": 0,
                          "description": "Issue loads put off for a passing fault of Jira "
                                         "(no answer, a failed connection, 429, a 5xx)"},
                "last_reason": {"type": "string", "description": "The last one's reason"},
                "since": {**MAYBE_TIME, "description": "When the first of them failed; the "
                                                       "retry budget counts from it"},
                "next_at": {**MAYBE_TIME, "description": "The next try, while the trigger "
                                                         "waits for it"}}),
            "maintenance_window_id": {**ID, "nullable": True, "description": "The maintenance "
                                      "window holding it while pending, or that last held "
                                      "it"}}),
        "ActionExecution": _object({
            "index": {"type": "integer", "minimum": 0}, "type": {"type": "string"},
            "status": _enum(ActionStatus), "action": {"type": "object"},
            "context": {"type": "object"}, "result": {"type": "string"},
            "error": {"type": "string"}, "started_at": MAYBE_TIME, "planned_at": MAYBE_TIME,
            "finished_at": MAYBE_TIME}),
        "RuleExecution": _object({
            "sequence": {"type": "integer", "minimum": 0}, "rule_id": ID,
            "name": {"type": "string"}, "priority": INT32, "when": {"type": "object"},
            "transition": _object({"on_success": _enum(catalog.OnSuccess)}),
            "outcome": _enum(RuleOutcome),
            "evaluation": {"type": "object", "nullable": True,
                           "description": "matched, reason, evaluated_at; tree: the condition "
                                          "with every node evaluated (absent on rule "
                                          "executions evaluated by older releases)"},
            "action_executions": {"type": "array", "items": _ref("ActionExecution")}}),
        "Execution": _object({
            "id": ID, "trigger_id": ID, "issue_key": {"type": "string"},
            "mode": _enum(ExecutionMode), "policy_id": ID,
            "policy_family_id": {"type": "string"}, "policy_version": {"type": "integer"},
            "status": _enum(ExecutionStatus), "failure_code": {"type": "string"},
            "failure_reason": {"type": "string"},
            "overwrite_data": {"type": "object", "nullable": True},
            "business_now": MAYBE_TIME, "wake_at": MAYBE_TIME, "created_at": TIME,
            "updated_at": TIME, "completed_at": MAYBE_TIME,
            "rule_executions": {"type": "array", "items": _ref("RuleExecution")}}),
        "DispatchContext": _object({
            "issue_key": {"type": "string"}, "assignee": {"type": "string"},
            "assignee_l2": {"type": "string"},
            "assignment_notification_state": {"type": "object"},
            "created_at": MAYBE_TIME, "updated_at": MAYBE_TIME}),
    }


def _service_schemas() -> dict:
    options = catalog.options()
    strings_of = {key: {"type": "array", "items": _enum(options[key])}
                  for key in ("weekdays", "action_types", "receiver_types", "strategies",
                              "transitions")}
    return {
        "Problem": _object({"path": {"type": "string"}, "message": {"type": "string"}}),
        "Error": _object({
            "code": {"type": "string", "description": "validation_failed, unauthorized, ..."},
            "title": {"type": "string"}, "description": {"type": "string"},
            "errors": {"type": "array", "items": _ref("Problem")}}),
        "Liveness": _object({"status": _enum(["ok"])}),
        "Readiness": _object({"status": _enum(["ready", "not_ready"]), "checks": _object(
            {"database": {"type": "boolean"}, "recovery": {"type": "boolean"},
             "running": {"type": "boolean"}})}),
        "Options": _object({
            "fields": {"type": "array", "items": _object(
                {"name": _enum(catalog.FIELDS), "kind": _enum(FieldKind)})},
            "operators": _object({kind.value: {"type": "array",
                                               "items": _enum(catalog.OPERATORS[kind])}
                                  for kind in FieldKind}),
            **strings_of,
            "reserved_sources": {"type": "array", "items": _object(
                {"source": {"type": "string"}, "role": {"type": "string"},
                 "label": {"type": "string"}})}}),
        "ActorStatus": _object({
            "supervisor": {"type": "object"}, "scheduler": {"type": "object"},
            "pool": {"type": "object"}, "executions": {"type": "array",
                                                       "items": {"type": "object"}},
            "parked_executions": {"type": "array", "items": _object({
                "execution_id": {"type": "integer"}, "issue_key": {"type": "string"},
                "wake_at": {"type": "string", "format": "date-time", "nullable": True},
                "action": {"type": "string", "description": "rule: index:type, or "
                                                            "retrying the issue load"},
                "attempt": {"type": "integer", "nullable": True},
                "deadline": {"type": "string", "nullable": True},
                "details": {"type": "string", "description": "Only while the database "
                            "cannot be read: the entry then holds execution_id and wake_at"}},
                ["execution_id", "wake_at"])},
            "retries": _object({
                "database_waits": {"type": "integer", "minimum": 0, "description": "This "
                                   "process's executions and triggers waiting out a backoff "
                                   "after a database failure"},
                "jira_retries": {"type": "integer", "minimum": 0, "nullable": True,
                                 "description": "Triggers waiting for their next try after a "
                                 "passing fault of Jira, and executions parked to retry their "
                                 "issue load; null while the database cannot be read"}}),
            "replicas": {
                "description": "Every process serving this database, by its heartbeats (an "
                               "object saying it is unavailable while the database cannot be "
                               "read)",
                "oneOf": [{"type": "array", "items": _object({
                    "owner": {"type": "string"}, "self": {"type": "boolean"},
                    "host": {"type": "string"}, "pid": {"type": "integer"},
                    "version": {"type": "string"},
                    "started_at": {"type": "string", "format": "date-time"},
                    "last_heartbeat": {"type": "string", "format": "date-time"},
                    "alive": {"type": "boolean"}, "slots": {"type": "integer"},
                    "busy": {"type": "integer"}, "parked": {"type": "integer"}})},
                    _object({"unavailable": {"type": "string"}})]},
            "cluster": _object({
                "mode": _enum(["single", "shared"]),
                "draining": {"type": "boolean", "description": "the shutdown has begun"}}),
            "ack_watch": _object({
                "watched": {"type": "integer", "description": "parked page waits the ACK "
                                                              "watcher looks at"},
                "looks_per_second": {"type": "number", "description": "its pace; 0: none"},
                "round_seconds": {"type": "number", "description": "one look at each "
                                  "watched wait at that pace"}}),
            "trigger_actors": {"type": "object"}, "clients": {"type": "object"}},
            closed=False),
        "EngineerBody": _object({
            "dispatch_enabled": {"type": "boolean"},
            "display_name": {"type": "string", "nullable": True, "maxLength": MAX_DISPLAY_NAME},
            "jira_account_id": {"type": "string", "nullable": True,
                                "maxLength": MAX_ACCOUNT_ID},
            "timezone": {"type": "string", "nullable": True,
                         "description": "an IANA time zone; working hours are read in it"},
            "working_hours": WORKING_HOURS,
            "max_open_issues": CAP}, ["dispatch_enabled"],
            example={"dispatch_enabled": True, "display_name": "Alice",
                     "timezone": "Asia/Shanghai",
                     "working_hours": {"mon": ["09:00-12:00", "13:00-18:00"]},
                     "max_open_issues": 8}),
        "Engineer": _object({
            "email": {"type": "string"}, "display_name": {"type": "string"},
            "jira_account_id": {"type": "string"}, "dispatch_enabled": {"type": "boolean"},
            "timezone": {"type": "string"}, "working_hours": WORKING_HOURS,
            "max_open_issues": CAP,
            "availability": _object({
                "available": {"type": "boolean"}, "reasons": STRINGS,
                "until": {**MAYBE_TIME, "description": "when available again, at the "
                          "earliest (null: now, or not within 14 days)"}}),
            "last_dispatched_at": MAYBE_TIME, "last_dispatched_issue": {"type": "string"},
            "created_at": TIME, "updated_at": TIME}),
        "TimeOffBody": _object({
            "start": TIME, "end": TIME,
            "reason": {"type": "string", "maxLength": 500}}, ["start", "end"],
            example={"start": "2026-12-21T00:00:00+08:00", "end": "2027-01-04T00:00:00+08:00",
                     "reason": "vacation"}),
        "AuditRecord": _object({
            "id": ID, "at": TIME, "actor": {"type": "string"},
            "via": {"type": "string", "enum": [via.value for via in Via]},
            "action": {"type": "string"}, "object_type": {"type": "string"},
            "object_id": {"type": "string"},
            "before": {"description": "The object's values before (null: none); secrets "
                                      "are [redacted]", "nullable": True},
            "after": {"description": "The object's values after (null: deleted)",
                      "nullable": True}}),
        **_maintenance_schemas(),
        "TimeOff": _object({
            "id": ID, "email": {"type": "string"}, "start": TIME, "end": TIME,
            "reason": {"type": "string"},
            "source": {"type": "string", "description": "api, or the calendar feed's name"}}),
    }


def _maintenance_schemas() -> dict:
    names = {"type": "array", "items": {"type": "string", "minLength": 1, "pattern": r"\S"},
             "uniqueItems": True, "maxItems": 100}
    scope = {"type": "object", "additionalProperties": False,
             "description": "Work of any of these projects, sources or policies (by name), "
                            "or all: true",
             "properties": {"projects": names, "policies": names, "sources": names,
                            "all": {"type": "boolean"}}}
    recurrence = _object({"every": _enum(Every), "until": TIME},
                         description="Repeat every day or week; no occurrence starts after "
                                     "until")
    return {
        "MaintenanceWindowBody": _object({
            "scope": scope, "reason": {"type": "string", "maxLength": MAX_WINDOW_REASON},
            "start": {**TIME, "description": "Now when left out"},
            "end": {**TIME, "description": "After start, at most maintenance.max_duration "
                                           "later"},
            "recurrence": {**recurrence, "nullable": True}, "effect": _enum(Effect)},
            ["scope", "end", "effect"],
            example={"scope": {"projects": ["OPS"]}, "reason": "database migration",
                     "end": "2099-01-01T00:00:00Z", "effect": "hold"}),
        "MaintenanceWindow": _object({
            "id": ID, "state": _enum(WindowState), "scope": scope,
            "reason": {"type": "string"}, "effect": _enum(Effect), "start": TIME, "end": TIME,
            "recurrence": {**recurrence, "nullable": True},
            "current_until": {**MAYBE_TIME, "description": "The end of the occurrence it is "
                                                           "in now"},
            "ended_at": {**MAYBE_TIME, "description": "When an operator ended it early"},
            "created_at": TIME}),
    }


def schemas() -> dict:
    return {**_service_schemas(), **_policy_schemas(), **_condition_schemas(),
            **_action_schemas(), **_dispatch_schemas()}


def document() -> dict:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Ticket Dispatcher", "version": __version__},
        "paths": _paths(),
        "components": {
            "schemas": schemas(),
            "responses": _error_responses(),
            "securitySchemes": {"ApiKey": {"type": "apiKey", "in": "header",
                                           "name": "X-API-KEY"}},
        },
        "security": [{"ApiKey": []}],
    }


class OpenApiDocument:
    roles = {"GET": PUBLIC}
    uses_database = False  # a static document (http/middleware.py)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = document()
