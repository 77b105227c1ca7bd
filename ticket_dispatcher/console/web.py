"""The console's machinery: templates, who may see what, forms, security headers, error pages.

Every console resource is a ``Page``: it declares ``console_roles`` (method → roles, as the API's
``roles``) and renders a Jinja2 template with autoescaping on. ``ConsoleGate`` (a falcon
middleware, placed before the request takes a database connection) decides who is asking
(``session.py``), sends a stranger to the sign-in form, refuses a role that may not (403 page)
and a changing request without its CSRF token or from another origin (403 page), and adds the
security headers to every console answer. The API's ``ApiKeyAuth`` leaves console resources to
it. Errors on a console path are answered as an HTML page with the same status the API would
give (``serialize_error``), never a trace.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import quote, urlencode, urlsplit
from zoneinfo import ZoneInfo, available_timezones

import falcon
import jinja2
import markupsafe

from ticket_dispatcher import __version__
from ticket_dispatcher.actors.cluster import Cluster, for_mode
from ticket_dispatcher.config import AccessRole
from ticket_dispatcher.console.session import COOKIE, OPEN, Sessions, Viewer
from ticket_dispatcher.errors import InvalidInput, Problem, StoreUnavailable
from ticket_dispatcher.http import errors
from ticket_dispatcher.http.auth import PUBLIC, VIEWER
from ticket_dispatcher.http.binding import check_text
from ticket_dispatcher.http.dispatch import encode_cursor
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.logging import Redactor
from ticket_dispatcher.settings import MASK
from ticket_dispatcher.timeutil import format_time, parse_rfc3339, to_utc

if TYPE_CHECKING:
    from ticket_dispatcher.http.services import Services

log = logging.getLogger(__name__)

BASE = "/console"
HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
MAX_FORM_BYTES = 1_048_576
SIGNED_OUT = "signed-out"  # the identity the sign-in form's CSRF token is bound to
ZONE_COOKIE = "td_zone"  # the viewer's IANA time zone, which console.js sets from the browser
SHOWN_TIME = "%Y-%m-%d %H:%M:%S"  # console.js writes the same
UTC_ZONE = ZoneInfo("UTC")

# The short texts a page prints again and again (emails, names, statuses), redacted once each.
REDACTED_TEXTS, SHORT_TEXT = 4096, 256

SECURITY_HEADERS = {
    # No inline script or style anywhere: every script and sheet is a file under /console/static.
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self'; "
                                "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                                "frame-ancestors 'none'; base-uri 'none'; object-src 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

NAV = (  # (path under BASE, label)
    ("", "Overview"),
    ("/triggers", "Triggers"),
    ("/executions", "Executions"),
    ("/parked", "Parked"),
    ("/engineers", "Engineers"),
    ("/policies", "Policies"),
    ("/shadows", "Shadows"),
    ("/maintenance", "Maintenance"),
    ("/reports/burden", "Burden"),
    ("/audit", "Audit"),
)
OPERATOR_PAGES = frozenset({"/audit"})  # left out of a viewer's menu: they may not read them


def _redacting(redactor: Redactor) -> Callable[[Any], Any]:
    """The templates' ``finalize``: every value a template prints passes the logs' redactor
    first, so configured secrets, tokens and phone numbers show as ***, wherever they hide (a
    Lark answer, a summary). A page prints the same short texts many times (the engineers'
    page, an email in every rotation), so those are redacted once each."""
    short = lru_cache(maxsize=REDACTED_TEXTS)(redactor.text)

    def finalize(value: Any) -> Any:
        if not isinstance(value, str) or isinstance(value, markupsafe.Markup):
            return value
        return short(value) if len(value) <= SHORT_TEXT else redactor.text(value)
    return finalize


class Page:
    """A console resource. ``console_roles``: method → roles (empty: anyone, signed in or not)."""

    console_roles: Mapping[str, frozenset[AccessRole]] = {"GET": VIEWER}

    def __init__(self, console: Console) -> None:
        self.console = console
        self.services = console.services


class Console:
    """What every console page shares: the services, the templates and the sessions."""

    def __init__(self, services: Services, *, auth_enabled: bool,
                 cluster: Cluster | None = None) -> None:
        """``cluster``: the strategy of ``cluster.mode`` (actors/cluster.py), built from the
        configuration when not given."""
        self.services = services
        self.auth_enabled = auth_enabled
        self.config = services.config.console
        self.sessions = Sessions(self.config, services.config.auth)
        cluster = cluster or for_mode(services.config.cluster)
        if auth_enabled and (warning := cluster.console_warning(self.config)) is not None:
            log.warning(warning)
        self.env = jinja2.Environment(
            finalize=_redacting(Redactor(services.config.secrets())),
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every template, whatever its name
            undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True,
        )
        self.env.globals.update(base=BASE, nav=NAV, operator_pages=OPERATOR_PAGES,
                                version=__version__, url=url, static=static_url, mask=MASK)
        self.env.filters.update(when=when, ago=ago, jsonpretty=jsonpretty, masked=masked)

    @staticmethod
    def zone_of(req: falcon.Request) -> ZoneInfo:
        """The viewer's time zone, which every time on the page is shown in: the browser's, as
        console.js stores it in a cookie; UTC until it has (a first page, or no JavaScript)."""
        name = req.cookies.get(ZONE_COOKIE, "")
        return ZoneInfo(name) if name in _known_zones() else UTC_ZONE

    def render(self, req: falcon.Request, resp: falcon.Response, template: str, *,
               status: str | int = falcon.HTTP_200, **values: Any) -> None:
        viewer = getattr(req.context, "viewer", None)
        resp.status = status
        resp.content_type = falcon.MEDIA_HTML
        resp.text = self.env.get_template(template).render(
            viewer=viewer, auth_enabled=self.auth_enabled, path=req.path,
            # Markup: the token is base64url (nothing to escape) and must reach the form intact.
            csrf=markupsafe.Markup(self.sessions.csrf_token(
                viewer.identity if viewer else SIGNED_OUT)),
            now=self.services.clock.now(), zone=self.zone_of(req), **values)

    def viewer_of(self, req: falcon.Request) -> Viewer | None:
        if not self.auth_enabled:
            return OPEN
        proxied = self.sessions.from_proxy(req.remote_addr, req.get_header("X-Forwarded-Email"),
                                           req.get_header("X-Forwarded-Groups"))
        if proxied is not None:
            return proxied
        viewer = self.sessions.read(req.cookies.get(COOKIE), self.services.clock.now())
        if viewer is not None and self._signed_out(viewer):
            return None
        return viewer

    def _signed_out(self, viewer: Viewer) -> bool:
        """Whether the viewer's session was signed out (on any replica). While the database
        cannot say, the session stands: every page that reads the database fails anyway, and
        one that does not shows no data of its own."""
        try:
            return self.services.store.console_sessions.signed_out(viewer.session)
        except StoreUnavailable:
            return False

    def error_page(self, req: falcon.Request, resp: falcon.Response,
                   exc: falcon.HTTPError) -> None:
        problems = getattr(exc, "problems", [])
        self.render(req, resp, "error.html", status=exc.status, code=exc.status_code,
                    title=exc.title or "", description=exc.description or "",
                    problems=problems)


class ConsoleGate:
    """Falcon middleware for console resources: identity, role, CSRF and the headers."""

    def __init__(self, console: Console):
        self._console = console

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.viewer = None

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         params: dict[str, Any]) -> None:
        declared = getattr(resource, "console_roles", None)
        if declared is None:
            return
        if req.method not in declared:
            return  # falcon answers 405 for a method the resource has no responder for
        needed = declared[req.method]
        viewer = self._console.viewer_of(req)
        req.context.viewer = viewer
        if needed:
            if viewer is None:
                if req.method == "GET":
                    target = req.relative_uri if req.path != BASE + "/sign-in" else BASE
                    raise falcon.HTTPSeeOther(url("/sign-in", next=target))
                raise ApiError(falcon.HTTP_401, "sign in first")
            if not viewer.may(needed):
                wanted = " or ".join(sorted(role.value for role in needed))
                have = viewer.role.value if viewer.role else "no role"
                raise ApiError(falcon.HTTP_403, f"this needs the {wanted} role; "
                               f"{viewer.name} has {have}")
        if req.method == "POST":
            self._check_origin(req)
            form = read_form(req)
            req.context.form = form
            identity = viewer.identity if viewer is not None else SIGNED_OUT
            if not self._console.sessions.csrf_valid(identity, form.get("csrf_token")):
                raise ApiError(falcon.HTTP_403, "this form has expired or did not come from "
                               "this console; reload the page and try again")

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         req_succeeded: bool) -> None:
        if req.path == BASE or req.path.startswith(BASE + "/"):
            for name, value in SECURITY_HEADERS.items():
                if name != "Cache-Control" or resp.get_header(name) is None:
                    resp.set_header(name, value)

    @staticmethod
    def _check_origin(req: falcon.Request) -> None:
        """A browser names the page a POST came from; one from another site is refused
        (besides the CSRF token, and the session cookie being SameSite=Strict)."""
        origin = req.get_header("Origin")
        if origin is not None and urlsplit(origin).netloc != req.get_header("Host"):
            raise ApiError(falcon.HTTP_403, "a form from another site cannot change anything "
                           "here")


def read_form(req: falcon.Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as single values (400/413/415)."""
    length = req.content_length or 0
    if length > MAX_FORM_BYTES:
        raise ApiError(falcon.HTTP_413, f"the form is {length} bytes; the limit is "
                       f"{MAX_FORM_BYTES}")
    if not length:
        return {}
    if (req.content_type or "").split(";")[0].strip() != falcon.MEDIA_URLENCODED:
        raise ApiError(falcon.HTTP_415, "send the form as application/x-www-form-urlencoded")
    parsed = falcon.uri.parse_query_string(req.bounded_stream.read(length).decode(
        "utf-8", errors="replace"), keep_blank=True, csv=False)
    form: dict[str, str] = {}
    for name, value in parsed.items():
        form[name] = value[-1] if isinstance(value, list) else value
    return form


