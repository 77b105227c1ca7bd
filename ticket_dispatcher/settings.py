"""The configuration machinery: how a dataclass of settings is read from a TOML file and from
the environment. It knows no key of this service; ``config.py`` declares those (the sections,
the keys, their defaults and bounds) with the helpers below and calls ``load``.

A configuration is a frozen dataclass whose fields are made with three helpers:

- ``setting(default, kind)``: one value; the ``Kind`` says how it is read from TOML (typed) and
  from a variable (text), what an error says it expected, and how ``config show`` prints it.
- ``section(Cls)``: a ``[table]`` of settings, one level deep.
- ``compound(default, read, show)``: a value its own parser builds from the file and the
  variable together, where neither overrides the other (``[[auth.api_keys]]``).

``load`` reads a TOML document and an environment into the configuration: defaults < file <
environment, variables named ``<PREFIX><SECTION>_<KEY>`` (``<PREFIX><KEY>`` at the top level).
Every problem is collected, located by the key (``http.port``) or the variable
(``TICKET_DISPATCHER_HTTP_PORT``) it came from, and raised as one ``ConfigError``. A value is
echoed in an error only when its kind allows it: secrets and URLs (which may carry credentials)
never are. ``masked`` is the configuration as JSON-able data with every secret replaced.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, dataclass, field, fields
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from ticket_dispatcher.errors import ConfigError, Problem
from ticket_dispatcher.timeutil import parse_duration

MASK = "***"
_SETTING = "setting"  # field metadata: the field's Kind or Compound
_SECTION = "section"  # field metadata: the field is a [table] of settings

Root = TypeVar("Root")


class Invalid(ValueError):
    """A value that does not fit its key; the text is safe to show (no secret in it)."""


# --- showing values ----------------------------------------------------------------------------


def format_duration(value: timedelta) -> str:
    """The shortest of ``"1h"``, ``"5m"``, ``"5s"``, ``"500ms"`` that is exact."""
    millis = round(value.total_seconds() * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis and millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


def plain(value: Any) -> Any:
    """A value as ``config show`` prints it: durations as text, enums as their value."""
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, StrEnum):
        return value.value
    return value


def mask(value: str) -> str:
    """``***`` for a configured secret; empty stays empty (nothing is configured)."""
    return MASK if value else ""


def mask_url_password(url: str) -> str:
    """The URL with its passwords replaced by ``***``: the one before the host, and a
    ``password`` query parameter (a PostgreSQL URL passes its query to libpq as connection
    parameters, so ``?password=`` is one too)."""
    parts = urlsplit(url)
    if not parts.password and not url_query_passwords(url):
        return url  # as written: urlunsplit would drop the empty host of sqlite:///
    if parts.password:
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}")
    return urlunsplit(parts._replace(query=_QUERY_PASSWORD.sub(rf"\g<1>{MASK}", parts.query)))


# ``password=VALUE`` in a query string, any case, up to the next separator.
_QUERY_PASSWORD = re.compile(r"((?:^|[&;])\s*password\s*=)[^&;]*", re.IGNORECASE)


def url_query_passwords(url: str) -> list[str]:
    """The values of the ``password`` parameters of ``url``'s query, as written and decoded."""
    values: list[str] = []
    for match in _QUERY_PASSWORD.finditer(urlsplit(url).query):
        written = match.group(0)[len(match.group(1)):]
        values += [written, unquote_plus(written)]
    return [value for value in values if value]


def shown(value: Any) -> str:
    """A value quoted for an error message."""
    return json.dumps(value, default=str, ensure_ascii=False)


