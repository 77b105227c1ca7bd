"""The fake Oncall service (SPEC §11): a team's responders, and phone pages.

A page to someone without a phone is answered ``accepted: false, call_error: no_phone_number``;
every page is recorded for the control API. The sandbox knows only *whether* someone has a
phone, never a number, so no answer can carry one.
"""

from __future__ import annotations

import falcon

from ticket_dispatcher.http.auth import PUBLIC
from ticket_dispatcher.integrations.sandbox.base import InternalServiceResource, guard

PAGE_FIELDS = ("email", "title", "message", "issue_key", "dedup_key")


class OncallResource(InternalServiceResource):
    service = "oncall"


@falcon.before(guard)
class RespondersResource(OncallResource):
    roles = {"GET": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, team: str) -> None:
        responders = self.state.team_responders(team)
        if responders is None:
            raise self.error(404, f"team {team} not found")
        # Primary first: the team's configured order (SPEC §11).
        resp.media = {"responders": [{"email": user.email, "name": user.display_name}
                                     for user in responders]}


@falcon.before(guard)
class PageResource(OncallResource):
    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = self.body(req)
        if not isinstance(body, dict):
            raise self.error(400, "the body must be a JSON object")
        wrong = [name for name in PAGE_FIELDS if not isinstance(body.get(name), str)]
        if wrong or not body["email"].strip():
            raise self.error(400, f"these fields must be strings: {', '.join(PAGE_FIELDS)} "
                                  "(email non-empty)")
        page = self.state.page(*(body[name] for name in PAGE_FIELDS))
        if page.accepted:
            resp.media = {"accepted": True, "call_id": page.call_id, "call_error": ""}
        else:
            resp.media = {"accepted": False, "call_error": page.call_error}


def routes(state) -> list[tuple[str, object]]:
    """Paths relative to the service's base URL."""
    return [
        ("/api/v1/teams/{team}/responders", RespondersResource(state)),
        ("/api/v1/page", PageResource(state)),
    ]
