"""Structured JSON logs with redaction (docs/operations.md, "Logs")."""

from __future__ import annotations

import io
import json
import logging
import random
from datetime import UTC, datetime

import pytest

from ticket_dispatcher.logging import _PATTERNS, CONTEXT_KEYS, Redactor, configure_logging
from ticket_dispatcher.timeutil import parse_rfc3339

SECRET = "lark-app-secret-7f3a"


@pytest.fixture(autouse=True)
def restore_root_logger():
    """configure_logging changes the root logger; put it back for the other tests."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def log_lines():
    """Configure logging into a buffer; yield a function returning the parsed lines."""
    stream = io.StringIO()
    configure_logging("DEBUG", secrets=[SECRET], stream=stream)
    return lambda: [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_record_is_one_json_line_with_ts_level_logger_msg(log_lines):
    logging.getLogger("ticket_dispatcher.test").info("trigger %s accepted", 42)
    logging.getLogger("ticket_dispatcher.test").warning("second\nline")

    first, second = log_lines()
    assert first["level"] == "INFO"
    assert first["logger"] == "ticket_dispatcher.test"
    assert first["msg"] == "trigger 42 accepted"
    assert first["ts"].endswith("Z")
    assert abs(parse_rfc3339(first["ts"]) - datetime.now(UTC)).total_seconds() < 60
    assert second["msg"] == "second\nline"  # the newline is escaped, still one line


def test_context_keys_from_extra_are_kept(log_lines):
    deadline = datetime(2026, 11, 30, 1, 5, tzinfo=UTC)
    context = {
        "issue_key": "TCID-12345", "trigger_id": 42, "execution_id": 7, "policy_id": 3,
        "source": "jira_assignment_assignee", "role": "assignee",
        "target_account_id": "5b10ac8d82e05b22cc7d4ef5", "attempt": 2,
        "next_try": "2026-11-30T01:01:00.000Z", "deadline": deadline, "reason": "ack timeout",
        "escalation_from": "acc-1", "escalation_to": "acc-2",
    }

    logging.getLogger("t").info("page sent", extra=context)

    (line,) = log_lines()
    assert [key for key in line if key in CONTEXT_KEYS] == list(CONTEXT_KEYS)
    assert line["deadline"] == "2026-11-30T01:05:00.000Z"
    assert {key: line[key] for key in context if key != "deadline"} == {
        key: value for key, value in context.items() if key != "deadline"
    }


def test_other_extra_keys_are_kept_too(log_lines):
    logging.getLogger("t").info("call", extra={"client": "jira", "latency_ms": 12.5})

    (line,) = log_lines()
    assert (line["client"], line["latency_ms"]) == ("jira", 12.5)


def test_level_filters_records():
    stream = io.StringIO()
    configure_logging("warning", stream=stream)

    logging.getLogger("t").info("hidden")
    logging.getLogger("t").error("shown")

    assert [json.loads(line)["msg"] for line in stream.getvalue().splitlines()] == ["shown"]


def test_configuring_again_replaces_the_handler():
    first = configure_logging(stream=io.StringIO())
    second = configure_logging(stream=io.StringIO())

    assert first not in logging.getLogger().handlers
    assert second in logging.getLogger().handlers


def test_configured_secret_is_redacted_from_msg_extra_and_exception(log_lines):
    try:
        raise RuntimeError(f"token refresh failed for {SECRET}")
    except RuntimeError:
        logging.getLogger("t").exception(
            "lark said %s", SECRET, extra={"reason": f"secret={SECRET}", "body": {"s": SECRET}}
        )

    (line,) = log_lines()
    assert SECRET not in json.dumps(line)
    assert line["msg"] == "lark said ***"
    assert line["body"] == {"s": "***"}
    assert "RuntimeError: token refresh failed for ***" in line["exc"]


PHONES = ["+8613812345678", "+86 138 1234 5678", "+1-415-555-0100", "+44 20 7946 0958",
          "13812345678", "138-1234-5678", "138 1234 5678", "8613812345678", "(415) 555-0100",
          "415-555-0100", "415.555.0100"]


@pytest.mark.parametrize("phone", PHONES)
def test_phone_numbers_are_redacted(log_lines, phone):
    try:
        raise ValueError(f"no such number {phone}")
    except ValueError:
        logging.getLogger("t").exception(f"paging {phone}",
                                         extra={"reason": f"call to {phone} failed"})

    (line,) = log_lines()
    assert phone not in json.dumps(line)
    assert line["msg"] == "paging ***"
    assert line["reason"] == "call to *** failed"
    assert "no such number ***" in line["exc"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer t-abc.def", "Authorization: ***"),
        ("Authorization: Basic Ym90OnRva2Vu", "Authorization: ***"),
        ("headers={'Authorization': 'Bearer t-abc'}", "headers={'Authorization': '***'}"),
        ("sent Bearer t-abcdef to lark", "sent Bearer *** to lark"),
        ("jira said: Basic Ym90QGV4YW1wbGUuY29tOnRva2Vu [x]", "jira said: Basic *** [x]"),
        ("X-API-KEY: op-secret-key", "X-API-KEY: ***"),
        ('{"tenant_access_token":"t-g104","expire":7200}',
         '{"tenant_access_token":"***","expire":7200}'),
        ("app_secret=abc&app_id=cli_1", "app_secret=***&app_id=cli_1"),
        ("postgresql://dispatcher:pw@db:5432/x", "postgresql://dispatcher:***@db:5432/x"),
    ],
)
def test_credentials_are_redacted_by_shape(text, expected):
    assert Redactor().text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "created 2021-01-17T12:34:00.000+0000 at +08:00",
        "execution 7 of trigger 42 on TCID-12345 attempt 2",
        "token bucket refilled: 20 tokens",
        "open_id ou_7d8a6e6df7621556ce0d21922b676706ccs",
        "version 2026-11-30, took 1234567 ms from 10.0.0.1, v1.2.3",
        "basic round robin over 3 engineers",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert Redactor().text(text) == text


def _every_pattern(text: str) -> str:
    """The full redaction pass, without the search that lets text with nothing to mask skip it."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _generated_texts(count: int) -> list[str]:
    """Text made of the pieces the patterns look for: digits with every kind of separator
    between them, the credential keywords, URLs, brackets and quotes."""
    pieces = ["1", "3", "8", "86", "415", "555", "0100", "+", "-", " ", ".", "(", ")", ") ",
              ":", "=", "'", '"', "@", "://", "/", "x", "Authorization", "Bearer ", "basic ",
              "Ym90OnRva2VuCg==", "token", "app_secret", "Passwd", "API_KEY", "apikey",
              "X-API-KEY", "user:pw@", "TCID-12345", "é", "\n"]
    chooser = random.Random(20261202)
    return ["".join(chooser.choice(pieces) for _ in range(chooser.randint(1, 24)))
            for _ in range(count)]


def test_text_the_quick_search_passes_over_would_be_left_alone_by_every_pattern():
    redactor = Redactor()
    texts = _generated_texts(20_000) + [f"call {phone} now" for phone in PHONES]
    changed = [text for text in texts if _every_pattern(text) != text]

    assert len(changed) > 2_000  # the corpus does reach the patterns
    for text in texts:
        assert redactor.text(text) == _every_pattern(text), text
