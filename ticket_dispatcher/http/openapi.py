"""The OpenAPI 3 document of the API, served at ``/openapi.json`` (SPEC §10).

Written out by hand so it says what a client needs; ``tests/http/test_openapi.py`` checks that
every route and method the app serves is documented here and nothing more.
"""

from __future__ import annotations

from ticket_dispatcher import __version__
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.auth import PUBLIC

_ERROR = {"$ref": "#/components/responses/Error"}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict, description: str = "OK") -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(summary: str, ok: dict | None = None, *, status: str = "200", body: str | None = None,
        params: list | None = None, errors: tuple = ("400", "401", "403"),
        public: bool = False) -> dict:
    operation: dict = {"summary": summary, "responses": {status: ok or {"description": "OK"}}}
    for code in errors:
        operation["responses"][code] = _ERROR
    if body:
        operation["requestBody"] = {
            "required": True, "content": {"application/json": {"schema": _ref(body)}},
        }
    if params:
        operation["parameters"] = params
    if public:
        operation["security"] = []
    return operation


def _path_param(name: str, schema_type: str = "string") -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": schema_type}}


def _query(name: str, schema_type: str = "string", description: str = "") -> dict:
    return {"name": name, "in": "query", "required": False, "schema": {"type": schema_type},
            "description": description}


_PAGING = [_query("limit", "integer", "1..200, default 50"), _query("offset", "integer", ">= 0")]
_POLICY_ID = [_path_param("policy_id", "integer")]


def _page_of(name: str) -> dict:
    return {"type": "object", "required": ["items", "total"], "properties": {
        "items": {"type": "array", "items": _ref(name)}, "total": {"type": "integer"}}}


