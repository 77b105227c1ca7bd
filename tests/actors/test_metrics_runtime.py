"""The workflow metrics on the real runtime and database: counted once per live execution when it
becomes terminal, from its persisted contexts; unchanged by a restart; never from dry-runs;
and the backlog gauges sampled by their job (first after 1 s, then every 60 s)."""

from __future__ import annotations

import pytest

from tests.actors.test_notification_card_runtime import ASSIGNEE, put
from tests.actors.test_notification_page_runtime import page_context
from tests.domain.test_notification_page import PENDING, POLL, TIMEOUT
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.domain.ports import PageOutcome, PageResult
from ticket_dispatcher.metrics import PREFIX, rotation_label

CARD, URGENT, PAGE = ("send_assignment_notification", "mark_assignment_message_urgent",
                      "page_assignment")


@pytest.fixture
def world(urgent_world):
    return urgent_world


def value(h, name: str, **labels) -> float:
    """A sample's value; 0 when the series was never written."""
    return h.metrics.registry.get_sample_value(PREFIX + name, labels) or 0.0


def action(h, action_type: str, result: str, attempt: str = "") -> float:
    return value(h, "assignment_action_total", action=action_type, result=result,
                 role="assignee", attempt=attempt)


def n12_samples(h) -> dict:
    """Every sample of the notification counters and histograms, for before/after compares."""
    families = ("assignment_notification_events", "assignment_action", "assignment_ack",
                "assignment_ack_wait_seconds", "assignment_workflow_duration_seconds")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in h.metrics.registry.collect()
            if family.name.removeprefix(PREFIX) in families
            for sample in family.samples if not sample.name.endswith("_created")}


def start_urgent(h) -> int:
    put(h, severity="S1", status=PENDING)
    return h.post_trigger(source=ASSIGNEE).execution_ids[0]


def test_an_ack_during_page_one_counts_each_action_once_and_a_restart_adds_nothing(world):
    execution_id = start_urgent(world)
    world.lark.readers[f"om_td-{execution_id}-0-0"] = ["ou_alice"]
    world.advance(POLL)
    assert world.execution(execution_id).status is ExecutionStatus.SUCCEEDED

    assert action(world, CARD, "succeeded") == 1
    assert action(world, URGENT, "succeeded") == 1
    assert action(world, PAGE, "succeeded", "1") == 1
    assert action(world, PAGE, "skipped", "2") == action(world, PAGE, "skipped", "3") == 1
    assert value(world, "assignment_ack_total", outcome="message_read", role="assignee",
                 attempt="1") == 1
    assert value(world, "assignment_ack_wait_seconds_sum", outcome="message_read",
                 role="assignee", attempt="1") == POLL
    assert value(world, "assignment_workflow_duration_seconds_count", outcome="acked",
                 role="assignee") == 1
    assert value(world, "assignment_notification_events_total", event="ack_timeout") == 0
    before = n12_samples(world)

    world.restart()
    world.advance(3 * TIMEOUT)

    assert n12_samples(world) == before


