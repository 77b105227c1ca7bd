"""Sign in with an API key (a session cookie), and sign out."""

from __future__ import annotations

import falcon

from ticket_dispatcher.config import AccessRole
from ticket_dispatcher.console.session import COOKIE
from ticket_dispatcher.console.web import BASE, Console, Page, form_text, see_other, url
from ticket_dispatcher.http.auth import MAX_TRACKED_ADDRESSES, PUBLIC, authenticate
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.http.ratelimit import TokenBuckets, retry_after_header
from ticket_dispatcher.store.audit import Author, Via


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only, never another site."""
    if target and target.startswith(BASE) and not target.startswith("//") \
            and "\\" not in target:
        return target
    return BASE


class SignIn(Page):
    console_roles = {"GET": PUBLIC, "POST": PUBLIC}
    uses_database = False

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        auth = self.services.config.auth
        self._failures = TokenBuckets(auth.failure_rate, auth.failure_burst,
                                      self.services.clock.now, max_keys=MAX_TRACKED_ADDRESSES)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._form(req, resp, _safe_next(req.get_param("next")))

    def _form(self, req: falcon.Request, resp: falcon.Response, target: str, failed: str = "",
              status: str = falcon.HTTP_200) -> None:
        """The sign-in form, going on to ``target``; ``failed``: why the last try was refused."""
        self.console.render(req, resp, "sign_in.html", status=status, next=target,
                            failed=failed, cookie_lost=self._cookie_lost(req))

    def _cookie_lost(self, req: falcon.Request) -> bool:
        """A ``Secure`` cookie over plain HTTP (not to localhost, which browsers treat as
        secure): the browser would drop it and every sign-in would lead back here."""
        forwarded = (req.get_header("X-Forwarded-Proto") or "").lower()
        return (self.console.config.secure_cookie and req.scheme == "http"
                and forwarded != "https"
                and req.host not in ("localhost", "127.0.0.1", "::1", "[::1]"))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form = req.context.form
        target = _safe_next(form.get("next"))
        if not self.console.auth_enabled:
            see_other(resp, target)
            return
        key = authenticate(self.services.config.auth, form_text(form, "api_key", required=False))
        if key is None:
            wait = self._failures.take(req.remote_addr or "")
            if wait:
                raise ApiError(falcon.HTTP_429, "too many failed sign-ins from this address; "
                               "wait before trying again",
                               headers={"Retry-After": retry_after_header(wait)})
            self._audit(req, "console.sign_in_failed", "unknown")
            self._form(req, resp, target, "That API key is not valid.", falcon.HTTP_401)
            return
        if key.role is AccessRole.AUTOMATION:  # it may post triggers, and read nothing
            self._audit(req, "console.sign_in_failed", key.name)
            self._form(req, resp, target, "That is an automation key, which may only post "
                       "triggers; sign in with a viewer or operator key.", falcon.HTTP_403)
            return
        value, lifetime = self.console.sessions.sign_in(key, self.services.clock.now())
        self._audit(req, "console.signed_in", key.name)
        resp.set_cookie(COOKIE, value, max_age=lifetime, path=BASE,
                        secure=self.console.config.secure_cookie, http_only=True,
                        same_site="Strict")
        see_other(resp, target)


    def _audit(self, req: falcon.Request, action: str, actor: str) -> None:
        """A sign-in, or a failed one, by the key's name (``unknown`` for a key that matched
        none) and the address it came from; never the key itself. Sessions are signed
        cookies, not rows: the record is the only write a sign-in makes."""
        self.services.store.audit.record(Author(actor, Via.CONSOLE), action, "console_session",
                                         actor, after={"address": req.remote_addr or ""},
                                         now=self.services.clock.now())


class SignOut(Page):
    """Ends the session: recorded until it would have expired, so that a copy of its cookie
    is refused by every replica too, and the cookie is removed from the browser."""

    console_roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        viewer = req.context.viewer  # the gate's, for this request
        if viewer is not None and viewer.session and viewer.expires_at is not None:
            self.services.store.console_sessions.sign_out(viewer.session, viewer.expires_at,
                                                          self.services.clock.now())
        resp.unset_cookie(COOKIE, path=BASE)
        see_other(resp, url("/sign-in"))