class Query:
    """A request's query string as the API's parameter readers take it, with blank values
    left out: a console filter form sends every field, the empty ones too."""

    def __init__(self, req: falcon.Request, **overrides: str | None):
        self._req = req
        self._overrides = overrides

    def get_param(self, name: str, default: str | None = None) -> str | None:
        value = self._overrides[name] if name in self._overrides else self._req.get_param(name)
        return value if value not in (None, "") else default

    def values(self, *names: str) -> dict[str, str]:
        """The filters that are set, to rebuild links (pager, sorting) with."""
        return {name: value for name in names if (value := self.get_param(name))}


def form_text(form: Mapping[str, str], name: str, *, required: bool = True,
              limit: int = 1000) -> str:
    """One single-line form field, checked as the API checks a string (``check_text``)."""
    value = form.get(name, "")
    if required and not value.strip():
        raise InvalidInput(f"{name} is required", [Problem(name, "is required")])
    if len(value) > limit:
        raise InvalidInput(f"{name} is longer than {limit} characters",
                           [Problem(name, f"at most {limit} characters")])
    return check_text(value, name)


def see_other(resp: falcon.Response, target: str) -> None:
    """303 to ``target`` (a console path): the browser GETs it, so a reload repeats nothing."""
    resp.status = falcon.HTTP_303
    resp.location = target
    resp.text = ""


