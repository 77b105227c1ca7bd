"""Every trigger that ends ``failed`` logs exactly one WARNING "trigger failed" naming the
trigger, the issue, the source and the reason, wherever it failed (the runbook's
TriggerFailed section reads the logs by it)."""

from __future__ import annotations

import logging

import pytest

from tests.fakes import RecordingAction
from tests.harness import rule
from ticket_dispatcher.domain.execution import TriggerStatus


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.INFO, logger="ticket_dispatcher")
    return caplog


def failed_lines(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == "trigger failed"]


def assert_one_warning_for(caplog, trigger) -> logging.LogRecord:
    assert trigger.status is TriggerStatus.FAILED
    [line] = failed_lines(caplog)
    assert line.levelno == logging.WARNING
    assert (line.trigger_id, line.issue_key, line.source, line.reason) == (
        trigger.id, trigger.issue_key, trigger.source, trigger.failure_reason)
    return line


def test_an_issue_jira_does_not_know_logs_one_warning(make_harness, logs):
    harness = make_harness()

    trigger = harness.post_trigger("TCID-404")

    line = assert_one_warning_for(logs, trigger)
    assert line.reason.startswith("issue load failed: ") and "TCID-404" in line.reason


def test_a_policy_conflict_in_the_pool_logs_one_warning_and_no_processed_line(make_harness,
                                                                              logs):
    harness = make_harness(RecordingAction("test_wait", park_for=60))
    policy = harness.policy(rule("test_wait"))
    harness.post_trigger()  # its live execution holds the lock while it waits
    logs.clear()

    trigger = harness.post_trigger(policy_id=policy.id)

    line = assert_one_warning_for(logs, trigger)
    assert line.reason == f"policy {policy.id} already has a live execution for TCID-1"
    assert not [r for r in logs.records if r.getMessage() == "trigger processed"]


def test_an_explicit_policy_that_does_not_exist_logs_one_warning(make_harness, logs):
    harness = make_harness()

    trigger = harness.post_trigger(policy_id=999)

    line = assert_one_warning_for(logs, trigger)
    assert line.reason.startswith("policy load failed: ")


def test_an_internal_error_logs_the_trace_and_one_warning(make_harness, logs, monkeypatch):
    harness = make_harness()

    def broken():
        raise RuntimeError("a bug")

    monkeypatch.setattr(harness.store.policies, "active_and_shadows", broken)
    trigger = harness.post_trigger()

    line = assert_one_warning_for(logs, trigger)
    assert line.reason == "internal error while processing the trigger"
    assert [r.levelname for r in logs.records
            if r.getMessage() == "trigger processing failed"] == ["ERROR"]


def test_a_completed_trigger_logs_no_failure(make_harness, logs):
    harness = make_harness(RecordingAction())
    harness.policy(rule("test_noop"))

    trigger = harness.post_trigger()

    assert trigger.status is TriggerStatus.COMPLETED
    assert failed_lines(logs) == []
