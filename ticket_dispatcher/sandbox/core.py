"""The fake Core directory: its groups (``CoreState``) over the shared people, and the
resources for group members, a user and a user's direct leader."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import falcon

from ticket_dispatcher.sandbox.base import PUBLIC, InternalServiceResource, guard
from ticket_dispatcher.sandbox.people import People, SandboxUser
from ticket_dispatcher.sandbox.traffic import Traffic


class CoreState:
    """Groups of people; users and their leaders are the shared directory's."""

    def __init__(self, people: People):
        self.people = people
        self._lock = threading.Lock()
        self._groups: dict[str, list[str]] = {}

    def put_group(self, name: str, emails: Iterable[str]) -> list[SandboxUser]:
        members = self.people.known(emails)
        with self._lock:
            self._groups[name] = [user.email for user in members]
        return members

    def group_members(self, name: str) -> list[SandboxUser] | None:
        with self._lock:
            emails = self._groups.get(name)
        return None if emails is None else self.people.known(emails)

    def groups(self) -> dict[str, list[str]]:
        with self._lock:
            return {name: list(emails) for name, emails in self._groups.items()}

    def user(self, email: str) -> SandboxUser | None:
        return self.people.user(email)

    def leader(self, email: str) -> SandboxUser | None:
        """The direct leader, or None when the user or their leader is unknown."""
        user = self.people.user(email)
        if user is None or not user.leader_email:
            return None
        return self.people.user(user.leader_email)


def core_user(user: SandboxUser) -> dict:
    body = {"email": user.email, "name": user.display_name, "active": user.active}
    if user.open_id:
        body["open_id"] = user.open_id
    return body


class CoreResource(InternalServiceResource):
    service = "core"
    state: CoreState


@falcon.before(guard)
class GroupMembersResource(CoreResource):
    roles = {"GET": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, group: str) -> None:
        members = self.state.group_members(group)
        if members is None:
            raise self.error(404, f"group {group} not found")
        resp.media = {"members": [{"email": user.email, "active": user.active}
                                  for user in members]}


@falcon.before(guard)
class UserResource(CoreResource):
    roles = {"GET": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        user = self.state.user(email)
        if user is None:
            raise self.error(404, f"user {email} not found")
        resp.media = core_user(user)


@falcon.before(guard)
class LeaderResource(CoreResource):
    roles = {"GET": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        leader = self.state.leader(email)
        if leader is None:
            raise self.error(404, f"user {email} has no leader")
        resp.media = core_user(leader)


def routes(core: CoreState, traffic: Traffic) -> list[tuple[str, object]]:
    """Paths relative to the service's base URL."""
    return [
        ("/api/v1/groups/{group}/members", GroupMembersResource(core, traffic)),
        ("/api/v1/users/{email}", UserResource(core, traffic)),
        ("/api/v1/users/{email}/leader", LeaderResource(core, traffic)),
    ]