# --- template helpers --------------------------------------------------------------------------


def url(path: str = "", **query: object) -> str:
    """A console URL with the query parameters that are set (None and "" are left out)."""
    kept = {k: v for k, v in query.items() if v is not None and v != ""}
    return BASE + path + ("?" + urlencode(kept) if kept else "")


class CursorPages(TypedDict):
    next_page: str | None
    first_page: str | None


def cursor_pages(path: str, filters: Mapping[str, object], following: int | None,
                 paged: bool) -> CursorPages:
    """The links of a list paged by cursor, with its filters kept: ``next_page`` continues
    below the id ``following`` (None on the last page); ``first_page`` goes back to the
    newest once ``paged``."""
    return {"next_page": url(path, **filters, cursor=encode_cursor(following))
            if following is not None else None,
            "first_page": url(path, **filters) if paged else None}


_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".txt": "text/plain; charset=utf-8", ".png": "image/png",
                 ".svg": "image/svg+xml"}


def _read_static() -> dict[str, tuple[str, bytes, str]]:
    """The static files, read once (a few small files): name → (content type, bytes, version).
    Only these names are served, so no request path can reach another file."""
    files = {}
    for path in sorted(STATIC.iterdir()):
        if path.is_file() and path.suffix in _STATIC_TYPES:
            data = path.read_bytes()
            files[path.name] = (_STATIC_TYPES[path.suffix], data,
                                hashlib.sha256(data).hexdigest()[:10])
    return files


