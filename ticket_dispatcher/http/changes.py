"""Every change an operator makes to policies, engineers and stored state, made and audited in
one transaction (docs/operations.md, "Audit trail").

The API's resources and the console's actions both change things through ``Changes``, so a
change has one meaning and one record whichever way it came. Who made it comes with each call
(``Author``); ``author_of`` reads it off an API request.
"""

from __future__ import annotations

from typing import Any

import falcon

from ticket_dispatcher.clock import Clock
from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.engineers import AvailabilityChanges
from ticket_dispatcher.domain.maintenance import MaintenanceWindow
from ticket_dispatcher.domain.model import Engineer, Policy, PolicySpec, PolicyStatus
from ticket_dispatcher.errors import NotFound
from ticket_dispatcher.store import Store
from ticket_dispatcher.store.audit import Author, Via
from ticket_dispatcher.store.shadows import Shadow

# The header the command line sends, so that its changes through the API are told apart.
CLIENT_HEADER = "X-Ticket-Dispatcher-Client"
ANONYMOUS = "anonymous"  # authentication off (the sandbox, --insecure-no-auth)
APPLY = "apply"  # the header's value from ``policy apply``


def author_of(req: falcon.Request) -> Author:
    """Who made an API request: the key's name, and ``cli`` when the command line sent it
    (``apply`` from ``policy apply``)."""
    name = getattr(req.context, "api_key_name", None) or ANONYMOUS
    client = (req.get_header(CLIENT_HEADER) or "").lower()
    if client in ("cli", APPLY):
        return Author(name, Via.CLI, applying=client == APPLY)
    return Author(name, Via.API)


