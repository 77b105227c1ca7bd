"""Configuration: a TOML file plus ``TICKET_DISPATCHER_*`` environment overrides (SPEC §13).

Precedence is defaults < file < environment. Every key is optional; an unknown key or a bad value
stops the start with a ``ConfigError`` naming the key (``http.port`` for the file,
``TICKET_DISPATCHER_HTTP_PORT`` for the environment). Values of secret keys never appear in an
error message, and plain API keys are hashed at load so the process never keeps them (SPEC §10).

Beyond the file of SPEC §13 two additions an operator needs to run the service:
``log_level`` (top level, default ``"INFO"``) and ``[integrations] connect_timeout`` /
``read_timeout`` (defaults ``"3s"`` / ``"10s"``, the timeouts of every integration call, §11).

Bounds that keep the thread and connection counts finite (issue 7): ``execution_slots`` 1..100,
``trigger_actors`` 1..32, ``http.threads`` 1..64. Together they size the database connection
pool (``store.connection_budget``), which the service checks against the server at start.
``client_pool_size`` 0 (the default) gives one client actor per execution slot and trigger
actor; an explicit value must be at least ``execution_slots + trigger_actors``, or a caller
could wait for a client while its slot idles. ``shutdown_timeout`` (default ``"10s"``) is the
one deadline from SIGTERM to exit, whatever is in flight.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ticket_dispatcher.domain.timeutil import parse_duration
from ticket_dispatcher.errors import ConfigError, Problem

ENV_PREFIX = "TICKET_DISPATCHER_"
CONFIG_ENV = "TICKET_DISPATCHER_CONFIG"
# Test-suite settings (e.g. TICKET_DISPATCHER_TEST_DATABASE_URL, §14) share the prefix.
_IGNORED_ENV_PREFIX = "TICKET_DISPATCHER_TEST_"
_API_KEYS_ENV = "TICKET_DISPATCHER_AUTH_API_KEYS"
MASK = "***"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_SHA256_HEX = re.compile(r"\A[0-9a-fA-F]{64}\Z")  # fullmatch: "$" would allow a final "\n"
# A shorter plain key can be guessed or was typed by hand (issue 8, SPEC §13); the message
# names the key, never its value. Hashed keys cannot be measured.
MIN_API_KEY_LENGTH = 24


class _Invalid(ValueError):
    """A value that does not fit its key; the text is safe to show (no secret in it)."""


# --- value kinds -------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


@dataclass(frozen=True)
class _Kind:
    """How one key is read from TOML (typed) and from the environment (text)."""

    expected: str
    from_toml: Callable[[Any], Any]
    from_env: Callable[[str], Any]
    secret: bool = False  # never echo the value in an error
    # Whether a value is shown as "got ..." in an error (URLs may carry credentials).
    echo: bool = True


def _integer(low: int, high: int | None = None) -> _Kind:
    expected = (
        f"an integer between {low} and {high}" if high is not None else f"an integer >= {low}"
    )

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(expected)
        if value < low or (high is not None and value > high):
            raise _Invalid(expected)
        return value

    def from_env(text: str) -> int:
        try:
            return check(int(text.strip()))
        except ValueError:
            raise _Invalid(expected) from None

    return _Kind(expected, check, from_env)


def _number(low: float) -> _Kind:
    expected = f"a number >= {low:g}"

    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(expected)
        if value != value or value in (float("inf"), float("-inf")) or value < low:
            raise _Invalid(expected)
        return float(value)

    def from_env(text: str) -> float:
        try:
            return check(float(text.strip()))
        except ValueError:
            raise _Invalid(expected) from None

    return _Kind(expected, check, from_env)


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _boolean() -> _Kind:
    expected = "true or false"

    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise _Invalid(expected)
        return value

    def from_env(text: str) -> bool:
        word = text.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise _Invalid("true or false (also 1/0, yes/no)")

    return _Kind(expected, check, from_env)


def format_duration(value: timedelta) -> str:
    """The shortest of ``"1h"``, ``"5m"``, ``"5s"``, ``"500ms"`` that is exact."""
    millis = round(value.total_seconds() * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis and millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


def _duration(low: timedelta | None = None, high: timedelta | None = None) -> _Kind:
    if low is None:
        expected = 'a positive duration like "500ms", "5s" or "5m"'
    else:
        expected = f'a duration between "{format_duration(low)}" and "{format_duration(high)}"'

    def check(value: Any) -> timedelta:
        if not isinstance(value, str):
            raise _Invalid(expected)
        try:
            parsed = parse_duration(value)
        except ValueError:
            raise _Invalid(expected) from None
        if parsed <= timedelta(0) or (low is not None and not low <= parsed <= high):
            raise _Invalid(expected)
        return parsed

    return _Kind(expected, check, check)


def _text(
    *, secret: bool = False, check: Callable[[str], bool] | None = None, expected: str = "a string"
) -> _Kind:
    def parse(value: Any) -> str:
        if not isinstance(value, str) or (check is not None and not check(value)):
            raise _Invalid(expected)
        return value

    return _Kind(expected, parse, parse, secret=secret, echo=not secret)


def _is_database_url(value: str) -> bool:
    return value.startswith(("sqlite:///", "postgresql://", "postgres://"))


def _is_http_url(value: str) -> bool:
    # Empty means "not configured" (the client refuses to call; the sandbox fills it in).
    return value == "" or (value.startswith(("http://", "https://")) and len(value) > 8)


def _database_url() -> _Kind:
    # Secret: a PostgreSQL URL may carry the password.
    return _text(
        secret=True,
        check=_is_database_url,
        expected="a URL starting with sqlite:///, postgresql:// or postgres://",
    )


def _http_url() -> _Kind:
    kind = _text(check=_is_http_url, expected="an http:// or https:// URL, or empty")
    # A URL may embed credentials (https://user:pass@host), so it is never echoed.
    return _Kind(kind.expected, kind.from_toml, kind.from_env, echo=False)


def _field_id() -> _Kind:
    return _text(check=bool, expected='a Jira field id like "customfield_10053"')


def _log_level() -> _Kind:
    expected = "one of " + ", ".join(LOG_LEVELS)

    def parse(value: Any) -> str:
        if not isinstance(value, str) or value.strip().upper() not in LOG_LEVELS:
            raise _Invalid(expected)
        return value.strip().upper()

    return _Kind(expected, parse, parse)


def _setting(default: Any, kind: _Kind) -> Any:
    return field(default=default, metadata={"kind": kind})


def _section(factory: Callable[[], Any]) -> Any:
    return field(default_factory=factory, metadata={"section": True})


# --- the configuration -------------------------------------------------------------------------


class Role(StrEnum):
    """API key roles (SPEC §10)."""

    AUTOMATION = "automation"
    VIEWER = "viewer"
    OPERATOR = "operator"


@dataclass(frozen=True)
class ApiKey:
    """One configured key. Only the SHA-256 of the key is kept; plain keys are hashed at load."""

    name: str
    role: Role
    key_sha256: str = field(repr=False)  # lower-case hex

    @classmethod
    def from_plain(cls, name: str, role: Role, key: str) -> ApiKey:
        return cls(name, role, _sha256_hex(key))


@dataclass(frozen=True)
class HttpConfig:
    """The HTTP server (waitress) and request limits (SPEC §10, §13, issue 8).

    ``connection_limit`` and ``channel_timeout`` are sized for a webhook service behind a proxy:
    waitress's own defaults (100 connections, 120 s) let 150 idle half-sent requests hold every
    slot and starve ``/healthz``. Idle connections cost a file descriptor each, not a thread,
    so 1000 is cheap; 30 s is far beyond any real client's pause between bytes. The channel
    timeout is rounded up to whole seconds (waitress's unit). ``max_json_depth`` bounds request
    bodies (8..512: enough for any policy, and far below Python's recursion limit).
    """

    host: str = _setting("127.0.0.1", _text(check=bool, expected="a non-empty string"))
    port: int = _setting(8080, _integer(1, 65535))
    threads: int = _setting(8, _integer(1, 64))
    connection_limit: int = _setting(1000, _integer(10, 100_000))
    channel_timeout: timedelta = _setting(
        timedelta(seconds=30), _duration(timedelta(seconds=1), timedelta(hours=1)))
    max_body_bytes: int = _setting(1_048_576, _integer(1))  # triggers are always capped at 64 KiB
    max_json_depth: int = _setting(64, _integer(8, 512))
    trigger_rate: float = _setting(20.0, _number(0))  # tokens per key and second; 0 = off
    trigger_burst: int = _setting(100, _integer(0))


@dataclass(frozen=True)
class AuthConfig:
    """API keys and the throttle on failed attempts (SPEC §10, issue 8).

    ``failure_burst`` failed attempts (no key, or a wrong one) from one client address are
    answered 401; beyond them 429 with ``Retry-After`` until the bucket refills at
    ``failure_rate`` attempts per second (default one every 10 s). ``failure_rate = 0`` turns
    the throttle off. A correct key is never throttled (http/auth.py says why).
    """

    metrics_public: bool = _setting(True, _boolean())
    failure_rate: float = _setting(0.1, _number(0))
    failure_burst: int = _setting(10, _integer(0))
    api_keys: tuple[ApiKey, ...] = field(default=(), metadata={"api_keys": True})


@dataclass(frozen=True)
class NotificationsConfig:
    enabled: bool = _setting(False, _boolean())  # SPEC §5.7: one switch, default off


@dataclass(frozen=True)
class JiraConfig:
    base_url: str = _setting("", _http_url())
    email: str = _setting("", _text())
    api_token: str = _setting("", _text(secret=True))
    l2_field_id: str = _setting("customfield_10053", _field_id())
    severity_field_id: str = _setting("customfield_10076", _field_id())
    auto_assign_label: str = _setting("auto-dispatch", _text())


@dataclass(frozen=True)
class LarkConfig:
    base_url: str = _setting("https://open.feishu.cn", _http_url())
    app_id: str = _setting("", _text())
    app_secret: str = _setting("", _text(secret=True))


@dataclass(frozen=True)
class OncallConfig:
    base_url: str = _setting("", _http_url())
    token: str = _setting("", _text(secret=True))


@dataclass(frozen=True)
class CoreConfig:
    base_url: str = _setting("", _http_url())
    token: str = _setting("", _text(secret=True))


@dataclass(frozen=True)
class IntegrationsConfig:
    """Timeouts of every integration call (SPEC §11 defaults 3 s / 10 s)."""

    connect_timeout: timedelta = _setting(timedelta(seconds=3), _duration())
    read_timeout: timedelta = _setting(timedelta(seconds=10), _duration())


@dataclass(frozen=True)
class Config:
    database_url: str = _setting("sqlite:///ticket-dispatcher.db", _database_url())
    execution_slots: int = _setting(10, _integer(1, 100))
    trigger_actors: int = _setting(4, _integer(1, 32))
    # 0: one client actor per execution slot and trigger actor (see ``client_actors``); an
    # explicit value below that is refused (``_check_client_pool``)
    client_pool_size: int = _setting(0, _integer(0))
    trigger_defer_interval: timedelta = _setting(timedelta(seconds=5), _duration())
    trigger_poll_interval: timedelta = _setting(timedelta(seconds=5), _duration())
    execution_load_retries: int = _setting(5, _integer(0))
    actor_restarts: int = _setting(3, _integer(0))
    shutdown_timeout: timedelta = _setting(timedelta(seconds=10), _duration())  # SIGTERM to exit
    log_level: str = _setting("INFO", _log_level())
    http: HttpConfig = _section(HttpConfig)
    auth: AuthConfig = _section(AuthConfig)
    notifications: NotificationsConfig = _section(NotificationsConfig)
    jira: JiraConfig = _section(JiraConfig)
    lark: LarkConfig = _section(LarkConfig)
    oncall: OncallConfig = _section(OncallConfig)
    core: CoreConfig = _section(CoreConfig)
    integrations: IntegrationsConfig = _section(IntegrationsConfig)

    @property
    def client_actors(self) -> int:
        """Client actors per integration: by default one for every execution slot and trigger
        actor, so no caller ever waits for a client while another one idles."""
        return self.client_pool_size or self.execution_slots + self.trigger_actors

    def secrets(self) -> list[str]:
        """Every non-empty secret value, for the log redactor."""
        values = [self.jira.api_token, self.lark.app_secret, self.oncall.token, self.core.token]
        password = urlsplit(self.database_url).password or ""
        # The URL carries the password percent-encoded; a driver error may show either form.
        values += [password, unquote(password)]
        return sorted({value for value in values if value})


# --- authentication and roles (SPEC §10) -------------------------------------------------------


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def authenticate(auth: AuthConfig, presented: str | None) -> ApiKey | None:
    """The key whose hash matches ``presented``, compared in constant time against every key.

    No early exit: the time taken does not tell which key (or whether any) matched.
    """
    digest = _sha256_hex(presented or "").encode("ascii")
    found: ApiKey | None = None
    for key in auth.api_keys:
        if hmac.compare_digest(digest, key.key_sha256.encode("ascii")) and found is None:
            found = key
    return found if presented else None


def role_allows(have: Role, need: Role) -> bool:
    """operator ⊃ viewer; automation covers only automation; nothing else is implied.

    An operator does *not* implicitly get automation endpoints: SPEC §10 lists the roles of each
    endpoint explicitly (``POST /dispatch/triggers`` is "automation, operator"), so use
    ``allowed`` with the endpoint's set of roles.
    """
    return have == need or (have is Role.OPERATOR and need is Role.VIEWER)


def allowed(role: Role, allowed_roles: Iterable[Role]) -> bool:
    """Whether a key with ``role`` may call an endpoint open to ``allowed_roles``."""
    return any(role_allows(role, need) for need in allowed_roles)


# --- loading -----------------------------------------------------------------------------------


def _section_types() -> dict[str, type]:
    return {f.name: f.default_factory for f in fields(Config) if f.metadata.get("section")}


def _settings(cls: type) -> dict[str, _Kind]:
    return {f.name: f.metadata["kind"] for f in fields(cls) if "kind" in f.metadata}


@dataclass
class _Source:
    """One raw value and where it came from, for error messages."""

    value: Any
    name: str  # "http.port" or "TICKET_DISPATCHER_HTTP_PORT"
    from_env: bool


@dataclass
class _Raw:
    """Raw values collected from the file and the environment, before parsing."""

    values: dict[tuple[str, str], _Source] = field(default_factory=dict)
    invalid: set[tuple[str, str]] = field(default_factory=set)  # keys whose value was refused
    file_keys: list[Any] = field(default_factory=list)  # raw [[auth.api_keys]] tables
    env_keys: str | None = None
    problems: list[Problem] = field(default_factory=list)

    def problem(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))


def load_config(path: str | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read the effective configuration; raise ``ConfigError`` naming every bad key."""
    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_ENV) or None
    raw = _Raw()
    if path is not None:
        _collect_file(_read_toml(path), raw)
    _collect_env(environ, raw)
    config = _build(raw)
    if raw.problems:
        raise _config_error(raw.problems)
    return config


def _config_error(problems: list[Problem]) -> ConfigError:
    lines = [f"{p.path}: {p.message}" for p in problems]
    if len(lines) == 1:
        return ConfigError(lines[0], problems)
    return ConfigError(f"{len(lines)} configuration problems: " + "; ".join(lines), problems)


def _read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        # The decoder reports a position, never the offending text.
        raise ConfigError(f"config file {path}: not valid TOML ({exc})") from None


def _collect_file(document: dict, raw: _Raw) -> None:
    sections = _section_types()
    top = _settings(Config)
    for key, value in document.items():
        if key in sections:
            if not isinstance(value, dict):
                raw.problem(key, "expected a table ([" + key + "])")
                continue
            _collect_file_section(key, value, sections[key], raw)
        elif key in top:
            raw.values[("", key)] = _Source(value, key, False)
        else:
            raw.problem(key, "unknown key" + _suggest(key, [*top, *sections]))


def _collect_file_section(section: str, table: dict, cls: type, raw: _Raw) -> None:
    known = _settings(cls)
    for key, value in table.items():
        name = f"{section}.{key}"
        if section == "auth" and key == "api_keys":
            if isinstance(value, list):
                raw.file_keys = value
            else:
                raw.problem(name, "expected an array of tables ([[auth.api_keys]])")
        elif key in known:
            raw.values[(section, key)] = _Source(value, name, False)
        else:
            extra = ["api_keys"] if section == "auth" else []
            raw.problem(name, "unknown key" + _suggest(key, [*known, *extra]))


def _env_names() -> dict[str, tuple[str, str]]:
    names = {ENV_PREFIX + key.upper(): ("", key) for key in _settings(Config)}
    for section, cls in _section_types().items():
        for key in _settings(cls):
            names[f"{ENV_PREFIX}{section.upper()}_{key.upper()}"] = (section, key)
    return names


def _collect_env(environ: Mapping[str, str], raw: _Raw) -> None:
    names = _env_names()
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        if name.startswith(_IGNORED_ENV_PREFIX):
            continue
        if name == _API_KEYS_ENV:
            raw.env_keys = environ[name]
        elif name in names:
            raw.values[names[name]] = _Source(environ[name], name, True)
        else:
            known = [*names, _API_KEYS_ENV]
            raw.problem(name, "unknown setting" + _suggest(name, known, prefix=ENV_PREFIX))


def _suggest(name: str, known: Iterable[str], prefix: str = "") -> str:
    # Compare without the shared prefix, or every variable looks alike.
    tails = [k.removeprefix(prefix) for k in known]
    close = difflib.get_close_matches(name.removeprefix(prefix), tails, n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def _build(raw: _Raw) -> Config:
    sections: dict[str, Any] = {}
    for section, cls in _section_types().items():
        values = _parse_values(section, cls, raw)
        if section == "auth":
            values["api_keys"] = _api_keys(raw)
        sections[section] = cls(**values)
    config = Config(**_parse_values("", Config, raw), **sections)
    _check_cross_field(config, raw)
    return config


def _parse_values(section: str, cls: type, raw: _Raw) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, kind in _settings(cls).items():
        source = raw.values.get((section, key))
        if source is None:
            continue
        try:
            parse = kind.from_env if source.from_env else kind.from_toml
            values[key] = parse(source.value)
        except _Invalid as exc:
            shown = f", got {_shown(source.value)}" if kind.echo else ""
            raw.problem(source.name, f"expected {exc}{shown}")
            raw.invalid.add((section, key))
    return values


def _check_cross_field(config: Config, raw: _Raw) -> None:
    if config.http.trigger_rate > 0 and config.http.trigger_burst < 1:
        raw.problem("http.trigger_burst", "must be at least 1 while http.trigger_rate is not 0")
    if config.auth.failure_rate > 0 and config.auth.failure_burst < 1:
        raw.problem("auth.failure_burst", "must be at least 1 while auth.failure_rate is not 0")
    _check_client_pool(config, raw)


def _check_client_pool(config: Config, raw: _Raw) -> None:
    """An explicit ``client_pool_size`` covers every execution slot and trigger actor: with
    fewer clients, slots wait for a client and buy nothing (issue 7: 40 slots, 8 clients ran
    5 to 12 at a time)."""
    involved = {("", "client_pool_size"), ("", "execution_slots"), ("", "trigger_actors")}
    if config.client_pool_size == 0 or involved & raw.invalid:
        return  # the default, or a value already reported: a second message would mislead
    minimum = config.execution_slots + config.trigger_actors
    if config.client_pool_size < minimum:
        raw.problem(
            raw.values[("", "client_pool_size")].name,
            f"must be 0 (one client per execution slot and trigger actor) or at least "
            f"{minimum} (execution_slots {config.execution_slots} + trigger_actors "
            f"{config.trigger_actors}), got {config.client_pool_size}",
        )


def _api_keys(raw: _Raw) -> tuple[ApiKey, ...]:
    keys = [_file_key(index, entry, raw) for index, entry in enumerate(raw.file_keys)]
    if raw.env_keys is not None:
        keys.extend(_env_keys(raw.env_keys, raw))
    found = [key for key in keys if key is not None]
    _check_unique(found, raw)
    return tuple(found)


_KEY_ENTRY_FIELDS = ("name", "role", "key", "key_sha256")


def _file_key(index: int, entry: Any, raw: _Raw) -> ApiKey | None:
    path = f"auth.api_keys[{index}]"
    if not isinstance(entry, dict):
        raw.problem(path, "expected a table with name, role and key or key_sha256")
        return None
    before = len(raw.problems)
    for key in entry:
        if key not in _KEY_ENTRY_FIELDS:
            raw.problem(f"{path}.{key}", "unknown key" + _suggest(key, _KEY_ENTRY_FIELDS))
    name, role = entry.get("name"), entry.get("role")
    if not isinstance(name, str) or not name.strip():
        raw.problem(f"{path}.name", "expected a non-empty string")
    if not isinstance(role, str) or role not in set(Role):
        got = f", got {_shown(role)}" if role is not None else ""
        raw.problem(f"{path}.role", f"expected one of {', '.join(Role)}{got}")
    digest = _file_key_digest(path, entry, raw)
    if len(raw.problems) > before or digest is None:
        return None
    return ApiKey(name.strip(), Role(role), digest)


def _file_key_digest(path: str, entry: dict, raw: _Raw) -> str | None:
    plain, hashed = entry.get("key"), entry.get("key_sha256")
    if (plain is None) == (hashed is None):
        raw.problem(path, "expected exactly one of key or key_sha256")
        return None
    if plain is not None:
        if not isinstance(plain, str) or not plain:
            raw.problem(f"{path}.key", "expected a non-empty string")
            return None
        if len(plain) < MIN_API_KEY_LENGTH:
            raw.problem(f"{path}.key", _short_key(entry.get("name")))
            return None
        return _sha256_hex(plain)
    if not isinstance(hashed, str) or not _SHA256_HEX.fullmatch(hashed):
        raw.problem(f"{path}.key_sha256", "expected 64 hexadecimal characters (a SHA-256)")
        return None
    return hashed.lower()


def _env_keys(text: str, raw: _Raw) -> list[ApiKey]:
    """``name:role:key,name:role:key`` (the key may contain ':' but not ',')."""
    keys: list[ApiKey] = []
    entries = [entry.strip() for entry in text.split(",")]
    for number, entry in enumerate(entries, start=1):
        if not entry:
            continue
        parts = entry.split(":", 2)
        # Only the entry number is named: any part of the entry may be the secret.
        where = f"{_API_KEYS_ENV} entry {number}"
        if len(parts) != 3 or not parts[0].strip() or not parts[2]:
            raw.problem(where, "expected name:role:key")
        elif parts[1].strip() not in set(Role):
            raw.problem(where, f"expected a role among {', '.join(Role)}")
        elif len(parts[2]) < MIN_API_KEY_LENGTH:
            raw.problem(where, _short_key(parts[0].strip()))
        else:
            keys.append(ApiKey.from_plain(parts[0].strip(), Role(parts[1].strip()), parts[2]))
    return keys


def _short_key(name: Any) -> str:
    named = f"key {_shown(name)}" if isinstance(name, str) and name.strip() else "the key"
    return f"{named} is shorter than {MIN_API_KEY_LENGTH} characters; use a long random key"


def _check_unique(keys: list[ApiKey], raw: _Raw) -> None:
    names: set[str] = set()
    owners: dict[str, str] = {}
    for key in keys:
        if key.name in names:
            raw.problem("auth.api_keys", f"duplicate key name {_shown(key.name)}")
        names.add(key.name)
        if key.key_sha256 in owners:
            raw.problem(
                "auth.api_keys",
                f"keys {_shown(owners[key.key_sha256])} and {_shown(key.name)} are the same key",
            )
        owners.setdefault(key.key_sha256, key.name)


# --- showing -----------------------------------------------------------------------------------


def _mask(value: str) -> str:
    return MASK if value else ""


def _mask_database_url(url: str) -> str:
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def _plain(value: Any) -> Any:
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, StrEnum):
        return value.value
    return value


def masked(config: Config) -> dict:
    """The effective configuration as JSON-able data, every secret replaced by ``***``."""
    result: dict[str, Any] = {}
    for f in fields(Config):
        value = getattr(config, f.name)
        if f.metadata.get("section"):
            result[f.name] = _masked_section(value)
        elif f.name == "database_url":
            result[f.name] = _mask_database_url(value)
        else:
            result[f.name] = _plain(value)
    return result


def _masked_section(section: Any) -> dict:
    shown: dict[str, Any] = {}
    for f in fields(section):
        value = getattr(section, f.name)
        if f.metadata.get("api_keys"):
            shown[f.name] = [
                {"name": k.name, "role": k.role.value, "key_sha256": MASK} for k in value
            ]
        elif f.metadata["kind"].secret:
            shown[f.name] = _mask(value)
        else:
            shown[f.name] = _plain(value)
    return shown