_STATIC_FILES = _read_static()


def static_url(name: str) -> str:
    """``/console/static/<name>?v=<hash>``: a changed file is fetched again."""
    return f"{BASE}/static/{quote(name)}?v={_STATIC_FILES[name][2]}"


def _as_time(value: object) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    try:
        return to_utc(parse_rfc3339(str(value)))
    except ValueError:
        return None


@cache
def _known_zones() -> frozenset[str]:
    """The IANA names, read once: a cookie's value is looked up here before ZoneInfo opens a
    file, so no cookie reaches the file system."""
    return frozenset(available_timezones() - {"localtime"})


@jinja2.pass_context
def when(context: jinja2.runtime.Context, value: object) -> markupsafe.Markup:
    """A ``<time>`` in the viewer's zone (``zone``, which the page names once), its ISO form
    in ``datetime``. console.js writes it again in the browser's zone when the page was made
    before the browser had told its zone (that is, in UTC)."""
    moment = _as_time(value)
    if moment is None:
        return markupsafe.Markup('<span class="muted">—</span>')
    zone = context.get("zone") or UTC_ZONE
    # digits and separators only, nothing to escape: an f-string, not Markup.format, whose
    # escaping of each argument showed in a long list's rendering
    iso = format_time(moment)
    shown = moment.astimezone(zone).strftime(SHOWN_TIME)
    return markupsafe.Markup(f'<time datetime="{iso}" data-local>{shown}</time>')


def ago(value: object, now: datetime) -> str:
    """``"in 4 s"`` / ``"12 min ago"``: the distance from ``now``, for a page without JS."""
    moment = _as_time(value)
    if moment is None:
        return ""
    seconds = (moment - to_utc(now)).total_seconds()
    size = abs(seconds)
    if size < 90:
        text = f"{math.ceil(size) if seconds > 0 else math.floor(size)} s"
    elif size < 5400:
        text = f"{round(size / 60)} min"
    elif size < 172_800:
        text = f"{round(size / 3600)} h"
    else:
        text = f"{round(size / 86_400)} d"
    return f"in {text}" if seconds > 0 else f"{text} ago"


def jsonpretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


_SECRET_WORDS = ("token", "secret", "password", "phone", "mobile", "authorization", "api_key",
                 "credential")


def masked(value: Any) -> Any:
    """A JSON value with every key that names a secret or a phone number shown as ``***``,
    as the logs show them."""
    if isinstance(value, dict):
        return {k: (MASK if any(w in str(k).lower() for w in _SECRET_WORDS) and v else masked(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [masked(item) for item in value]
    return value


# --- resources every console has ---------------------------------------------------------------


class StaticFile(Page):
    """The vendored and own assets of the package directory, as read at start."""

    console_roles = {"GET": PUBLIC}
    uses_database = False

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        if name not in _STATIC_FILES:
            raise ApiError(falcon.HTTP_404, "no such file")
        resp.content_type, resp.data, _ = _STATIC_FILES[name]
        resp.set_header("Cache-Control", "public, max-age=86400")


def serialize_error(
    console: Console,
) -> Callable[[falcon.Request, falcon.Response, falcon.HTTPError], None]:
    """The app's error serializer: an HTML page on console paths, the API's JSON elsewhere."""

    def serialize(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
        if req.path == BASE or req.path.startswith(BASE + "/"):
            console.error_page(req, resp, exc)
        else:
            errors.serialize_error(req, resp, exc)

    return serialize
