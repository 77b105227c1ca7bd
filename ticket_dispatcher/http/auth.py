"""``X-API-KEY`` authentication and role checks (SPEC §10).

Each resource declares ``roles``: HTTP method → the roles that may call it (``PUBLIC`` for
anyone). A method a resource does not declare is refused, so a new responder cannot be exposed
by accident. The presented key is never logged.
"""

from __future__ import annotations

import falcon

from ticket_dispatcher.config import AuthConfig, Role, allowed, authenticate
from ticket_dispatcher.http.errors import ApiError

PUBLIC: frozenset[Role] = frozenset()
VIEWER = frozenset({Role.VIEWER})
OPERATOR = frozenset({Role.OPERATOR})
AUTOMATION = frozenset({Role.AUTOMATION, Role.OPERATOR})
AUTOMATION_READ = frozenset({Role.AUTOMATION, Role.VIEWER})


class ApiKeyAuth:
    """Falcon middleware; ``enabled=False`` is the sandbox / ``--insecure-no-auth`` mode."""

    def __init__(self, auth: AuthConfig, *, enabled: bool = True):
        self._auth = auth
        self._enabled = enabled

    def process_resource(self, req: falcon.Request, resp, resource, params) -> None:
        if resource is None:
            return
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
            raise ApiError(falcon.HTTP_401, "send an API key in the X-API-KEY header",
                           headers={"WWW-Authenticate": "X-API-KEY"})
        key = authenticate(self._auth, presented)
        if key is None:
            raise ApiError(falcon.HTTP_401, "the API key is not valid",
                           headers={"WWW-Authenticate": "X-API-KEY"})
        if not allowed(key.role, needed):
            wanted = " or ".join(sorted(role.value for role in needed))
            raise ApiError(falcon.HTTP_403, f"this needs the {wanted} role; key "
                           f"{key.name!r} has {key.role.value}")
        req.context.api_key_name = key.name