def suggest(name: str, known: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean X?)`` for the known name closest to ``name``, or nothing."""
    # Compare without the shared prefix, or every variable looks alike.
    tails = [k.removeprefix(prefix) for k in known]
    close = difflib.get_close_matches(name.removeprefix(prefix), tails, n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


# --- value kinds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """How one key is read from TOML (typed) and from a variable (text), and shown."""

    expected: str
    from_toml: Callable[[Any], Any]
    from_env: Callable[[str], Any]
    echo: bool = True  # an error shows the refused value ("got ...")
    show: Callable[[Any], Any] = plain


def integer(low: int, high: int | None = None) -> Kind:
    expected = (
        f"an integer between {low} and {high}" if high is not None else f"an integer >= {low}"
    )

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(expected)
        if value < low or (high is not None and value > high):
            raise Invalid(expected)
        return value

    def from_env(text: str) -> int:
        try:
            return check(int(text.strip()))
        except ValueError:
            raise Invalid(expected) from None

    return Kind(expected, check, from_env)


def number(low: float) -> Kind:
    expected = f"a number >= {low:g}"

    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Invalid(expected)
        if value != value or value in (float("inf"), float("-inf")) or value < low:
            raise Invalid(expected)
        return float(value)

    def from_env(text: str) -> float:
        try:
            return check(float(text.strip()))
        except ValueError:
            raise Invalid(expected) from None

    return Kind(expected, check, from_env)


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def boolean() -> Kind:
    expected = "true or false"

    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise Invalid(expected)
        return value

    def from_env(text: str) -> bool:
        word = text.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise Invalid("true or false (also 1/0, yes/no)")

    return Kind(expected, check, from_env)


# The longest duration any setting takes: a timeout, a wait or a retention beyond ten years is
# a typo, and past about 290 years a wait no longer fits the clock functions it is given to.
MAX_DURATION = timedelta(days=3650)


def duration(low: timedelta | None = None, high: timedelta | None = None) -> Kind:
    """A positive duration string (``"500ms"``, ``"5s"``, ``"5m"``), optionally between
    ``low`` and ``high`` (both given, or neither)."""
    if low is None or high is None:
        expected = (f'a positive duration like "500ms", "5s" or "5m", at most '
                    f'"{format_duration(MAX_DURATION)}"')
    else:
        expected = f'a duration between "{format_duration(low)}" and "{format_duration(high)}"'

    def check(value: Any) -> timedelta:
        if _bare_zero(value):  # zero needs no unit: where a range starts at 0, it is allowed
            parsed = timedelta(0)
        elif not isinstance(value, str):
            raise Invalid(expected)
        else:
            try:
                parsed = parse_duration(value)
            except ValueError:
                raise Invalid(expected) from None
        if low is not None and high is not None:
            if not low <= parsed <= high:
                raise Invalid(expected)
        elif not timedelta(0) < parsed <= MAX_DURATION:
            raise Invalid(expected)
        return parsed

    return Kind(expected, check, check)


def _bare_zero(value: Any) -> bool:
    """``0`` as a TOML integer or ``"0"`` as text (an environment variable's form)."""
    if isinstance(value, str):
        return value.strip() == "0"
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def text(*, check: Callable[[str], bool] | None = None, expected: str = "a string",
         secret: bool = False) -> Kind:
    """A string, accepted when ``check`` says so; a ``secret`` is never echoed nor shown."""

    def parse(value: Any) -> str:
        if not isinstance(value, str) or (check is not None and not check(value)):
            raise Invalid(expected)
        return value

    if secret:
        return Kind(expected, parse, parse, echo=False, show=mask)
    return Kind(expected, parse, parse)


def secret_list() -> Kind:
    """A list of secrets (a TOML array of strings; in a variable, separated by commas); none
    is ever echoed, each is shown masked."""
    expected = "a list of non-empty strings (in the environment, separated by commas)"

    def check(value: Any) -> tuple[str, ...]:
        if not isinstance(value, list | tuple) or not all(
                isinstance(item, str) and item.strip() for item in value):
            raise Invalid(expected)
        return tuple(value)

    def from_env(text: str) -> tuple[str, ...]:
        return check([part.strip() for part in text.split(",") if part.strip()])

    return Kind(expected, check, from_env, echo=False,
                show=lambda value: [mask(item) for item in value])


# --- fields ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One raw value and where it came from, for error messages."""

    value: Any
    name: str  # "http.port" or "TICKET_DISPATCHER_HTTP_PORT"
    from_env: bool


@dataclass(frozen=True)
class Compound:
    """A setting built by ``read(file_source, env_source, problems)`` from both sources."""

    read: Callable[[Source | None, Source | None, SettingProblems], Any]
    show: Callable[[Any], Any]


def setting(default: Any, kind: Kind) -> Any:
    return field(default=default, metadata={_SETTING: kind})


def section(cls: type) -> Any:
    """A field holding a section: the dataclass ``cls``, built with its defaults."""
    return field(default_factory=cls, metadata={_SECTION: True})


def _section_class(f: Field[Any]) -> type:
    """The dataclass of a ``section`` field, which is the field's default factory."""
    factory = f.default_factory
    if not isinstance(factory, type):
        raise TypeError(f"{f.name} is marked a section but its default factory is no class")
    return factory


def compound(default: Any, read: Callable[[Source | None, Source | None, SettingProblems], Any],
             show: Callable[[Any], Any]) -> Any:
    return field(default=default, metadata={_SETTING: Compound(read, show)})


@dataclass(frozen=True)
class _Key:
    path: str  # "http.port", or "database_url" at the top level
    env: str  # "TICKET_DISPATCHER_HTTP_PORT"
    spec: Kind | Compound


def _sections(root: type) -> dict[str, type]:
    return {f.name: _section_class(f) for f in fields(root) if f.metadata.get(_SECTION)}


def _keys(root: type, prefix: str) -> dict[str, _Key]:
    """Every setting of ``root`` by dotted path, in field order."""
    keys: dict[str, _Key] = {}
    for f in fields(root):
        if f.metadata.get(_SECTION):
            for inner in fields(_section_class(f)):
                path = f"{f.name}.{inner.name}"
                keys[path] = _Key(path, f"{prefix}{f.name}_{inner.name}".upper(),
                                  inner.metadata[_SETTING])
        else:
            keys[f.name] = _Key(f.name, f"{prefix}{f.name}".upper(), f.metadata[_SETTING])
    return keys


# --- loading -----------------------------------------------------------------------------------


class SettingProblems:
    """What is wrong so far, and where each effective value came from (for cross-key checks)."""

    def __init__(self) -> None:
        self.items: list[Problem] = []
        self.sources: dict[str, Source] = {}  # by dotted path: the value in effect
        self._refused: set[str] = set()

    def add(self, path: str, message: str) -> None:
        self.items.append(Problem(path, message))

    def refuse(self, path: str, message: str) -> None:
        """The value of setting ``path`` is bad: reported under the name it came from."""
        self.add(self.source_name(path), message)
        self._refused.add(path)

    def source_name(self, path: str) -> str:
        """The key or variable the value of ``path`` came from (``path`` for a default)."""
        source = self.sources.get(path)
        return source.name if source is not None else path

    def refused(self, *paths: str) -> bool:
        """Whether the value of any of ``paths`` was refused (and is already reported)."""
        return any(path in self._refused for path in paths)

    def error(self) -> ConfigError:
        lines = [f"{p.path}: {p.message}" for p in self.items]
        if len(lines) == 1:
            return ConfigError(lines[0], self.items)
        return ConfigError(f"{len(lines)} configuration problems: " + "; ".join(lines),
                           self.items)


def read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        # The decoder reports a position, never the offending text.
        raise ConfigError(f"config file {path}: not valid TOML ({exc})") from None


def load(root: type[Root], document: Mapping[str, Any], environ: Mapping[str, str], *,
         prefix: str, ignored: Callable[[str], bool] = lambda name: False,
         check: Callable[[Root, SettingProblems], None] | None = None) -> Root:
    """``root`` read from ``document`` (a parsed TOML file) and the ``prefix`` variables of
    ``environ`` (except ``ignored`` ones), then ``check``-ed across keys; ``ConfigError``
    naming every problem."""
    keys, problems = _keys(root, prefix), SettingProblems()
    file = _collect_file(root, document, keys, problems)
    env = _collect_env(environ, keys, prefix, ignored, problems)
    problems.sources = {**file, **env}  # the environment wins over the file
    values = _parse(keys, file, env, problems)
    config = _build(root, "", values)
    if check is not None:
        check(config, problems)
    if problems.items:
        raise problems.error()
    return config


def _collect_file(root: type, document: Mapping[str, Any], keys: dict[str, _Key],
                  problems: SettingProblems) -> dict[str, Source]:
    sections = _sections(root)
    found: dict[str, Source] = {}
    for name, value in document.items():
        if name in sections:
            if isinstance(value, dict):
                found.update(_collect_table(name, value, keys, problems))
            else:
                problems.add(name, f"expected a table ([{name}])")
        elif name in keys:
            found[name] = Source(value, name, False)
        else:
            top = [path for path in keys if "." not in path]
            problems.add(name, "unknown key" + suggest(name, [*top, *sections]))
    return found


def _collect_table(section_name: str, table: dict, keys: dict[str, _Key],
                   problems: SettingProblems) -> dict[str, Source]:
    found: dict[str, Source] = {}
    for name, value in table.items():
        path = f"{section_name}.{name}"
        if path in keys:
            found[path] = Source(value, path, False)
        else:
            known = [p.split(".", 1)[1] for p in keys if p.startswith(f"{section_name}.")]
            problems.add(path, "unknown key" + suggest(name, known))
    return found


def _collect_env(environ: Mapping[str, str], keys: dict[str, _Key], prefix: str,
                 ignored: Callable[[str], bool], problems: SettingProblems) -> dict[str, Source]:
    by_name = {key.env: key.path for key in keys.values()}
    found: dict[str, Source] = {}
    for name in sorted(environ):
        if not name.startswith(prefix) or ignored(name):
            continue
        if name in by_name:
            found[by_name[name]] = Source(environ[name], name, True)
        else:
            problems.add(name, "unknown setting" + suggest(name, by_name, prefix=prefix))
    return found


def _parse(keys: dict[str, _Key], file: dict[str, Source], env: dict[str, Source],
           problems: SettingProblems) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for path, key in keys.items():
        if isinstance(key.spec, Compound):
            values[path] = key.spec.read(file.get(path), env.get(path), problems)
            continue
        source = problems.sources.get(path)
        if source is None:
            continue
        try:
            parse = key.spec.from_env if source.from_env else key.spec.from_toml
            values[path] = parse(source.value)
        except Invalid as exc:
            got = f", got {shown(source.value)}" if key.spec.echo else ""
            problems.refuse(path, f"expected {exc}{got}")
    return values


def _build(cls: type, section_name: str, values: dict[str, Any]) -> Any:
    """An instance of ``cls`` with every parsed value; defaults fill the rest."""
    arguments: dict[str, Any] = {}
    for f in fields(cls):
        if f.metadata.get(_SECTION):
            arguments[f.name] = _build(_section_class(f), f.name, values)
            continue
        path = f"{section_name}.{f.name}" if section_name else f.name
        if path in values:
            arguments[f.name] = values[path]
    return cls(**arguments)


# --- showing -----------------------------------------------------------------------------------


def masked(config: Any) -> dict:
    """The configuration as JSON-able data, each value as its kind shows it (secrets ``***``)."""
    result: dict[str, Any] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if f.metadata.get(_SECTION):
            result[f.name] = masked(value)
        else:
            result[f.name] = f.metadata[_SETTING].show(value)
    return result
