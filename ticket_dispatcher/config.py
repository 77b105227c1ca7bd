"""The service's configuration keys: a TOML file plus ``TICKET_DISPATCHER_*`` environment
overrides (docs/operations.md, "Configure").

This module declares every section and key; the machinery that reads them is ``settings.py``.
Each key below is a ``setting`` with its default and bounds; ``settings.py`` reads the file and
the environment into it (defaults < file < environment) and stops the start with a
``ConfigError`` naming every bad key. Values of secret keys never appear in an error message,
and plain API keys are hashed at load so the process never keeps them. Which role may call
what is the HTTP layer's business (``http/auth.py``).

Every key is listed in docs/operations.md, "Every key"; among them ``log_level`` (top level,
default ``"INFO"``) and ``[integrations] connect_timeout`` / ``read_timeout`` (defaults ``"3s"``
/ ``"10s"``, the timeouts of every integration call).

Bounds that keep the thread and connection counts finite: ``execution_slots`` 1..100,
``trigger_actors`` 1..32, ``http.threads`` 1..64. Together they size the database connection
pool (``store.connection_budget``), which the service checks against the server at start.
``client_pool_size`` 0 (the default) gives one client actor per execution slot and trigger
actor; an explicit value must be at least ``execution_slots + trigger_actors``, or a caller
could wait for a client while its slot idles. ``shutdown_timeout`` (default ``"10s"``) is the
one deadline from SIGTERM to exit, whatever is in flight.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlsplit

from ticket_dispatcher.domain.catalog import ENGINEER_EMAIL
from ticket_dispatcher.domain.issues import (
    DEFAULT_AUTO_ASSIGN_LABEL,
    DEFAULT_L2_FIELD_ID,
    DEFAULT_SEVERITY_FIELD_ID,
)
from ticket_dispatcher.settings import (
    MASK,
    Invalid,
    Kind,
    SettingProblems,
    Source,
    boolean,
    compound,
    duration,
    integer,
    load,
    mask_url_password,
    number,
    read_toml,
    secret_list,
    section,
    setting,
    shown,
    suggest,
    text,
    url_query_passwords,
)
from ticket_dispatcher.settings import masked as masked  # re-exported for ``config show``

ENV_PREFIX = "TICKET_DISPATCHER_"
CONFIG_ENV = "TICKET_DISPATCHER_CONFIG"
# The key ``policy export|plan|apply`` send to a running service: a client's, not a setting.
API_KEY_ENV = "TICKET_DISPATCHER_API_KEY"
# Test-suite settings (e.g. TICKET_DISPATCHER_TEST_DATABASE_URL) share the prefix.
_TEST_ENV_PREFIX = "TICKET_DISPATCHER_TEST_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
SINGLE, SHARED = "single", "shared"
CLUSTER_MODES = (SINGLE, SHARED)
# Client actors per integration, each a thread: at least execution_slots + trigger_actors
# (at most 100 + 32), and a bound that keeps four integrations' threads countable.
MAX_CLIENT_POOL_SIZE = 256


# --- kinds of this configuration ---------------------------------------------------------------


def _url(check: Callable[[str], bool], expected: str) -> Kind:
    # A URL may embed credentials (https://user:pass@host, a PostgreSQL password): never
    # echoed in an error, shown without its password.
    return replace(text(check=check, expected=expected), echo=False, show=mask_url_password)


def _is_database_url(value: str) -> bool:
    return value.startswith(("sqlite:///", "postgresql://", "postgres://"))


def _is_http_url(value: str) -> bool:
    # Empty means "not configured" (the client refuses to call; the sandbox fills it in).
    if value == "":
        return True
    try:  # a host that is there, and a port that is a port: "http://[bad", "https://h:x"
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is none
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _database_url() -> Kind:
    return _url(_is_database_url, "a URL starting with sqlite:///, postgresql:// or postgres://")


def _cluster_mode() -> Kind:
    return _one_of(CLUSTER_MODES, str.lower)


def _http_url() -> Kind:
    return _url(_is_http_url, "an http:// or https:// URL, or empty")


def _field_id() -> Kind:
    return text(check=bool, expected=f'a Jira field id like "{DEFAULT_L2_FIELD_ID}"')


def _log_level() -> Kind:
    return _one_of(LOG_LEVELS, str.upper)


def _cpu_affinity() -> Kind:
    """A CPU number (``cpu.pin``), or nothing: unset, ``"off"`` (any case) or, in the
    environment, empty. ``"auto"`` is refused: ``serve`` no longer chooses a CPU itself."""
    expected = 'a CPU number (0 or more), or "off" to leave the CPU placement alone'

    def from_toml(value: Any) -> int | None:
        if isinstance(value, str) and value.strip().lower() in ("off", ""):
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str) and value.strip().lower() == "auto":
            raise Invalid(f'{expected} ("auto" is gone: serve leaves the CPU placement to '
                          f"the operator unless given a CPU)")
        raise Invalid(expected)

    def from_env(value: str) -> int | None:
        return from_toml(int(value) if value.strip().isdigit() else value)

    return Kind(expected, from_toml, from_env)


def _one_of(choices: tuple[str, ...], normal: Callable[[str], str]) -> Kind:
    """One of ``choices``, written in any case and with spaces around (``normal`` gives the
    case the choices are in)."""
    expected = "one of " + ", ".join(choices)

    def parse(value: Any) -> str:
        if not isinstance(value, str) or normal(value.strip()) not in choices:
            raise Invalid(expected)
        return normal(value.strip())

    return Kind(expected, parse, parse)


# --- API keys ----------------------------------------------------------------------------------


class AccessRole(StrEnum):
    """The roles an API key carries; what each may call is decided in http/auth.py."""

    AUTOMATION = "automation"
    VIEWER = "viewer"
    OPERATOR = "operator"


@dataclass(frozen=True)
class ApiKey:
    """One configured key. Only the SHA-256 of the key is kept; plain keys are hashed at load."""

    name: str
    role: AccessRole
    key_sha256: str = field(repr=False)  # lower-case hex, as ``key_digest`` gives


def key_digest(key: str) -> str:
    """The SHA-256 (lower-case hex) kept for a plain key, and compared with a presented one."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