def _paths() -> dict:
    policy = _json(_ref("Policy"))
    return {
        "/healthz": {"get": _op("Liveness", errors=(), public=True)},
        "/readyz": {"get": _op("Readiness: database reachable and boot recovery done",
                               errors=("503",), public=True)},
        "/openapi.json": {"get": _op("This document", errors=(), public=True)},
        f"{API_BASE}/dispatch/options": {"get": _op(
            "Fields, operators, action types, receivers, strategies, reserved sources",
            _json({"type": "object"}))},
        f"{API_BASE}/dispatch/policies": {
            "get": _op("List policies", _json(_page_of("Policy")), params=[
                _query("status", description="draft | active | inactive | superseded"),
                _query("family_id"), *_PAGING]),
            "post": _op("Create a draft policy", _json(_ref("Policy"), "Created"),
                        status="201", body="PolicyBody", errors=("400", "401", "403", "413",
                                                                  "415")),
        },
        f"{API_BASE}/dispatch/policies/validate": {"post": _op(
            "Validate a policy body without saving it",
            _json({"type": "object", "properties": {
                "valid": {"type": "boolean"},
                "errors": {"type": "array", "items": _ref("Problem")}}}),
            body="PolicyBody", errors=("400", "401", "403", "413", "415"))},
        f"{API_BASE}/dispatch/policies/{{policy_id}}": {
            "get": _op("Read a policy", policy, params=_POLICY_ID, errors=("401", "403", "404")),
            "put": _op("Edit a draft policy", policy, body="PolicyBody", params=_POLICY_ID,
                       errors=("400", "401", "403", "404", "409", "413", "415")),
            "delete": _op("Delete a draft policy", {"description": "Deleted"}, status="204",
                          params=_POLICY_ID, errors=("401", "403", "404", "409")),
        },
        f"{API_BASE}/dispatch/policies/{{policy_id}}/activate": {"post": _op(
            "Activate a version; the family's active version becomes superseded", policy,
            params=_POLICY_ID, errors=("401", "403", "404", "409", "422"))},
        f"{API_BASE}/dispatch/policies/{{policy_id}}/deactivate": {"post": _op(
            "Deactivate the active version", policy, params=_POLICY_ID,
            errors=("401", "403", "404", "409"))},
        f"{API_BASE}/dispatch/policies/{{policy_id}}/replacements": {"post": _op(
            "Create the next draft version in the same family", _json(_ref("Policy"), "Created"),
            status="201", body="PolicyBody", params=_POLICY_ID,
            errors=("400", "401", "403", "404", "413", "415"))},
        f"{API_BASE}/dispatch/contexts/{{issue_key}}": {
            "get": _op("Read an issue's dispatch context", _json(_ref("DispatchContext")),
                       params=[_path_param("issue_key")], errors=("400", "401", "403", "404")),
            "delete": _op("Delete a context (refused while a notification intent or marker "
                          "exists)", {"description": "Deleted"}, status="204",
                          params=[_path_param("issue_key")],
                          errors=("400", "401", "403", "404", "409")),
        },
        f"{API_BASE}/dispatch/triggers": {"post": _op(
            "Post a trigger: persisted pending, processed asynchronously",
            _json(_ref("Trigger"), "Accepted; Location names the trigger"), status="202",
            body="TriggerBody",
            errors=("400", "401", "403", "409", "413", "415", "429", "503"))},
        f"{API_BASE}/dispatch/triggers/{{trigger_id}}": {"get": _op(
            "Read a trigger", _json(_ref("Trigger")),
            params=[_path_param("trigger_id", "integer")], errors=("401", "403", "404"))},
        f"{API_BASE}/dispatch/executions": {"get": _op(
            "List executions (newest first)", _json(_page_of("Execution")), params=[
                _query("issue_key"), _query("status", description="created | executing | "
                                                               "succeeded | failed"),
                _query("mode", description="live | dry_run"), _query("policy_id", "integer"),
                _query("trigger_id", "integer"), *_PAGING])},
        f"{API_BASE}/dispatch/executions/{{execution_id}}": {"get": _op(
            "Read an execution with its rule and action snapshots", _json(_ref("Execution")),
            params=[_path_param("execution_id", "integer")], errors=("401", "403", "404"))},
        f"{API_BASE}/admin/actors": {"get": _op(
            "The live actor system: supervisor, pool, running executions, parked, trigger "
            "actors, clients", _json({"type": "object"}), errors=("401", "403", "503"))},
        f"{API_BASE}/admin/executions/{{execution_id}}/cancel": {"post": _op(
            "Cancel a non-terminal execution (202 when its running actor stops at its next "
            "step)", _json(_ref("Execution")), params=[_path_param("execution_id", "integer")],
            errors=("401", "403", "404", "409", "503"))},
        f"{API_BASE}/engineers": {"get": _op(
            "List engineers", _json(_page_of("Engineer")),
            params=[_query("dispatch_enabled", "boolean"), *_PAGING])},
        f"{API_BASE}/engineers/{{email}}": {
            "get": _op("Read an engineer", _json(_ref("Engineer")),
                       params=[_path_param("email")], errors=("400", "401", "403", "404")),
            "put": _op("Create or update an engineer (201 when created)",
                       _json(_ref("Engineer")), body="EngineerBody",
                       params=[_path_param("email")],
                       errors=("400", "401", "403", "413", "415")),
            "delete": _op("Delete an engineer", {"description": "Deleted"}, status="204",
                          params=[_path_param("email")], errors=("400", "401", "403", "404")),
        },
    }


_STRINGS = {"type": "array", "items": {"type": "string"}}
_TIME = {"type": "string", "format": "date-time", "nullable": True}

