"""The internal Oncall service: team responders and phone pages."""

from __future__ import annotations

import logging
from typing import Any

from ticket_dispatcher.config import OncallConfig
from ticket_dispatcher.domain.ports import PageOutcome, PageResult, Responder
from ticket_dispatcher.errors import IntegrationError, fault_of
from ticket_dispatcher.integrations.http import BearerServiceClient, segment

log = logging.getLogger(__name__)

SERVICE = "oncall"
PAGE_PATH = "/api/v1/page"


class OncallClient(BearerServiceClient):
    """The ``OnCall`` port (domain/ports.py) over HTTP."""

    SERVICE = SERVICE

    def __init__(self, config: OncallConfig, **options: Any):
        super().__init__(config.base_url, config.token, **options)

    def responders(self, team: str) -> list[Responder]:
        """The team's on-call responders, primary first."""
        responders = self.people(f"/api/v1/teams/{segment(team)}/responders", "responders")
        return [Responder(email=item["email"].strip().lower(), name=str(item.get("name") or ""))
                for item in responders]

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> PageResult:
        """Ask Oncall to phone ``email``. Never raises for a failed call: every outcome consumes
        the attempt; the caller stores the result and waits for the ACK."""
        body = {"email": email, "title": title, "message": message, "issue_key": issue_key,
                "dedup_key": dedup_key}
        try:
            answer = self.http.request_json("POST", PAGE_PATH, json=body)
        except IntegrationError as exc:
            # no answer (or the connection broke after sending), or accepted by HTTP with a
            # body that cannot be read: the phone may ring
            if fault_of(exc).answer_lost or exc.status == 200:
                return PageResult(PageOutcome.UNKNOWN, call_error=exc.message)
            return PageResult(PageOutcome.FAILED, call_error=exc.message)
        return self._result(answer)

    def _result(self, answer: object) -> PageResult:
        if not isinstance(answer, dict) or not isinstance(answer.get("accepted"), bool):
            return PageResult(PageOutcome.UNKNOWN,
                              call_error=f"oncall POST {PAGE_PATH}: the answer has no 'accepted'")
        call_id = str(answer.get("call_id") or "")
        call_error = self.http.safe(str(answer.get("call_error") or ""))
        if answer["accepted"] and not call_error:
            return PageResult(PageOutcome.ACCEPTED, call_id=call_id)
        return PageResult(PageOutcome.FAILED, call_id=call_id,
                          call_error=call_error or "not accepted")