# A shorter plain key can be guessed or was typed by hand; the message names the key, never
# its value. Hashed keys cannot be measured.
MIN_API_KEY_LENGTH = 24
_SHA256_HEX = re.compile(r"\A[0-9a-fA-F]{64}\Z")  # fullmatch: "$" would allow a final "\n"
_KEY_ENTRY_FIELDS = ("name", "role", "key", "key_sha256")


def _read_api_keys(file: Source | None, env: Source | None,
                   problems: SettingProblems) -> tuple[ApiKey, ...]:
    """``[[auth.api_keys]]`` plus ``TICKET_DISPATCHER_AUTH_API_KEYS``: the variable adds keys
    to the file's instead of replacing them."""
    keys: list[ApiKey | None] = []
    if file is not None:
        if isinstance(file.value, list):
            keys += [_file_key(f"{file.name}[{index}]", entry, problems)
                     for index, entry in enumerate(file.value)]
        else:
            problems.add(file.name, "expected an array of tables ([[auth.api_keys]])")
    if env is not None:
        keys += _env_keys(env, problems)
    found = [key for key in keys if key is not None]
    _check_unique(found, problems)
    return tuple(found)


def _file_key(path: str, entry: Any, problems: SettingProblems) -> ApiKey | None:
    if not isinstance(entry, dict):
        problems.add(path, "expected a table with name, role and key or key_sha256")
        return None
    before = len(problems.items)
    for key in entry:
        if key not in _KEY_ENTRY_FIELDS:
            problems.add(f"{path}.{key}", "unknown key" + suggest(key, _KEY_ENTRY_FIELDS))
    name, role = entry.get("name"), entry.get("role")
    if not isinstance(name, str) or not name.strip():
        problems.add(f"{path}.name", "expected a non-empty string")
    if not isinstance(role, str) or role not in set(AccessRole):
        got = f", got {shown(role)}" if role is not None else ""
        problems.add(f"{path}.role", f"expected one of {', '.join(AccessRole)}{got}")
    digest = _file_key_digest(path, entry, problems)
    if len(problems.items) > before or digest is None:
        return None
    # A name or role that is no string added a problem above, so both are strings here.
    assert isinstance(name, str) and isinstance(role, str)
    return ApiKey(name.strip(), AccessRole(role), digest)


