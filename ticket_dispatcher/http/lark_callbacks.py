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
import threading

import falcon

from ticket_dispatcher.domain.actions.notification_state import card_state_of
from ticket_dispatcher.domain.lark_callbacks import (
    SIGNATURE_HEADER,
    CallbackKeys,
    CardAction,
    PressAction,
    Refused,
    card_action_of,
    challenge_of,
    open_callback,
)
from ticket_dispatcher.errors import (
    DispatcherError,
    InvalidInput,
    NotFound,
    RuntimeUnavailable,
    StoreUnavailable,
)
from ticket_dispatcher.http.auth import PUBLIC, ApiKeyAuth
from ticket_dispatcher.http.binding import read_bounded
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.http.services import Services

log = logging.getLogger(__name__)

MAX_BYTES = 65_536  # a card action is a few hundred bytes
LEADER_LOOKUP = 0.4  # seconds: Lark is answered within one
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
        leader = self._leader_name(press) if press.action is PressAction.ESCALATE else ""
        with self._services.store.connection():
            answer, repeat = self._services.store.card_presses.answer(press, now, leader)
        shown["outcome"] = "duplicate" if repeat else answer.outcome.value
        log.info("card button pressed", extra={
            "execution_id": press.execution_id, "reason": f"{press.action.value}: "
                                                          f"{answer.outcome.value}"})
        if answer.acts and self._services.runtime is not None:
            self._services.runtime.wake(press.execution_id)  # its wait reads the press now
        resp.media = answer.body

    def _leader_name(self, press: CardAction) -> str:
        """The name of the direct leader an Escalate now goes to, for the card to say, if Core
        answers within ``LEADER_LOOKUP``; "" otherwise (the card then says "your direct
        leader"). Read before the press's transaction: no peer is called inside it. The
        escalation itself looks the leader up again, and decides."""
        runtime = self._services.runtime
        if runtime is None:
            return ""
        try:
            with self._services.store.connection():
                execution = self._services.store.executions.get(press.execution_id)
        except NotFound:
            return ""  # the press names nothing: the judgement says so
        card = card_state_of(execution)
        target = card.target if card is not None else None
        if target is None or not target.email:
            return ""
        found: list[str] = []

        def look_up() -> None:
            try:
                leader = runtime.deps.ports.core.leader(target.email)
            except DispatcherError:
                return
            if leader is not None:
                found.append(leader.name or leader.email)

        # a daemon thread, left to finish alone when Core is slow: the answer does not wait
        lookup = threading.Thread(target=look_up, name="leader-lookup", daemon=True)
        lookup.start()
        lookup.join(LEADER_LOOKUP)
        return found[0] if found else ""
