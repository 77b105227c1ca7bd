"""``X-API-KEY`` authentication and role checks (docs/operations.md, "API keys").

Each resource declares ``roles``: HTTP method → the roles that may call it (``PUBLIC`` for
anyone). A method a resource does not declare is refused, so a new responder cannot be exposed
by accident. The presented key is never logged.

Failed attempts are throttled per client address: after ``auth.failure_burst``
failures (no key, or a wrong one) the address gets 429 with ``Retry-After`` instead of 401, until
its bucket refills at ``auth.failure_rate`` per second. Only failures are counted and only
failures are refused: a correct key always passes. Behind a proxy every caller shares the
proxy's address, and one client with a stale key must not lock Jira Automation out. Guessing is
defeated by the key length (at least 24 characters, config.py), not by this throttle; the
throttle tells a misconfigured client to back off and keeps its noise bounded. At most
``MAX_TRACKED_ADDRESSES`` addresses are remembered (the least recently failing are forgotten).

The keys and their roles are read by config.py (``ApiKey``, ``AccessRole``: only SHA-256 digests are
kept); matching a presented key and deciding what a role may call happen here.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import falcon

from ticket_dispatcher.config import AccessRole, ApiKey, AuthConfig, key_digest
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.http.ratelimit import TokenBuckets, retry_after_header

MAX_TRACKED_ADDRESSES = 10_000

PUBLIC: frozenset[AccessRole] = frozenset()
VIEWER = frozenset({AccessRole.VIEWER})
OPERATOR = frozenset({AccessRole.OPERATOR})
AUTOMATION = frozenset({AccessRole.AUTOMATION, AccessRole.OPERATOR})
AUTOMATION_READ = frozenset({AccessRole.AUTOMATION, AccessRole.VIEWER})


def authenticate(auth: AuthConfig, presented: str | None) -> ApiKey | None:
    """The key whose hash matches ``presented``, compared in constant time against every key.

    No early exit: the time taken does not tell which key (or whether any) matched.
    """
    digest = key_digest(presented or "").encode("ascii")
    found: ApiKey | None = None
    for key in auth.api_keys:
        if hmac.compare_digest(digest, key.key_sha256.encode("ascii")) and found is None:
            found = key
    return found if presented else None


def role_allows(have: AccessRole, need: AccessRole) -> bool:
    """operator ⊃ viewer; automation covers only automation; nothing else is implied.

    An operator does *not* implicitly get automation endpoints: each endpoint lists its roles
    explicitly (``POST /dispatch/triggers`` is "automation, operator"), so use
    ``allowed`` with the endpoint's set of roles.
    """
    return have == need or (have is AccessRole.OPERATOR and need is AccessRole.VIEWER)


def allowed(role: AccessRole, allowed_roles: Iterable[AccessRole]) -> bool:
    """Whether a key with ``role`` may call an endpoint open to ``allowed_roles``."""
    return any(role_allows(role, need) for need in allowed_roles)


class ApiKeyAuth:
    """Falcon middleware; ``enabled=False`` is the sandbox / ``--insecure-no-auth`` mode."""

    def __init__(self, auth: AuthConfig, *, now: Callable[[], datetime], enabled: bool = True):
        self._auth = auth
        self._enabled = enabled
        self._failures = TokenBuckets(auth.failure_rate, auth.failure_burst,
                                      now,
                                      max_keys=MAX_TRACKED_ADDRESSES)

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         params: dict[str, Any]) -> None:
        if resource is None or hasattr(resource, "console_roles"):
            return  # a console page: its own gate signs people in (console/web.py)
        declared = getattr(resource, "roles", {})
        if req.method not in declared:
            if req.method == "OPTIONS" or not hasattr(resource, f"on_{req.method.lower()}"):
                return  # falcon answers 405 itself
            raise ApiError(falcon.HTTP_403, "this method is not open to any role")
        needed = declared[req.method]
        req.context.api_key_name = None
        if not needed or not self._enabled:
            return
        presented = req.get_header("X-API-KEY")
        if not presented:
            raise self.failed(req, "send an API key in the X-API-KEY header")
        key = authenticate(self._auth, presented)
        if key is None:
            raise self.failed(req, "the API key is not valid")
        if not allowed(key.role, needed):
            wanted = " or ".join(sorted(role.value for role in needed))
            raise ApiError(falcon.HTTP_403, f"this needs the {wanted} role; key "
                           f"{key.name!r} has {key.role.value}")
        req.context.api_key_name = key.name

    def failed(self, req: falcon.Request, message: str, *,
               scheme: str = "X-API-KEY") -> ApiError:
        """401 while the address has failures to spare, then 429 until its bucket refills.
        Every way of authenticating (a key, a webhook's signature) counts in the same
        bucket."""
        wait = self._failures.take(req.remote_addr or "")
        if wait:
            return ApiError(falcon.HTTP_429, "too many failed authentication attempts from "
                            "this address; wait before trying again",
                            headers={"Retry-After": retry_after_header(wait)})
        return ApiError(falcon.HTTP_401, message, headers={"WWW-Authenticate": scheme})
