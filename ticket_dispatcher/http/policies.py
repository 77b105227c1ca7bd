"""Policy endpoints: list, draft CRUD, lifecycle moves, validation (docs/policies.md,
"From file to live: validate, test, dry run, activate") and shadows (docs/policies.md,
"Shadow: try a change on live traffic")."""

from __future__ import annotations

from typing import Any

import falcon

from ticket_dispatcher.domain import validation
from ticket_dispatcher.domain.model import Policy, PolicyStatus
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.binding import page, paging, query_choice, read_json
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
        spec = validation.parse_policy_spec(_read_policy(req, self._services),
                                            self._services.registry)
        policy = self._services.store.policies.create(spec, now=self._services.clock.now())
        _created(req, resp, policy)


class PolicyItem:
    roles = {"GET": VIEWER, "PUT": OPERATOR, "DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        resp.media = self._services.store.policies.get(policy_id).to_json()

    def on_put(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        spec = validation.parse_policy_spec(_read_policy(req, self._services),
                                            self._services.registry)
        policy = self._services.store.policies.update_draft(
            policy_id, spec, now=self._services.clock.now()
        )
        resp.media = policy.to_json()

    def on_delete(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        self._services.store.policies.delete_draft(policy_id)
        resp.status = falcon.HTTP_204


class PolicyActivation:
    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        # The store validates inside the activation (422 with every problem).
        policy = self._services.store.policies.activate(policy_id, now=self._services.clock.now())
        resp.media = policy.to_json()


class PolicyDeactivation:
    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        policy = self._services.store.policies.deactivate(
            policy_id, now=self._services.clock.now()
        )
        resp.media = policy.to_json()


class PolicyReplacements:
    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        spec = validation.parse_policy_spec(_read_policy(req, self._services),
                                            self._services.registry)
        policy = self._services.store.policies.create_replacement(
            policy_id, spec, now=self._services.clock.now()
        )
        _created(req, resp, policy)


class PolicyValidation:
    roles = {"POST": VIEWER}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        problems = validation.validate_policy(_read_policy(req, self._services),
                                              self._services.registry)
        resp.media = {"valid": not problems, "errors": [p.to_json() for p in problems]}


class PolicyShadow:
    """A draft in shadow for its family: start, stop, and what it decided."""

    roles = {"GET": VIEWER, "POST": OPERATOR, "DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        shadows = self._services.store.shadows
        shadows.start(policy_id, now=self._services.clock.now())
        resp.status = falcon.HTTP_201
        resp.location = _shadow_path(policy_id)
        resp.media = shadows.report(policy_id).to_json()

    def on_get(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        # A policy never shadowed answers 200 with shadowing false and zero counts.
        resp.media = self._services.store.shadows.report(policy_id).to_json()

    def on_delete(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        self._services.store.shadows.stop(policy_id)
        resp.status = falcon.HTTP_204


def _shadow_path(policy_id: int) -> str:
    return f"{API_BASE}/dispatch/policies/{policy_id}/shadow"


def _created(req: falcon.Request, resp: falcon.Response, policy: Policy) -> None:
    resp.status = falcon.HTTP_201
    resp.location = f"{API_BASE}/dispatch/policies/{policy.id}"
    resp.media = policy.to_json()
