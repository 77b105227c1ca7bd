"""``POST /lark/card-actions``: the presses of the cards' buttons, as Lark calls them back
(docs/lark-card-buttons.md; the checks are domain/lark_callbacks.py's, the judgement
notification_press.py's).

No API key: a callback is authenticated by what Lark signs it with (``lark.encrypt_key``,
``lark.verification_token``); with neither configured the route is 404. A failed check is
401 (throttled in the same bucket as a wrong API key) and changes nothing. A press is judged
and recorded in one transaction, and Lark is answered at once, 200 with a toast (Lark shows a
toast only on a 200) and, when the press acts, the card with its buttons replaced; the work it
starts runs after the answer, in the execution, which reads the recorded press.
"""

from __future__ import annotations

import logging

import falcon

from ticket_dispatcher.domain.lark_callbacks import (
    SIGNATURE_HEADER,
    CallbackKeys,
    Refused,
    card_action_of,
    challenge_of,
    open_callback,
)
from ticket_dispatcher.errors import InvalidInput, RuntimeUnavailable, StoreUnavailable
from ticket_dispatcher.http.auth import PUBLIC, ApiKeyAuth
from ticket_dispatcher.http.binding import read_bounded
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.http.services import Services

log = logging.getLogger(__name__)

MAX_BYTES = 65_536  # a card action is a few hundred bytes
_FAILED = {401: "unauthorized", 404: "not_configured", 413: "too_large", 429: "rate_limited"}


class LarkCardActions:
    roles = {"POST": PUBLIC}
    uses_database = False  # the connection is taken once the callback checked out

    def __init__(self, services: Services, keys: ApiKeyAuth) -> None:
        self._services = services
        self._keys = keys

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        shown = {"action": "unknown", "outcome": "error"}
        try:
            self._take(req, resp, shown)
        except ApiError as exc:
            shown["outcome"] = _FAILED.get(exc.status_code, "invalid")
            raise
        except InvalidInput as exc:
            shown["outcome"] = "invalid"
            log.warning("Lark card callback refused: %s", exc.message,
                        extra={"reason": "invalid"})
            raise
        except (StoreUnavailable, RuntimeUnavailable):
            shown["outcome"] = "unavailable"
            raise
        finally:
            if shown["action"] != "url_verification":
                self._services.metrics.card_press(shown["action"], shown["outcome"])

    def _take(self, req: falcon.Request, resp: falcon.Response, shown: dict) -> None:
        config = self._services.config.lark
        if not config.callbacks:
            raise ApiError(falcon.HTTP_404, "Lark card callbacks are not configured "
                                            "(lark.encrypt_key, lark.verification_token)")
        body = read_bounded(req, MAX_BYTES)
        now = self._services.clock.now()
        try:
            payload = open_callback(CallbackKeys(config.encrypt_key, config.verification_token),
                                    body, req.get_header, now)
        except Refused as exc:
            log.warning("Lark card callback refused: %s", exc.message,
                        extra={"reason": "unauthorized"})
            raise self._keys.failed(req, exc.message, scheme=SIGNATURE_HEADER) from None
        challenge = challenge_of(payload)
        if challenge is not None:
            shown["action"] = "url_verification"
            resp.media = {"challenge": challenge}
            return
        press = card_action_of(payload)
        shown["action"] = press.action.value
        with self._services.store.connection():
            answer, repeat = self._services.store.card_presses.answer(press, now)
        shown["outcome"] = "duplicate" if repeat else answer.outcome.value
        log.info("card button pressed", extra={
            "execution_id": press.execution_id, "reason": f"{press.action.value}: "
                                                          f"{answer.outcome.value}"})
        if answer.acts and self._services.runtime is not None:
            self._services.runtime.wake(press.execution_id)  # its wait reads the press now
        resp.media = answer.body