class Changes:
    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    # -- policies ------------------------------------------------------------------------

    def create_policy(self, by: Author, spec: PolicySpec) -> Policy:
        policies = self._store.policies
        return self._policy(by, "policy.created",
                            lambda: policies.create(spec, self._now(), by.origin))

    def create_replacement(self, by: Author, policy_id: int, spec: PolicySpec) -> Policy:
        policies = self._store.policies
        return self._policy(by, "policy.created", lambda: policies.create_replacement(
            policy_id, spec, self._now(), by.origin))

    def update_draft(self, by: Author, policy_id: int, spec: PolicySpec) -> Policy:
        policies = self._store.policies
        return self._policy(by, "policy.replaced",
                            lambda: policies.update_draft(policy_id, spec, self._now()),
                            before=lambda: policies.get(policy_id).to_json())

    def delete_draft(self, by: Author, policy_id: int) -> None:
        policies = self._store.policies
        self._store.audit.changed(by, "policy.deleted", "policy",
                                  lambda: policies.delete_draft(policy_id),
                                  object_id=lambda _: policy_id, after=lambda _: None,
                                  before=lambda: policies.get(policy_id).to_json(),
                                  now=self._now())

    def activate(self, by: Author, policy_id: int) -> Policy:
        """Activate a version; activating a superseded one is a rollback, and says so."""
        policies = self._store.policies
        before = policies.get(policy_id)
        action = ("policy.rolled_back" if before.status is PolicyStatus.SUPERSEDED
                  else "policy.activated")
        return self._policy(by, action, lambda: policies.activate(policy_id, self._now()),
                            before=lambda: _status(policies.get(policy_id)))

    def deactivate(self, by: Author, policy_id: int) -> Policy:
        policies = self._store.policies
        return self._policy(by, "policy.deactivated",
                            lambda: policies.deactivate(policy_id, self._now()),
                            before=lambda: _status(policies.get(policy_id)))

    def start_shadow(self, by: Author, policy_id: int) -> Shadow:
        shadows = self._store.shadows
        return self._store.audit.changed(
            by, "policy.shadow_started", "policy",
            lambda: shadows.start(policy_id, now=self._now()),
            object_id=lambda _: policy_id,
            after=lambda shadow: {"shadow_of_family": shadow.family_id}, now=self._now())

    def stop_shadow(self, by: Author, policy_id: int) -> None:
        shadows = self._store.shadows
        self._store.audit.changed(by, "policy.shadow_stopped", "policy",
                                  lambda: shadows.stop(policy_id),
                                  object_id=lambda _: policy_id, after=lambda _: None,
                                  now=self._now())

    def _policy(self, by: Author, action: str, change: Any, before: Any = None) -> Policy:
        policy: Policy = self._store.audit.changed(
            by, action, "policy", change, object_id=lambda made: made.id,
            after=lambda made: made.to_json(), before=before, now=self._now())
        return policy

    # -- engineers -----------------------------------------------------------------------

    def put_engineer(self, by: Author, email: str, *, dispatch_enabled: bool,
                     display_name: str | None = None, jira_account_id: str | None = None,
                     availability: AvailabilityChanges | None = None,
                     ) -> tuple[Engineer, bool]:
        """Create or change an engineer (``EngineerRepository.put``); whether it was made."""
        engineers = self._store.engineers
        now = self._now()
        engineer, created = self._store.audit.changed(
            by, "engineer.changed", "engineer",
            lambda: engineers.put(email, dispatch_enabled=dispatch_enabled,
                                  display_name=display_name, jira_account_id=jira_account_id,
                                  availability=availability, now=now),
            object_id=lambda made: made[0].email, after=lambda made: made[0].to_json(),
            before=lambda: _engineer_or_none(self._store, email), now=now)
        return engineer, created

    def delete_engineer(self, by: Author, email: str) -> None:
        engineers = self._store.engineers
        self._store.audit.changed(by, "engineer.deleted", "engineer",
                                  lambda: engineers.delete(email),
                                  object_id=lambda _: email, after=lambda _: None,
                                  before=lambda: _engineer_or_none(self._store, email),
                                  now=self._now())

    def add_time_off(self, by: Author, entry: TimeOff) -> TimeOff:
        time_off = self._store.time_off
        now = self._now()
        stored: TimeOff = self._store.audit.changed(
            by, "engineer.time_off_added", "engineer", lambda: time_off.add(entry, now),
            object_id=lambda _: entry.email, after=lambda made: made.to_json(), now=now)
        return stored

    def delete_time_off(self, by: Author, email: str, entry_id: int) -> None:
        time_off = self._store.time_off
        self._store.audit.changed(by, "engineer.time_off_deleted", "engineer",
                                  lambda: time_off.delete(email, entry_id),
                                  object_id=lambda _: email,
                                  after=lambda _: {"time_off_id": entry_id}, now=self._now())

    # -- maintenance windows -------------------------------------------------------------

    def add_window(self, by: Author, window: MaintenanceWindow) -> MaintenanceWindow:
        windows, now = self._store.maintenance, self._now()
        made: MaintenanceWindow = self._store.audit.changed(
            by, "maintenance_window.created", "maintenance_window",
            lambda: windows.add(window), object_id=lambda made: made.id,
            after=lambda made: made.to_json(now), now=now)
        return made

    def end_window(self, by: Author, window_id: int) -> MaintenanceWindow:
        """End a window early; the triggers it holds are due at once."""
        windows, now = self._store.maintenance, self._now()
        ended: MaintenanceWindow = self._store.audit.changed(
            by, "maintenance_window.ended", "maintenance_window",
            lambda: windows.end(window_id, now), object_id=lambda _: window_id,
            after=lambda made: made.to_json(now),
            before=lambda: windows.get(window_id).to_json(now), now=now)
        return ended

    # -- stored state --------------------------------------------------------------------

    def delete_context(self, by: Author, issue_key: str) -> None:
        contexts = self._store.contexts
        self._store.audit.changed(by, "context.deleted", "context",
                                  lambda: contexts.delete(issue_key),
                                  object_id=lambda _: issue_key, after=lambda _: None,
                                  before=lambda: contexts.get(issue_key).to_json(),
                                  now=self._now())

    def _now(self) -> Any:
        return self._clock.now()


def _status(policy: Policy) -> dict[str, Any]:
    return {"status": policy.status.value}


def _engineer_or_none(store: Store, email: str) -> Any:
    try:
        return store.engineers.get(email).to_json()
    except NotFound:
        return None
