"""Who is looking at the console: a signed session cookie, a trusted proxy's headers, or nobody
(authentication off). Also the CSRF token every changing form carries.

A session is the API key's *name* and role, an expiry and a random nonce, signed with HMAC-SHA256
(``console.session_secret``). The key itself is never stored in the cookie. Each request checks
the signature, the expiry and that the key is still configured with a key whose digest starts as
it did at sign-in: removing or rotating a key signs its sessions out.

Behind oauth2-proxy, ``X-Forwarded-Email`` and ``X-Forwarded-Groups`` are believed only from an
address in ``console.trusted_proxies``; the groups give the role (operator groups first). From
anywhere else the headers are ignored, as if they were not sent.

The CSRF token of a form is an HMAC of the viewer's identity (the session nonce, the proxy's
email, or "anonymous" with authentication off): a page of another site can neither read nor
compute it, and a token stolen from one session is worthless in another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from ticket_dispatcher.config import AccessRole, ApiKey, AuthConfig, ConsoleConfig
from ticket_dispatcher.http.auth import allowed

COOKIE = "td_console"
_DIGEST_PREFIX = 16  # hex characters of the key's SHA-256 kept in the session


@dataclass(frozen=True)
class Viewer:
    """The person behind a console request."""

    name: str
    role: AccessRole | None  # None: known (the proxy vouched) but given no role
    via: str  # "session", "proxy" or "open" (authentication off)
    identity: str  # what the CSRF token is bound to
    session: str = ""  # a session's nonce, which signing out records
    expires_at: datetime | None = None  # when a session ends by itself

    def may(self, roles: frozenset[AccessRole]) -> bool:
        return not roles or (self.role is not None and allowed(self.role, roles))

    @property
    def is_operator(self) -> bool:
        return self.role is AccessRole.OPERATOR


OPEN = Viewer("anonymous", AccessRole.OPERATOR, "open", "open")


class Sessions:
    """Signs and reads session cookies, and derives CSRF tokens."""

    def __init__(self, console: ConsoleConfig, auth: AuthConfig):
        self._config = console
        self._auth = auth
        secret = console.session_secret or secrets.token_urlsafe(32)
        self._secret = hashlib.sha256(("td-console:" + secret).encode()).digest()
        self._networks = console.proxy_networks

    # --- the cookie ---------------------------------------------------------------------

    def sign_in(self, key: ApiKey, now: datetime) -> tuple[str, int]:
        """(cookie value, lifetime in seconds) for a session of ``key``."""
        lifetime = int(self._config.session_lifetime.total_seconds())
        body = {"n": key.name, "k": key.key_sha256[:_DIGEST_PREFIX],
                "e": int(now.timestamp()) + lifetime, "s": secrets.token_urlsafe(12)}
        payload = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"{payload}.{self._mac('session', payload)}", lifetime

    def read(self, value: str | None, now: datetime) -> Viewer | None:
        """The viewer of a valid, unexpired session cookie whose key is still configured."""
        if not value or value.count(".") != 1 or len(value) > 1024:
            return None
        payload, mac = value.split(".")
        if not _same(mac, self._mac("session", payload)):
            return None
        try:
            body = json.loads(_unb64(payload))
            name, digest, expires, nonce = body["n"], body["k"], int(body["e"]), body["s"]
        except (ValueError, KeyError, TypeError):
            return None
        if expires <= now.timestamp():
            return None
        key = next((k for k in self._auth.api_keys if k.name == name), None)
        if key is None or not isinstance(digest, str) \
                or not _same(key.key_sha256[:_DIGEST_PREFIX], digest):
            return None
        return Viewer(key.name, key.role, "session", f"session:{nonce}", session=str(nonce),
                      expires_at=datetime.fromtimestamp(expires, UTC))

    # --- the reverse proxy --------------------------------------------------------------

    def from_proxy(self, remote_addr: str | None, email: str | None,
                   groups: str | None) -> Viewer | None:
        """The viewer a trusted proxy vouches for; None when the request did not come from one
        (its headers are then ignored) or carries no email."""
        if not email or not self._trusted(remote_addr):
            return None
        email = email.strip()
        member = {group.strip() for group in (groups or "").split(",") if group.strip()}
        role = (AccessRole.OPERATOR if member & self._config.operator_groups
                else AccessRole.VIEWER if member & self._config.viewer_groups else None)
        return Viewer(email, role, "proxy", f"proxy:{email}")

    def _trusted(self, remote_addr: str | None) -> bool:
        if not self._networks or not remote_addr:
            return False
        try:
            address = ipaddress.ip_address(remote_addr)
        except ValueError:
            return False
        return any(address in network for network in self._networks)

    # --- CSRF ---------------------------------------------------------------------------

    def csrf_token(self, identity: str) -> str:
        return self._mac("csrf", identity)

    def csrf_valid(self, identity: str, presented: str | None) -> bool:
        if not presented:
            return False
        return _same(presented, self.csrf_token(identity))

    def _mac(self, purpose: str, text: str) -> str:
        digest = hmac.new(self._secret, f"{purpose}\n{text}".encode(), hashlib.sha256).digest()
        return _b64(digest)


def _same(given: str, expected: str) -> bool:
    """``given`` equals ``expected``, compared in constant time. As bytes: given text (a cookie,
    a form field) may hold any character, and ``compare_digest`` takes ASCII text only."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