def _file_key_digest(path: str, entry: dict, problems: SettingProblems) -> str | None:
    plain, hashed = entry.get("key"), entry.get("key_sha256")
    if (plain is None) == (hashed is None):
        problems.add(path, "expected exactly one of key or key_sha256")
        return None
    if plain is not None:
        if not isinstance(plain, str) or not plain:
            problems.add(f"{path}.key", "expected a non-empty string")
            return None
        if len(plain) < MIN_API_KEY_LENGTH:
            problems.add(f"{path}.key", _short_key(entry.get("name")))
            return None
        return key_digest(plain)
    if not isinstance(hashed, str) or not _SHA256_HEX.fullmatch(hashed):
        problems.add(f"{path}.key_sha256", "expected 64 hexadecimal characters (a SHA-256)")
        return None
    return hashed.lower()


def _env_keys(env: Source, problems: SettingProblems) -> list[ApiKey]:
    """``name:role:key,name:role:key`` (the key may contain ':' but not ',')."""
    keys: list[ApiKey] = []
    for position, entry in enumerate((e.strip() for e in env.value.split(",")), start=1):
        if not entry:
            continue
        parts = entry.split(":", 2)
        # Only the entry number is named: any part of the entry may be the secret.
        where = f"{env.name} entry {position}"
        if len(parts) != 3 or not parts[0].strip() or not parts[2]:
            problems.add(where, "expected name:role:key")
        elif parts[1].strip() not in set(AccessRole):
            problems.add(where, f"expected a role among {', '.join(AccessRole)}")
        elif len(parts[2]) < MIN_API_KEY_LENGTH:
            problems.add(where, _short_key(parts[0].strip()))
        else:
            keys.append(ApiKey(parts[0].strip(), AccessRole(parts[1].strip()),
                               key_digest(parts[2])))
    return keys


def _short_key(name: Any) -> str:
    named = f"key {shown(name)}" if isinstance(name, str) and name.strip() else "the key"
    return f"{named} is shorter than {MIN_API_KEY_LENGTH} characters; use a long random key"


def _check_unique(keys: list[ApiKey], problems: SettingProblems) -> None:
    names: set[str] = set()
    owners: dict[str, str] = {}
    for key in keys:
        if key.name in names:
            problems.add("auth.api_keys", f"duplicate key name {shown(key.name)}")
        names.add(key.name)
        if key.key_sha256 in owners:
            problems.add("auth.api_keys", f"keys {shown(owners[key.key_sha256])} and "
                         f"{shown(key.name)} are the same key")
        owners.setdefault(key.key_sha256, key.name)


def _show_api_keys(keys: tuple[ApiKey, ...]) -> list[dict]:
    return [{"name": key.name, "role": key.role.value, "key_sha256": MASK} for key in keys]


# --- calendar feeds ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CalendarFeed:
    """One iCalendar feed that time off is imported from. ``email`` given: that engineer's own
    calendar, every busy event theirs; None: an organisation's feed, whose events name their
    people. ``url`` is a secret (a private calendar URL carries its token in the path or
    query): it is never shown, logged or put into an error message; ``name`` stands for it."""

    name: str
    url: str = field(repr=False)
    email: str | None = None

    def shown_url(self) -> str:
        """Only the scheme and the host (and port): what ``config show`` prints."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 address
            host = f"[{host}]"
        return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


FEED_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# Time off entered through the API carries this source; a feed's entries carry the feed's name.
RESERVED_FEED_NAMES = frozenset({"api"})
_FEED_NAME_EXPECTED = ("a name of 1 to 64 characters of a-z, 0-9, _ and -, starting with a "
                       "letter or digit")
_FEED_ENTRY_FIELDS = ("name", "url", "email")
# A path or query this short carries no token, and masking it in the log would cut words
# out of unrelated lines ("/ics" out of "/icsfeeds").
_MIN_SECRET_PART = 8


def _is_feed_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) \
        and not any(char.isspace() for char in value)


def _read_feeds(file: Source | None, env: Source | None,
                problems: SettingProblems) -> tuple[CalendarFeed, ...]:
    """``[[availability.feeds]]`` plus ``TICKET_DISPATCHER_AVAILABILITY_FEEDS``: the variable
    adds feeds to the file's. No message ever shows a URL: only where the bad entry is."""
    feeds: list[CalendarFeed | None] = []
    if file is not None:
        if isinstance(file.value, list):
            feeds += [_file_feed(f"{file.name}[{index}]", entry, problems)
                      for index, entry in enumerate(file.value)]
        else:
            problems.add(file.name, "expected an array of tables ([[availability.feeds]])")
    if env is not None:
        feeds += _env_feeds(env, problems)
    found = [feed for feed in feeds if feed is not None]
    names = [feed.name for feed in found]
    for name in sorted({name for name in names if names.count(name) > 1}):
        problems.add("availability.feeds", f"duplicate feed name {shown(name)}")
    return tuple(found)


