"""Structured logs: one JSON object per line on stderr, secrets redacted (docs/operations.md,
"Logs").

Each line carries ``ts`` (RFC 3339 UTC), ``level``, ``logger`` and ``msg``, then the keys of
``CONTEXT_KEYS`` given through ``extra=``
(``logger.info("paged", extra={"issue_key": ..., "attempt": 2})``), then any other ``extra``
keys, then ``exc`` for an exception. A redaction pass runs over the message, every extra value
and the exception text: configured secrets, phone numbers, credentials in
``Authorization``/``Bearer``/``X-API-KEY`` form, ``token=``/``secret=``/``password=`` pairs and
passwords in URLs all become ``***``: tokens, phone numbers and credentials must never reach the
logs, whatever a caller or a third-party library writes.

Inside this module ``import logging`` is the standard library (absolute imports); the name of
this module only matters as ``ticket_dispatcher.logging``.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import IO, Any

from ticket_dispatcher.timeutil import format_time

MASK = "***"

# The context every dispatch log line may carry, in this order.
CONTEXT_KEYS = (
    "issue_key",
    "trigger_id",
    "execution_id",
    "policy_id",
    "source",
    "role",
    "target_account_id",
    "attempt",
    "next_try",
    "deadline",
    "reason",
    "escalation_from",
    "escalation_to",
)

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__
) | {"message", "asctime", "taskName"}

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Header-like pairs, also inside reprs of dicts: "Authorization: Basic x", 'X-API-KEY': 'x'.
    (
        re.compile(
            r"(?i)\b(authorization|proxy-authorization|x-api-key)([\"']?\s*[:=]\s*[\"']?)"
            r"(?:(?:basic|bearer|token)\s+)?[^\s\"',;}]+"
        ),
        rf"\1\2{MASK}",
    ),
    (re.compile(r"(?i)\b(bearer)\s+[^\s\"',;}]+"), rf"\1 {MASK}"),
    # A Basic credential on its own (an error body echoing the header's value).
    (re.compile(r"(?i)\b(basic)\s+[A-Za-z0-9+/]{12,}={0,2}"), rf"\1 {MASK}"),
    # key=value / "key": "value" pairs whose key names a credential (Lark tenant tokens, ...).
    (
        re.compile(
            r"(?i)\b(\w*(?:token|secret|password|passwd|api_key|apikey))"
            r"([\"']?\s*[:=]\s*[\"']?)[^\s\"',;&}]+"
        ),
        rf"\1\2{MASK}",
    ),
    # Credentials inside URLs: scheme://user:password@host.
    (re.compile(r"(://[^:/@\s]+:)[^@\s/]+@"), rf"\1{MASK}@"),
    # E.164-ish numbers: '+' and 7 to 15 digits, optionally grouped by spaces or dashes.
    (re.compile(r"\+\d(?:[ -]?\d){6,14}(?!\d)"), MASK),
    # Mainland China mobile numbers without a '+': 11 digits 1[3-9]..., also grouped 3-4-4 by
    # spaces or dashes, and with the country code 86 in front.
    (re.compile(r"(?<![\d.])(?:86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2}(?![\d.])"), MASK),
    # North American numbers: (202) 555-0143, 202-555-0143, 202.555.0143.
    (re.compile(r"(?<![\d.])(?:\(\d{3}\)\s?|\d{3}[-.])\d{3}[-.]\d{4}(?![\d.])"), MASK),
)


# Something every match of ``_PATTERNS`` contains: one of their keywords, a URL's "://", or
# seven digits with at most two other characters between each (the widest gap of the phone
# shapes: the ") " of "(202) 555-0143"). Text without any is left as it is by one search instead
# of a pass of every pattern; most log text (keys, ids, names, short reasons) has none.
_MAYBE = re.compile(r"(?i)authorization|x-api-key|bearer|basic|token|secret|passw|api_?key|://"
                    r"|\d(?:\D{0,2}\d){6}")


class Redactor:
    """Replaces configured secrets and anything that looks like a credential or phone number."""

    def __init__(self, secrets: Iterable[str] = ()):
        # Longest first, so a secret that contains another one is masked whole.
        values = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._secrets = re.compile("|".join(map(re.escape, values))) if values else None

    def text(self, text: str) -> str:
        if self._secrets is not None:
            text = self._secrets.sub(MASK, text)
        if _MAYBE.search(text) is None:
            return text
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def value(self, value: Any) -> Any:
        """A JSON-able, redacted copy of an ``extra`` value."""
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, datetime):
            return format_time(value) if value.tzinfo else value.isoformat()
        if isinstance(value, Mapping):
            return {str(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.value(v) for v in value]
        return self.text(str(value))


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (no newlines inside: they are escaped)."""

    def __init__(self, redactor: Redactor | None = None):
        super().__init__()
        self.redactor = redactor or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": format_time(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname,
            "logger": record.name,
            "msg": self.redactor.text(self._message(record)),
        }
        extras = {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRIBUTES}
        for key in CONTEXT_KEYS:
            if key in extras:
                entry[key] = self.redactor.value(extras.pop(key))
        for key in sorted(extras):
            if key not in entry and not key.startswith("_"):
                entry[key] = self.redactor.value(extras[key])
        if record.exc_info:
            entry["exc"] = self.redactor.text(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exc"] = self.redactor.text(record.exc_text)
        if record.stack_info:
            entry["stack"] = self.redactor.text(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False, default=str)

    @staticmethod
    def _message(record: logging.LogRecord) -> str:
        try:
            return record.getMessage()
        except (TypeError, ValueError):
            # A bad %-format must not lose the line (or raise inside an actor).
            return f"{record.msg} {record.args!r}"


class _JsonHandler(logging.StreamHandler):
    """Marks the handler ``configure_logging`` installed, so a second call replaces it."""


def configure_logging(
    level: str | int = "INFO", secrets: Iterable[str] = (), stream: IO[str] | None = None
) -> logging.Handler:
    """Send every log record as a JSON line to ``stream`` (default: ``sys.stderr`` at call time).

    Replaces the handler a previous call installed and returns the new one (tests remove it).
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _JsonHandler):
            root.removeHandler(handler)
    handler = _JsonHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter(Redactor(secrets)))
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # pykka logs, at INFO and with a traceback, every exception an ask hands back to its
    # caller (a lease lost, the database away); the caller logs what it means, once.
    logging.getLogger("pykka").setLevel(logging.WARNING)
    # waitress warns "Task queue depth is N" for every request that waits for a worker thread:
    # under a burst of triggers, thousands of lines formatted on its one I/O thread, which
    # slowed intake itself. A burst is expected; ``http.threads`` is the knob.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    return handler

