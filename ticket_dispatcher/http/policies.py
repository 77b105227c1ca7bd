"""Policy endpoints: list, draft CRUD, lifecycle moves, validation (docs/policies.md,
"From file to live: validate, test, dry run, activate") and shadows (docs/policies.md,
"Shadow: try a change on live traffic")."""

from __future__ import annotations

from typing import Any

import falcon

from ticket_dispatcher.domain import validation
from ticket_dispatcher.domain.model import Policy, PolicyStatus
from ticket_dispatcher.errors import Problem, StoreUnavailable
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.binding import page, paging, query_choice, read_json
from ticket_dispatcher.http.changes import author_of
from ticket_dispatcher.http.services import Services

# Multi-line free text in a policy body, where TAB, LF and CR are allowed (http/binding.py):
# the description, and the values a triage action writes into Jira fields (Jira text areas hold
# several lines). Names, labels, emails, sources and condition values stay single-line.
MULTILINE_PATHS = ("description", "rules[].then[].triage.fields")


def _read_policy(req: falcon.Request, services: Services) -> Any:
    return read_json(req, services.max_body_bytes, max_depth=services.max_json_depth,
                     multiline=MULTILINE_PATHS)


def _status(text: str) -> PolicyStatus:
    return PolicyStatus(text)


def _warnings(raw: Any, services: Services, errors: list[Problem] | None = None) -> list[dict]:
    """What will fail though it is no error (``validation.receiver_warnings``): the emails a
    ``users`` receiver names that are no dispatch-enabled engineer, checked in the store. A
    store that cannot answer is one warning saying so, never a failed validation."""
    if errors is None:
        errors = validation.validate_policy(raw, services.registry)
    try:
        warnings = validation.receiver_warnings(
            raw, services.store.engineers.dispatch_switches, errors)
    except StoreUnavailable:
        warnings = [Problem("", "the engineers the receivers name were not checked: the "
                                "database is unavailable", "warning")]
    return [warning.to_json() for warning in warnings]


class PolicyCollection:
    roles = {"GET": VIEWER, "POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit, offset = paging(req)
        status = query_choice(req, "status", _status, "one of " + ", ".join(PolicyStatus))
        items, total = self._services.store.policies.page(
            status=status, family_id=req.get_param("family_id"), limit=limit, offset=offset
        )
        resp.media = page(items, total)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        raw = _read_policy(req, self._services)
        spec = validation.parse_policy_spec(raw, self._services.registry)
        policy = self._services.changes.create_policy(author_of(req), spec)
        _created(req, resp, policy, _warnings(raw, self._services))


class PolicyItem:
    roles = {"GET": VIEWER, "PUT": OPERATOR, "DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        resp.media = self._services.store.policies.get(policy_id).to_json()

    def on_put(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        raw = _read_policy(req, self._services)
        spec = validation.parse_policy_spec(raw, self._services.registry)
        policy = self._services.changes.update_draft(author_of(req), policy_id, spec)
        resp.media = {**policy.to_json(), "warnings": _warnings(raw, self._services)}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        self._services.changes.delete_draft(author_of(req), policy_id)
        resp.status = falcon.HTTP_204


class PolicyActivation:
    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        # The store validates inside the activation (422 with every problem).
        policy = self._services.changes.activate(author_of(req), policy_id)
        resp.media = policy.to_json()


class PolicyDeactivation:
    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        policy = self._services.changes.deactivate(author_of(req), policy_id)
        resp.media = policy.to_json()


class PolicyReplacements:
    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        raw = _read_policy(req, self._services)
        spec = validation.parse_policy_spec(raw, self._services.registry)
        policy = self._services.changes.create_replacement(author_of(req), policy_id, spec)
        _created(req, resp, policy, _warnings(raw, self._services))


class PolicyValidation:
    roles = {"POST": VIEWER}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        raw = _read_policy(req, self._services)
        problems = validation.validate_policy(raw, self._services.registry)
        # Warnings do not make a policy invalid: an engineer may be added before it runs.
        resp.media = {"valid": not problems, "errors": [p.to_json() for p in problems],
                      "warnings": _warnings(raw, self._services, problems)}


class PolicyShadow:
    """A draft in shadow for its family: start, stop, and what it decided."""

    roles = {"GET": VIEWER, "POST": OPERATOR, "DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        self._services.changes.start_shadow(author_of(req), policy_id)
        resp.status = falcon.HTTP_201
        resp.location = _shadow_path(policy_id)
        resp.media = self._services.store.shadows.report(policy_id).to_json()

    def on_get(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        # A policy never shadowed answers 200 with shadowing false and zero counts.
        resp.media = self._services.store.shadows.report(policy_id).to_json()

    def on_delete(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        self._services.changes.stop_shadow(author_of(req), policy_id)
        resp.status = falcon.HTTP_204


def _shadow_path(policy_id: int) -> str:
    return f"{API_BASE}/dispatch/policies/{policy_id}/shadow"


def _created(req: falcon.Request, resp: falcon.Response, policy: Policy,
             warnings: list[dict]) -> None:
    resp.status = falcon.HTTP_201
    resp.location = f"{API_BASE}/dispatch/policies/{policy.id}"
    resp.media = {**policy.to_json(), "warnings": warnings}