def _file_feed(path: str, entry: Any, problems: SettingProblems) -> CalendarFeed | None:
    if not isinstance(entry, dict):
        problems.add(path, "expected a table with name, url and optionally email")
        return None
    before = len(problems.items)
    for key in entry:
        if key not in _FEED_ENTRY_FIELDS:
            problems.add(f"{path}.{key}", "unknown key" + suggest(key, _FEED_ENTRY_FIELDS))
    name, url, email = entry.get("name"), entry.get("url"), entry.get("email")
    name_problem = _feed_name_problem(name)
    if name_problem is not None:
        problems.add(f"{path}.name", name_problem)
    if not isinstance(url, str) or not _is_feed_url(url):
        problems.add(f"{path}.url", "expected an http:// or https:// URL")
    if email is not None and not ENGINEER_EMAIL(email.strip() if isinstance(email, str) else email):
        problems.add(f"{path}.email", "expected an email address (the engineer whose calendar "
                                      "this is), or no email for an organisation's feed")
    if len(problems.items) > before:
        return None
    # Each value that is no string added a problem above.
    assert isinstance(name, str) and isinstance(url, str)
    return CalendarFeed(name, url, email.strip().lower() if isinstance(email, str) else None)


def _env_feeds(env: Source, problems: SettingProblems) -> list[CalendarFeed]:
    """Whitespace-separated ``name=url`` or ``name:email=url``, split at the first "=" (a URL
    may hold more). A problem names the entry by its number, and by its name once that is a
    valid one: the URL is the secret."""
    feeds: list[CalendarFeed] = []
    for position, entry in enumerate(env.value.split(), start=1):
        head, equals, url = entry.partition("=")
        name, colon, email = head.partition(":")
        where = f"{env.name} entry {position}"
        if not equals:
            problems.add(where, "expected name=url or name:email=url")
        elif (problem := _feed_name_problem(name)) is not None:
            problems.add(where, problem)
        elif colon and not ENGINEER_EMAIL(email):
            problems.add(where, f"feed {shown(name)}: expected an email address after the "
                                "name (name:email=url)")
        elif not _is_feed_url(url):
            problems.add(where, f"feed {shown(name)}: expected an http:// or https:// URL")
        else:
            feeds.append(CalendarFeed(name, url, email.lower() if colon else None))
    return feeds


def _feed_name_problem(name: Any) -> str | None:
    if not isinstance(name, str) or FEED_NAME.fullmatch(name) is None:
        return f"expected {_FEED_NAME_EXPECTED}"
    if name in RESERVED_FEED_NAMES:
        return f"the name {shown(name)} is reserved for time off entered through the API"
    return None


def _show_feeds(feeds: tuple[CalendarFeed, ...]) -> list[dict]:
    return [{"name": feed.name, "url": feed.shown_url(), "email": feed.email} for feed in feeds]


def feed_url_secrets(url: str) -> list[str]:
    """What of a feed's URL the log redactor masks: the URL, its password, and its path and
    query when they are long enough to carry a token, each as written and percent-decoded."""
    parts = urlsplit(url)
    values = [url, parts.password or ""]
    values += [part for part in (parts.path, parts.query) if len(part) >= _MIN_SECRET_PART]
    return [form for value in values if value for form in (value, unquote(value))]


# --- the configuration -------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpConfig:
    """The HTTP server (waitress) and request limits.

    ``connection_limit`` and ``channel_timeout`` are sized for a webhook service behind a proxy:
    waitress's own defaults (100 connections, 120 s) let a client that opens more connections
    than that, each with a request half sent, hold every slot and starve ``/healthz``. Idle
    connections cost a file descriptor each, not a thread, so 1000 is cheap; 30 s is far beyond
    any real client's pause between bytes. The channel timeout is rounded up to whole seconds
    (waitress's unit). ``max_json_depth`` bounds request bodies (8..512: enough for any policy,
    and far below Python's recursion limit).
    """

    host: str = setting("127.0.0.1", text(check=bool, expected="a non-empty string"))
    port: int = setting(8080, integer(1, 65535))
    threads: int = setting(8, integer(1, 64))
    connection_limit: int = setting(1000, integer(10, 100_000))
    channel_timeout: timedelta = setting(
        timedelta(seconds=30), duration(timedelta(seconds=1), timedelta(hours=1)))
    max_body_bytes: int = setting(1_048_576, integer(1))  # triggers are always capped at 64 KiB
    max_json_depth: int = setting(64, integer(8, 512))
    trigger_rate: float = setting(20.0, number(0))  # tokens per key and second; 0 = off
    trigger_burst: int = setting(100, integer(0))


