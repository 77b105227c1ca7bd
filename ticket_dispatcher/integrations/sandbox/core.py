"""The fake Core directory (SPEC §11): group members, a user, a user's direct leader."""

from __future__ import annotations

import falcon

from ticket_dispatcher.http.auth import PUBLIC
from ticket_dispatcher.integrations.sandbox.base import InternalServiceResource, guard
from ticket_dispatcher.integrations.sandbox.state import SandboxUser


def core_user(user: SandboxUser) -> dict:
    body = {"email": user.email, "name": user.display_name, "active": user.active}
    if user.open_id:
        body["open_id"] = user.open_id
    return body


class CoreResource(InternalServiceResource):
    service = "core"


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


def routes(state) -> list[tuple[str, object]]:
    """Paths relative to the service's base URL."""
    return [
        ("/api/v1/groups/{group}/members", GroupMembersResource(state)),
        ("/api/v1/users/{email}", UserResource(state)),
        ("/api/v1/users/{email}/leader", LeaderResource(state)),
    ]
