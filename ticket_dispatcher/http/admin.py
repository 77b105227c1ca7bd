"""Operator endpoints: the live actor system and execution cancel
(docs/operations.md, "The admin view")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import falcon

from ticket_dispatcher.actors.messages import CancelOutcome
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.changes import author_of

if TYPE_CHECKING:  # app.py imports this module
    from ticket_dispatcher.http.services import Services


class ActorStatus:
    """``GET /admin/actors``: answered from memory. Only the parked executions' details need
    the database (one read of its own); while it cannot be read they are marked unavailable
    and the rest still answers: 200, never a 503 or a 500 for the outage."""

    roles = {"GET": VIEWER}
    uses_database = False  # asks the actors; no connection held while they answer

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self._services.running().status()


class ExecutionCancel:
    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, execution_id: int) -> None:
        who = req.context.api_key_name or "an operator"
        outcome = self._services.running().cancel(execution_id, f"cancelled by {who}",
                                                  by=author_of(req))
        # The answer shows the state at this moment: failed, or still running until its next step.
        resp.status = falcon.HTTP_200 if outcome is CancelOutcome.APPLIED else falcon.HTTP_202
        resp.media = self._services.store.executions.get(execution_id).to_json()