@dataclass(frozen=True)
class AuthConfig:
    """API keys and the throttle on failed attempts.

    ``failure_burst`` failed attempts (no key, or a wrong one) from one client address are
    answered 401; beyond them 429 with ``Retry-After`` until the bucket refills at
    ``failure_rate`` attempts per second (default one every 10 s). ``failure_rate = 0`` turns
    the throttle off. A correct key is never throttled (http/auth.py says why).
    """

    metrics_public: bool = setting(True, boolean())
    failure_rate: float = setting(0.1, number(0))
    failure_burst: int = setting(10, integer(0))
    api_keys: tuple[ApiKey, ...] = compound((), _read_api_keys, _show_api_keys)


def _addresses() -> Kind:
    return text(check=lambda value: _parse_networks(value) is not None,
                expected="comma-separated IP addresses or networks (10.0.0.5, 10.1.0.0/16)")


def _parse_networks(value: str) -> tuple | None:
    """``"10.0.0.5, 10.1.0.0/16"`` as networks; None when any part is not one."""
    networks = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            return None
    return tuple(networks)


def _names(value: str) -> frozenset[str]:
    return frozenset(name.strip() for name in value.split(",") if name.strip())


@dataclass(frozen=True)
class ConsoleConfig:
    """The operator console at ``/console/`` (docs/console.md).

    A session cookie is signed with ``session_secret`` (every replica must share it; when it is
    empty each process draws a random one at start, so a restart signs everyone out) and lasts
    ``session_lifetime``. ``secure_cookie = false`` is for plain-HTTP development only.
    ``trusted_proxies`` lists the reverse proxies (oauth2-proxy) whose ``X-Forwarded-Email`` and
    ``X-Forwarded-Groups`` headers are believed; the groups map to roles by
    ``proxy_operator_groups`` and ``proxy_viewer_groups``. Those headers from any other address
    are ignored.
    """

    enabled: bool = setting(True, boolean())
    session_secret: str = setting("", text(secret=True))
    session_lifetime: timedelta = setting(
        timedelta(hours=12), duration(timedelta(minutes=1), timedelta(days=30)))
    secure_cookie: bool = setting(True, boolean())
    trusted_proxies: str = setting("", _addresses())
    proxy_operator_groups: str = setting("", text())
    proxy_viewer_groups: str = setting("", text())

    @property
    def proxy_networks(self) -> tuple:
        return _parse_networks(self.trusted_proxies) or ()

    @property
    def operator_groups(self) -> frozenset[str]:
        return _names(self.proxy_operator_groups)

    @property
    def viewer_groups(self) -> frozenset[str]:
        return _names(self.proxy_viewer_groups)


@dataclass(frozen=True)
class NotificationsConfig:
    enabled: bool = setting(False, boolean())  # one switch for the whole workflow, default off


@dataclass(frozen=True)
class JiraConfig:
    base_url: str = setting("", _http_url())
    email: str = setting("", text())
    api_token: str = setting("", text(secret=True))
    l2_field_id: str = setting(DEFAULT_L2_FIELD_ID, _field_id())
    severity_field_id: str = setting(DEFAULT_SEVERITY_FIELD_ID, _field_id())
    auto_assign_label: str = setting(DEFAULT_AUTO_ASSIGN_LABEL, text())
    # The secrets Jira's admin webhooks are signed with (http/webhooks.py); a list, so that a
    # secret can be rotated: every one is accepted. None: the webhook route refuses everything.
    webhook_secrets: tuple[str, ...] = setting((), secret_list())
    webhook_max_bytes: int = setting(2_097_152, integer(65_536, 16_777_216))
    # A signed delivery that arrived within this of its event is the dispatch's snapshot of the
    # issue, when it carries every field the active policies read (domain/webhooks.py); "0"
    # reads every issue again.
    webhook_snapshot_max_age: timedelta = setting(
        timedelta(seconds=10), duration(timedelta(0), timedelta(minutes=10)))
    # Calls a second to the site never exceeded, divided among the live replicas in shared
    # mode (integrations/call_policy.py, ``Pacer``); 0: no budget set.
    max_calls_per_second: float = setting(0.0, number(0))

    def basic_credential(self) -> str:
        """What HTTP Basic sends for ``email:api_token``; a Jira error may echo it back, and
        it is as good as the token, so it is a secret too ("" without a token)."""
        if not self.api_token:
            return ""
        return base64.b64encode(f"{self.email}:{self.api_token}".encode()).decode("ascii")