def test_three_timeouts_count_three_pages_three_timeouts_and_an_unacknowledged_workflow(world):
    execution_id = start_urgent(world)

    for _ in range(3 * TIMEOUT // POLL):
        world.advance(POLL)

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    for attempt in ("1", "2", "3"):
        assert action(world, PAGE, "succeeded", attempt) == 1
        assert value(world, "assignment_ack_total", outcome="timeout", role="assignee",
                     attempt=attempt) == 1
        assert value(world, "assignment_ack_wait_seconds_sum", outcome="timeout",
                     role="assignee", attempt=attempt) == TIMEOUT
    assert value(world, "assignment_notification_events_total", event="ack_timeout") == 3
    assert value(world, "assignment_workflow_duration_seconds_count", outcome="unacknowledged",
                 role="assignee") == 1
    assert value(world, "execution_outcomes_total", mode="live", status="succeeded",
                 failure_code="", policy="test policy") == 1


def test_a_restart_mid_wait_counts_the_execution_once_when_it_ends(world):
    execution_id = start_urgent(world)
    world.advance(POLL)
    world.restart()
    world.wait_idle()
    assert n12_samples(world) == {}  # nothing is terminal yet

    for _ in range(3 * TIMEOUT // POLL):
        world.advance(POLL)

    assert page_context(world.execution(execution_id), 3)["outcome"] == "timeout"
    assert action(world, CARD, "succeeded") == 1
    assert value(world, "assignment_notification_events_total", event="ack_timeout") == 3


def test_failed_pages_count_page_failed_and_still_time_out(world):
    world.oncall.outcomes = [PageResult(PageOutcome.FAILED, call_error="no_phone_number")] * 3
    execution_id = start_urgent(world)

    for _ in range(3 * TIMEOUT // POLL):
        world.advance(POLL)

    assert world.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert value(world, "assignment_notification_events_total", event="page_failed") == 3
    assert value(world, "assignment_notification_events_total", event="ack_timeout") == 3
    assert action(world, PAGE, "failed", "1") == 1


def test_a_dry_run_never_counts_in_the_notification_families(world):
    put(world, severity="S1", status=PENDING)
    policy = world.store.policies.list_active()[0]
    trigger = world.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {}})

    assert world.execution(trigger.execution_ids[0]).status is ExecutionStatus.SUCCEEDED
    assert n12_samples(world) == {}
    assert value(world, "execution_outcomes_total", mode="dry_run", status="succeeded",
                 failure_code="", policy="test policy") == 1


# -- the backlog job ---------------------------------------------------------------------------


def test_the_backlog_job_samples_first_after_one_second_then_every_minute(world):
    put(world, severity="S1", status=PENDING)
    world.post_trigger(source=ASSIGNEE)  # parked in its first ACK wait
    put(world, severity="S1", status=PENDING)  # reassigned: the label is back
    world.post_trigger(source=ASSIGNEE)  # deferred: the family is busy
    assert value(world, "executing_executions", mode="live") == 0  # not sampled yet

    world.advance(1)

    assert value(world, "executing_executions", mode="live") == 1
    assert value(world, "triggers", status="pending") == 1
    assert value(world, "oldest_trigger_age_seconds", status="pending") == 1
    world.advance(POLL)  # the wait polls; the gauges keep the first sample until the next run
    assert value(world, "oldest_trigger_age_seconds", status="pending") == 1
    world.advance(60 - POLL)
    # the deferred trigger is re-tried every 5 s: the sample may catch it pending or processing
    assert max(value(world, "oldest_trigger_age_seconds", status=status)
               for status in ("pending", "processing")) == 61


def test_a_failed_backlog_read_keeps_the_whole_previous_sample_and_is_counted(world, monkeypatch):
    put(world, severity="S1", status=PENDING)
    world.post_trigger(source=ASSIGNEE)
    world.advance(1)
    assert value(world, "executing_executions", mode="live") == 1

    def broken(now):
        raise RuntimeError("database unavailable")

    monkeypatch.setattr(world.store.triggers, "backlog", broken)
    world.advance(60)

    assert value(world, "executing_executions", mode="live") == 1  # kept, not half-updated
    assert value(world, "metrics_job_failures_total") == 1
    monkeypatch.undo()
    world.advance(60)
    assert value(world, "metrics_job_failures_total") == 1


def test_pool_gauges_show_the_parked_wait_with_its_slot_free(world):
    start_urgent(world)

    assert value(world, "pool_slots") == 10
    assert (value(world, "pool_busy"), value(world, "pool_parked")) == (0, 1)


# -- logs an operator can follow ----------------------------------------------------------------


def test_each_notification_step_logs_one_line_with_the_context_keys(world, caplog):
    caplog.set_level("INFO", logger="ticket_dispatcher")
    execution_id = start_urgent(world)
    world.lark.readers[f"om_td-{execution_id}-0-0"] = ["ou_alice"]
    world.advance(POLL)

    steps = [r for r in caplog.records if r.name == "ticket_dispatcher.notification"]
    assert [r.getMessage() for r in steps] == [
        "card sent", "notification comment written", "urgent sent", "page accepted",
        "notification comment written", "assignment acknowledged", "ack comment written"]
    for record in steps:
        assert (record.issue_key, record.execution_id, record.role, record.source,
                record.target_account_id) == ("TCID-1", execution_id, "assignee", ASSIGNEE,
                                              "acc-alice")
    page_line = steps[3]
    assert (page_line.attempt, page_line.deadline) == (
        1, page_context(world.execution(execution_id))["deadline"])
    assert steps[5].reason == "read"
    [finished] = [r for r in caplog.records if r.getMessage() == "execution finished"]
    assert (finished.status, finished.failure_code, finished.execution_id) == (
        "succeeded", "", execution_id)
    assert finished.duration_seconds == POLL


def test_a_timed_out_wait_and_a_failed_page_log_warnings(world, caplog):
    caplog.set_level("INFO", logger="ticket_dispatcher")
    world.oncall.outcomes = [PageResult(PageOutcome.FAILED, call_error="no_phone_number")]
    start_urgent(world)
    for _ in range(TIMEOUT // POLL):
        world.advance(POLL)

    warnings = [(r.getMessage(), r.reason) for r in caplog.records
                if r.name == "ticket_dispatcher.notification" and r.levelname == "WARNING"]
    assert warnings == [
        ("page failed", "page attempt 1: not accepted (no phone number)"),
        ("ACK wait timed out", "timeout")]


def test_a_rotation_of_users_is_labelled_without_their_emails():
    label = rotation_label("users:alice@example.com,bob@example.com")

    assert label.startswith("users:") and "@" not in label and len(label) == 14
    assert rotation_label("group:sre") == "group:sre" and rotation_label("") == "none"
