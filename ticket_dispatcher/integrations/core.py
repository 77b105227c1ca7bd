"""The internal Core directory: group members, users, direct leaders."""

from __future__ import annotations

from typing import Any

from ticket_dispatcher.config import CoreConfig
from ticket_dispatcher.domain.ports import DirectoryUser, GroupMember
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.http import BearerServiceClient, segment

SERVICE = "core"


class CoreClient(BearerServiceClient):
    """The ``Directory`` port (domain/ports.py) over HTTP."""

    SERVICE = SERVICE

    def __init__(self, config: CoreConfig, **options: Any):
        super().__init__(config.base_url, config.token, **options)

    def group_members(self, group: str) -> list[GroupMember]:
        members = self.people(f"/api/v1/groups/{segment(group)}/members", "members")
        return [GroupMember(email=item["email"].strip().lower(),
                            active=item.get("active", True) is not False) for item in members]

    def user(self, email: str) -> DirectoryUser | None:
        """The user, or None when Core does not know the email."""
        return self._user_at(f"/api/v1/users/{segment(email.strip().lower())}")

    def leader(self, email: str) -> DirectoryUser | None:
        """The direct leader (the escalation target), or None when the user has none."""
        return self._user_at(f"/api/v1/users/{segment(email.strip().lower())}/leader")

    def _user_at(self, path: str) -> DirectoryUser | None:
        response = self.http.request("GET", path, expected=(200, 404))
        if response.status_code == 404:
            return None
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("email"), str):
            raise IntegrationError(f"core GET {path}: the answer is not a user", status=200,
                                   service=SERVICE)
        open_id = body.get("open_id")
        return DirectoryUser(
            email=body["email"].strip().lower(),
            name=str(body.get("name") or ""),
            active=body.get("active", True) is not False,
            open_id=open_id if isinstance(open_id, str) and open_id else None,
        )