@dataclass(frozen=True)
class LarkConfig:
    base_url: str = setting("https://open.feishu.cn", _http_url())
    app_id: str = setting("", text())
    app_secret: str = setting("", text(secret=True))
    # What the app's "Events & Callbacks" page in Lark's developer console shows: the card
    # callbacks (a button pressed on a card) are checked with them (http/lark_callbacks.py).
    # With neither, cards carry no buttons and the callback route answers 404.
    encrypt_key: str = setting("", text(secret=True))
    verification_token: str = setting("", text(secret=True))

    @property
    def callbacks(self) -> bool:
        """Whether card callbacks are taken (and cards carry buttons)."""
        return bool(self.encrypt_key or self.verification_token)


@dataclass(frozen=True)
class OncallConfig:
    base_url: str = setting("", _http_url())
    token: str = setting("", text(secret=True))


@dataclass(frozen=True)
class CoreConfig:
    base_url: str = setting("", _http_url())
    token: str = setting("", text(secret=True))


@dataclass(frozen=True)
class IntegrationsConfig:
    """Timeouts of every integration call (defaults 3 s / 10 s)."""

    connect_timeout: timedelta = setting(timedelta(seconds=3), duration())
    read_timeout: timedelta = setting(timedelta(seconds=10), duration())


@dataclass(frozen=True)
class AvailabilityConfig:
    """Time off imported from iCalendar feeds (docs/operations.md, "Time off from calendars").

    Every ``refresh_every`` (and once at start) each of ``feeds`` is fetched, with the
    integrations' timeouts and at most ``max_feed_bytes``, and its absences from 14 days back
    to ``horizon`` ahead replace that feed's time off; a feed with more than
    ``max_feed_events`` occurrences there is refused, and a failed refresh keeps the last good
    copy.
    """

    feeds: tuple[CalendarFeed, ...] = compound((), _read_feeds, _show_feeds)
    refresh_every: timedelta = setting(
        timedelta(minutes=15), duration(timedelta(minutes=1), timedelta(days=1)))
    max_feed_bytes: int = setting(5_000_000, integer(1024, 100_000_000))
    max_feed_events: int = setting(20_000, integer(1, 100_000))
    horizon: timedelta = setting(
        timedelta(days=180), duration(timedelta(days=1), timedelta(days=730)))


@dataclass(frozen=True)
class DatabaseConfig:
    """How long the service waits on its database before calling it unavailable.

    Every wait is bounded, so a request answers 503 within seconds instead of hanging while
    the database is away: ``connect_timeout`` for a new PostgreSQL connection (libpq counts
    whole seconds), ``statement_timeout`` for one PostgreSQL statement, ``busy_timeout`` for a
    lock another connection or process holds (SQLite's write lock; a PostgreSQL row lock, as
    its ``lock_timeout``), and ``pool_wait`` for a free pooled connection.
    """

    connect_timeout: timedelta = setting(
        timedelta(seconds=5), duration(timedelta(seconds=1), timedelta(minutes=5)))
    statement_timeout: timedelta = setting(
        timedelta(seconds=15), duration(timedelta(milliseconds=100), timedelta(hours=1)))
    busy_timeout: timedelta = setting(
        timedelta(seconds=5), duration(timedelta(0), timedelta(minutes=5)))
    pool_wait: timedelta = setting(
        timedelta(seconds=5), duration(timedelta(milliseconds=100), timedelta(minutes=5)))


@dataclass(frozen=True)
class LeasesConfig:
    """Claimed triggers and running executions carry a lease: an owner (this process), an
    epoch and an expiry that a heartbeat renews every ``heartbeat``. Work whose lease has not
    been renewed for ``duration`` is taken over by the sweeper (which runs every
    ``heartbeat``), and every checkpoint write of the old holder is refused from then on."""

    heartbeat: timedelta = setting(
        timedelta(seconds=5), duration(timedelta(milliseconds=100), timedelta(minutes=5)))
    duration: timedelta = setting(
        timedelta(seconds=30), duration(timedelta(seconds=1), timedelta(hours=1)))