_SCHEMAS = {
    "Problem": {"type": "object", "properties": {
        "path": {"type": "string"}, "message": {"type": "string"}}},
    "Error": {"type": "object", "required": ["code", "title", "description", "errors"],
              "properties": {"code": {"type": "string"}, "title": {"type": "string"},
                             "description": {"type": "string"},
                             "errors": {"type": "array", "items": _ref("Problem")}}},
    "PolicyTrigger": {"type": "object", "additionalProperties": False, "properties": {
        "enable": {"type": "boolean"}, "source_in": _STRINGS, "project_key_in": _STRINGS,
        "issue_label_all": _STRINGS}},
    "RuleBody": {"type": "object", "additionalProperties": False,
                 "required": ["name", "priority", "when", "then"], "properties": {
                     "name": {"type": "string"}, "priority": {"type": "integer"},
                     "when": {"type": "object", "description": "condition (SPEC §4.3)"},
                     "then": {"type": "array", "items": {"type": "object"}},
                     "transition": {"type": "object", "properties": {
                         "on_success": {"type": "string", "enum": ["continue", "terminate"]}}}}},
    "PolicyBody": {"type": "object", "additionalProperties": False, "required": ["name", "rules"],
                   "properties": {"name": {"type": "string"}, "description": {"type": "string"},
                                  "trigger": _ref("PolicyTrigger"),
                                  "rules": {"type": "array", "items": _ref("RuleBody")}}},
    "Policy": {"type": "object", "properties": {
        "id": {"type": "integer"}, "family_id": {"type": "string"},
        "version": {"type": "integer"},
        "status": {"type": "string", "enum": ["draft", "active", "inactive", "superseded"]},
        "name": {"type": "string"}, "description": {"type": "string"},
        "trigger": _ref("PolicyTrigger"),
        "rules": {"type": "array", "items": {"allOf": [_ref("RuleBody"), {
            "type": "object", "properties": {"id": {"type": "integer"}}}]}},
        "created_at": _TIME, "updated_at": _TIME, "activated_at": _TIME}},
    "TriggerBody": {"type": "object", "additionalProperties": False,
                    "required": ["source", "input"], "properties": {
                        "source": {"type": "string"},
                        "input": {"type": "object", "required": ["issue_key"], "properties": {
                            "issue_key": {"type": "string"}}},
                        "policy_id": {"type": "integer", "nullable": True},
                        "dryrun": {"type": "object", "nullable": True, "properties": {
                            "overwrite_data": {"type": "object", "properties": {
                                "now": {"type": "string", "format": "date-time"}}}}}}},
    "Trigger": {"type": "object", "properties": {
        "id": {"type": "integer"}, "source": {"type": "string"},
        "input": {"type": "object"}, "policy_id": {"type": "integer", "nullable": True},
        "dryrun": {"type": "object", "nullable": True},
        "status": {"type": "string", "enum": ["pending", "processing", "completed", "failed"]},
        "available_at": _TIME, "output": {"type": "object", "properties": {
            "execution_ids": {"type": "array", "items": {"type": "integer"}}}},
        "failure_reason": {"type": "string"},
        "created_at": _TIME, "updated_at": _TIME, "completed_at": _TIME}},
    "Execution": {"type": "object", "properties": {
        "id": {"type": "integer"}, "trigger_id": {"type": "integer"},
        "issue_key": {"type": "string"}, "mode": {"type": "string", "enum": ["live", "dry_run"]},
        "policy_id": {"type": "integer"}, "policy_family_id": {"type": "string"},
        "policy_version": {"type": "integer"},
        "status": {"type": "string",
                   "enum": ["created", "executing", "succeeded", "failed"]},
        "failure_code": {"type": "string"}, "failure_reason": {"type": "string"},
        "overwrite_data": {"type": "object", "nullable": True},
        "business_now": _TIME, "wake_at": _TIME, "created_at": _TIME, "updated_at": _TIME,
        "completed_at": _TIME,
        "rule_executions": {"type": "array", "items": {"type": "object"}}}},
    "EngineerBody": {"type": "object", "additionalProperties": False,
                     "required": ["dispatch_enabled"], "properties": {
                         "dispatch_enabled": {"type": "boolean"},
                         "display_name": {"type": "string"},
                         "jira_account_id": {"type": "string"}}},
    "Engineer": {"type": "object", "properties": {
        "email": {"type": "string"}, "display_name": {"type": "string"},
        "jira_account_id": {"type": "string"}, "dispatch_enabled": {"type": "boolean"},
        "last_dispatched_at": _TIME, "last_dispatched_issue": {"type": "string"},
        "created_at": _TIME, "updated_at": _TIME}},
    "DispatchContext": {"type": "object", "properties": {
        "issue_key": {"type": "string"}, "assignee": {"type": "string"},
        "assignee_l2": {"type": "string"},
        "assignment_notification_state": {"type": "object"},
        "created_at": _TIME, "updated_at": _TIME}},
}


def document() -> dict:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Ticket Dispatcher", "version": __version__},
        "paths": _paths(),
        "components": {
            "schemas": _SCHEMAS,
            "responses": {"Error": _json(_ref("Error"), "Error")},
            "securitySchemes": {"ApiKey": {"type": "apiKey", "in": "header",
                                           "name": "X-API-KEY"}},
        },
        "security": [{"ApiKey": []}],
    }


class OpenApiDocument:
    roles = {"GET": PUBLIC}
    uses_database = False  # a static document (http/middleware.py)

    def on_get(self, req, resp) -> None:
        resp.media = document()
