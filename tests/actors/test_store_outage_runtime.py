"""The database failing under the runtime, on SQLite and PostgreSQL: every store call that can
meet an outage (claim, checkpoint, finish, creation, label and escalation bookkeeping, the
crash count) raises ``StoreUnavailable``; the work resumes from its last saved checkpoint once
the database answers again, is never failed for it, and no external call is repeated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.fakes import RecordingAction, issue
from tests.harness import assign, rule
from ticket_dispatcher.actors.leases import RETRY_MAX
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus
from ticket_dispatcher.errors import StoreUnavailable

ENGINEERS = ("a@example.com", "b@example.com")
BACKOFF = 1  # seconds: the first retry comes within 0.5 s, jittered


class Outage:
    """Makes one repository method raise ``StoreUnavailable`` a number of times, before its
    work (nothing was written) or after it (committed, but the answer was lost)."""

    def __init__(self, repository: Any, method: str, *, times: int = 1, after: bool = False,
                 when: Callable[..., bool] = lambda *args, **kwargs: True):
        self.remaining = times
        self.calls = 0
        real = getattr(repository, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            failing = self.remaining > 0 and when(*args, **kwargs)
            if failing and not after:
                self.remaining -= 1
                raise StoreUnavailable("the database is not available", kind="connection")
            answer = real(*args, **kwargs)
            if failing:
                self.remaining -= 1
                raise StoreUnavailable("the database is not available", kind="connection")
            return answer

        setattr(repository, method, call)


def staffed(make_harness, **options):
    h = make_harness(**options)
    for email in ENGINEERS:
        h.store.engineers.put(email, dispatch_enabled=True, now=h.clock.now())
        h.jira.add_user(email)
    h.policy(rule(assign(*ENGINEERS)))
    return h


def only_execution(h):
    [execution] = h.executions()
    return execution


def test_a_claim_that_meets_an_outage_is_retried_and_the_trigger_completes(make_harness):
    h = staffed(make_harness)
    outage = Outage(h.store.triggers, "claim", times=3)

    trigger = h.post_trigger()
    assert trigger.status is TriggerStatus.PENDING  # acknowledged, durable, not failed

    for _ in range(3):
        h.advance(RETRY_MAX.total_seconds())

    assert outage.remaining == 0
    assert h.trigger(trigger.id).status is TriggerStatus.COMPLETED
    assert only_execution(h).status is ExecutionStatus.SUCCEEDED
    assert len(h.jira.assignments()) == 1


def test_a_trigger_interrupted_mid_processing_keeps_its_claim_and_completes(make_harness):
    h = staffed(make_harness)
    Outage(h.store.policies, "active_and_shadows", times=1)

    trigger = h.post_trigger()
    assert trigger.status is TriggerStatus.PROCESSING  # still ours; never failed for it
    h.advance(BACKOFF)

    assert h.trigger(trigger.id).status is TriggerStatus.COMPLETED
    assert only_execution(h).status is ExecutionStatus.SUCCEEDED


def test_creation_committed_with_its_answer_lost_runs_each_execution_once(make_harness):
    h = staffed(make_harness)
    Outage(h.store.executions, "create", after=True)

    trigger = h.post_trigger()
    h.advance(BACKOFF)  # the retry finds the trigger completed: nothing to do again
    assert only_execution(h).status is ExecutionStatus.CREATED  # no actor was told
    h.advance(h.config.leases.heartbeat.total_seconds())  # the sweeper finds it

    assert h.trigger(trigger.id).status is TriggerStatus.COMPLETED
    assert only_execution(h).status is ExecutionStatus.SUCCEEDED
    assert len(h.jira.assignments()) == 1


def test_a_checkpoint_that_meets_an_outage_resumes_from_the_last_saved_one(make_harness):
    h = staffed(make_harness)
    # The save that records the finished assignment fails after the Jira write was made.
    Outage(h.store.executions, "save",
           when=lambda execution, rules, **_: bool(h.jira.assignments()))

    h.post_trigger()
    execution = only_execution(h)
    assert execution.status is ExecutionStatus.EXECUTING  # interrupted, not failed
    h.advance(BACKOFF)

    execution = only_execution(h)
    assert execution.status is ExecutionStatus.SUCCEEDED
    context = execution.rule_executions[0].action_executions[0].context["assign"]
    assert context["jira_outcome"] == "already assigned"  # re-read, never written again
    assert len(h.jira.assignments()) == 1


def test_the_finishing_save_is_retried_and_the_execution_finishes_once(make_harness, caplog):
    caplog.set_level("INFO")
    h = staffed(make_harness)
    Outage(h.store.executions, "save", times=2,
           when=lambda execution, rules, **_: execution.status.terminal)

    h.post_trigger()
    for _ in range(2):
        h.advance(RETRY_MAX.total_seconds())

    assert only_execution(h).status is ExecutionStatus.SUCCEEDED
    assert len(h.jira.assignments()) == 1
    finished = [r for r in caplog.records if r.getMessage() == "execution finished"]
    assert len(finished) == 1  # counted and logged once, after the save that took


def test_an_engineer_update_that_meets_an_outage_is_not_a_failure(make_harness):
    h = staffed(make_harness)
    Outage(h.store.engineers, "update_dispatch_state")

    h.post_trigger()
    h.advance(BACKOFF)

    execution = only_execution(h)
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.failure_code == ""
    assert len(h.jira.assignments()) == 1
    assert h.store.engineers.get(h.jira.assignments()[0][1].removeprefix("acc-")
                                 + "@example.com").last_dispatched_at is not None


def test_a_crash_that_cannot_be_recorded_is_restarted_once_the_database_answers(make_harness):
    crashing = RecordingAction(crash_in="execute")
    h = make_harness(crashing)
    h.policy(rule("test_noop"))
    outage = Outage(h.store.executions, "record_restart", times=2)

    h.post_trigger()
    crashing.crash_in = ""  # the restart will succeed
    for _ in range(2):
        h.advance(RETRY_MAX.total_seconds())

    assert outage.remaining == 0
    execution = only_execution(h)
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.restart_count == 1


def test_an_outage_at_every_save_of_a_run_still_ends_in_one_success(make_harness):
    h = staffed(make_harness)
    outage = Outage(h.store.executions, "save", times=50,
                    when=lambda execution, rules, **_: outage.calls % 2 == 1)

    h.post_trigger()
    for _ in range(12):
        h.advance(RETRY_MAX.total_seconds())

    assert only_execution(h).status is ExecutionStatus.SUCCEEDED
    assert len(h.jira.assignments()) == 1


def test_a_failed_issue_load_still_fails_the_trigger_for_its_own_reason(make_harness):
    h = staffed(make_harness)
    h.jira.issues.pop("TCID-1")

    trigger = h.post_trigger()

    assert trigger.status is TriggerStatus.FAILED
    assert trigger.failure_reason.startswith("issue load failed")


def test_issue_key_left_in_the_fake_world_is_untouched(make_harness):
    h = staffed(make_harness)
    h.jira.put(issue(key="TCID-2"))
    Outage(h.store.triggers, "claim", times=1)

    first = h.post_trigger("TCID-1")
    second = h.post_trigger("TCID-2")
    h.advance(BACKOFF)

    assert {h.trigger(t.id).status for t in (first, second)} == {TriggerStatus.COMPLETED}
    assert len(h.jira.assignments()) == 2