@dataclass(frozen=True)
class ClusterConfig:
    """How many processes serve the database (docs/operations.md, "High availability").

    ``single`` (the default): this process is the only one; its start gives back every lease a
    previous process held. ``shared``: several replicas on one PostgreSQL database claim work
    from it under leases and wake each other through LISTEN/NOTIFY. ``drain``: in shared mode,
    how long after SIGTERM the replica still accepts triggers (for the others to process) while
    its readiness already says no, so a load balancer stops sending before the port closes.
    """

    mode: str = setting(SINGLE, _cluster_mode())
    drain: timedelta = setting(timedelta(seconds=5), duration(timedelta(0), timedelta(minutes=5)))

    @property
    def shared(self) -> bool:
        return self.mode == SHARED


@dataclass(frozen=True)
class LanesConfig:
    """The order of the work that waits (actors/lanes.py): while ordinary triggers and new
    executions wait, ``notification_share`` notifications go for every ordinary one; ``0``:
    one line, first in, first out."""

    notification_share: int = setting(4, integer(0, 100))


@dataclass(frozen=True)
class AckWatchConfig:
    """How fast the ACK watcher (actors/watcher.py) looks at parked page waits: at most
    ``looks_per_second`` looks (each a share of a Jira search, one Lark read and one saved
    look). With more waits watched than ``looks_per_second`` times their poll interval, each
    wait is looked at once a round of them all, further apart than its poll; its deadline is
    kept exactly all the same. ``0``: no limit."""

    looks_per_second: float = setting(50.0, number(0))


@dataclass(frozen=True)
class AuditConfig:
    """The audit trail of changes (docs/operations.md, "Audit trail"): a record is kept for
    ``retention``, then pruned; nothing else removes one."""

    retention: timedelta = setting(timedelta(days=400),
                                   duration(timedelta(days=1), timedelta(days=3650)))


@dataclass(frozen=True)
class MaintenanceConfig:
    """Maintenance windows (docs/operations.md, "Maintenance windows"): none lasts longer than
    ``max_duration``, and one current for longer than that raises an alert."""

    max_duration: timedelta = setting(timedelta(hours=24),
                                      duration(timedelta(minutes=1), timedelta(days=31)))


@dataclass(frozen=True)
class Config:
    database_url: str = setting("sqlite:///ticket-dispatcher.db", _database_url())
    execution_slots: int = setting(10, integer(1, 100))
    trigger_actors: int = setting(4, integer(1, 32))
    # 0: one client actor per execution slot and trigger actor (see ``client_actors``); an
    # explicit value below that is refused (``_check_client_pool``)
    client_pool_size: int = setting(0, integer(0, MAX_CLIENT_POOL_SIZE))
    trigger_defer_interval: timedelta = setting(timedelta(seconds=5), duration())
    trigger_poll_interval: timedelta = setting(timedelta(seconds=5), duration())
    # The longest a trigger actor holds back its next trigger while trigger requests are being
    # accepted (actors/intake.py); 0 = never.
    intake_priority: timedelta = setting(timedelta(seconds=1),
                                         duration(timedelta(0), timedelta(seconds=10)))
    execution_load_retries: int = setting(5, integer(0))
    # How long work keeps retrying a passing fault of a service (no answer, a failed
    # connection, 429, 5xx), counted from its first failure, before it fails for it.
    transient_retry_budget: timedelta = setting(timedelta(minutes=30),
                                                duration(timedelta(seconds=1),
                                                         timedelta(days=7)))
    actor_restarts: int = setting(3, integer(0))
    shutdown_timeout: timedelta = setting(timedelta(seconds=10), duration())  # SIGTERM to exit
    log_level: str = setting("INFO", _log_level())
    cpu_affinity: int | None = setting(None, _cpu_affinity())  # ``serve`` only
    http: HttpConfig = section(HttpConfig)
    database: DatabaseConfig = section(DatabaseConfig)
    leases: LeasesConfig = section(LeasesConfig)
    cluster: ClusterConfig = section(ClusterConfig)
    lanes: LanesConfig = section(LanesConfig)
    ack_watch: AckWatchConfig = section(AckWatchConfig)
    auth: AuthConfig = section(AuthConfig)
    console: ConsoleConfig = section(ConsoleConfig)
    notifications: NotificationsConfig = section(NotificationsConfig)
    jira: JiraConfig = section(JiraConfig)
    lark: LarkConfig = section(LarkConfig)
    oncall: OncallConfig = section(OncallConfig)
    core: CoreConfig = section(CoreConfig)
    integrations: IntegrationsConfig = section(IntegrationsConfig)
    availability: AvailabilityConfig = section(AvailabilityConfig)
    audit: AuditConfig = section(AuditConfig)
    maintenance: MaintenanceConfig = section(MaintenanceConfig)

    @property
    def client_actors(self) -> int:
        """Client actors per integration: by default one for every execution slot and trigger
        actor, so no caller ever waits for a client while another one idles."""
        return self.client_pool_size or self.execution_slots + self.trigger_actors

    def secrets(self) -> list[str]:
        """Every non-empty secret value, for the log redactor."""
        values = [self.jira.api_token, self.lark.app_secret, self.lark.encrypt_key,
                  self.lark.verification_token, self.oncall.token, self.core.token,
                  self.jira.basic_credential(), self.console.session_secret,
                  *self.jira.webhook_secrets]
        password = urlsplit(self.database_url).password or ""
        # The URL carries the password percent-encoded; a driver error may show either form.
        values += [password, unquote(password), *url_query_passwords(self.database_url)]
        for feed in self.availability.feeds:  # a private calendar URL carries its token
            values += feed_url_secrets(feed.url)
        return sorted({value for value in values if value})


# --- loading -----------------------------------------------------------------------------------


def load_config(path: str | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read the effective configuration; raise ``ConfigError`` naming every bad key."""
    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_ENV) or None
    document = read_toml(path) if path is not None else {}
    return load(Config, document, environ, prefix=ENV_PREFIX, ignored=_not_a_setting,
                check=_check_across_keys)


def _not_a_setting(name: str) -> bool:
    return name in (CONFIG_ENV, API_KEY_ENV) or name.startswith(_TEST_ENV_PREFIX)


def _check_across_keys(config: Config, problems: SettingProblems) -> None:
    if config.http.trigger_rate > 0 and config.http.trigger_burst < 1:
        problems.add("http.trigger_burst", "must be at least 1 while http.trigger_rate is not 0")
    if config.auth.failure_rate > 0 and config.auth.failure_burst < 1:
        problems.add("auth.failure_burst", "must be at least 1 while auth.failure_rate is not 0")
    _check_client_pool(config, problems)
    if (not problems.refused("leases.heartbeat", "leases.duration")
            and config.leases.duration < 2 * config.leases.heartbeat):
        problems.add(problems.source_name("leases.duration"),
                     "must be at least twice leases.heartbeat, so one "
                     "missed heartbeat does not lose a lease")
    _check_cluster(config, problems)


def _check_cluster(config: Config, problems: SettingProblems) -> None:
    """Shared mode coordinates replicas through PostgreSQL (row locks that skip what another
    replica holds, advisory locks, LISTEN/NOTIFY); a SQLite file has one process."""
    if problems.refused("cluster.mode", "database_url") or not config.cluster.shared:
        return
    if not config.database_url.lower().startswith("postgres"):
        problems.add(problems.source_name("cluster.mode"),
                     'shared needs a PostgreSQL database_url: a SQLite database is served by '
                     'one process')
    if (not problems.refused("cluster.drain", "shutdown_timeout")
            and config.cluster.drain >= config.shutdown_timeout):
        problems.add(problems.source_name("cluster.drain"),
                     "must be below shutdown_timeout, which bounds the whole shutdown")


def _check_client_pool(config: Config, problems: SettingProblems) -> None:
    """An explicit ``client_pool_size`` covers every execution slot and trigger actor: with
    fewer clients, slots wait for a client and buy nothing (40 slots with 8 clients once ran
    only 5 to 12 at a time)."""
    if config.client_pool_size == 0 or problems.refused(
            "client_pool_size", "execution_slots", "trigger_actors"):
        return  # the default, or a value already reported: a second message would mislead
    minimum = config.execution_slots + config.trigger_actors
    if config.client_pool_size < minimum:
        problems.add(
            problems.source_name("client_pool_size"),
            f"must be 0 (one client per execution slot and trigger actor) or at least "
            f"{minimum} (execution_slots {config.execution_slots} + trigger_actors "
            f"{config.trigger_actors}), got {config.client_pool_size}",
        )
