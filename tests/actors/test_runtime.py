"""From a posted trigger to a finished execution through the real actor system."""

from __future__ import annotations

from datetime import timedelta

from tests.fakes import RecordingAction, issue
from tests.harness import rule
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus
from ticket_dispatcher.domain.fanout import new_execution

P1 = {"field": "issue.priority", "operator": "in", "values": ["P0", "P1"]}


def test_trigger_runs_a_matching_policy_to_success(make_harness):
    noop = RecordingAction()
    h = make_harness(noop)
    policy = h.policy(rule("test_noop"))

    trigger = h.post_trigger("TCID-1")

    assert trigger.status is TriggerStatus.COMPLETED
    [execution] = [h.execution(i) for i in trigger.execution_ids]
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.policy_id == policy.id and execution.mode.value == "live"
    assert execution.live_lock_key is None
    assert [c[0] for c in noop.calls] == ["plan", "execute"]


def test_default_context_is_created_for_live_only(make_harness):
    h = make_harness(RecordingAction())
    policy = h.policy(rule("test_noop"))

    h.post_trigger("TCID-1", policy_id=policy.id, dryrun={"overwrite_data": {}})
    assert h.store.contexts.find("TCID-1") is None

    h.post_trigger("TCID-1")
    assert h.store.contexts.find("TCID-1") is not None


def test_no_match_completes_with_no_executions_and_no_context(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"), projects=("OTHER",))

    trigger = h.post_trigger("TCID-1")

    assert trigger.status is TriggerStatus.COMPLETED
    assert trigger.execution_ids == []
    assert h.store.contexts.find("TCID-1") is None


def test_issue_load_failure_fails_the_trigger_without_execution(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))

    trigger = h.post_trigger("TCID-404")

    assert trigger.status is TriggerStatus.FAILED
    assert "issue load failed" in trigger.failure_reason
    assert h.executions() == []


def test_policies_match_by_project_and_status(make_harness):
    h = make_harness(RecordingAction())
    h.jira.put(issue(key="TCID-2", status="Done"))
    matching = h.policy(rule("test_noop", when={"field": "issue.status", "operator": "eq",
                                                "value": "Done"}))
    h.policy(rule("test_noop"), projects=("GTOC",))
    h.policy(rule("test_noop"), active=False)

    trigger = h.post_trigger("TCID-2")

    [execution] = [h.execution(i) for i in trigger.execution_ids]
    assert execution.policy_id == matching.id
    assert execution.rule_executions[0].outcome.value == "matched"


def test_executions_are_prebuilt_in_priority_then_rule_id_order(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop", name="late", priority=20),
             rule("test_noop", name="early", priority=5, on_success="continue"))

    trigger = h.post_trigger()

    execution = h.execution(trigger.execution_ids[0])
    assert [r.name for r in execution.rule_executions] == ["early", "late"]
    assert [r.sequence for r in execution.rule_executions] == [0, 1]


def test_fan_out_creates_one_execution_per_policy_in_policy_order(make_harness):
    h = make_harness(RecordingAction())
    first = h.policy(rule("test_noop"))
    second = h.policy(rule("test_noop"))

    trigger = h.post_trigger()

    assert [h.execution(i).policy_id for i in trigger.execution_ids] == [first.id, second.id]
    assert trigger.execution_ids == sorted(trigger.execution_ids)


def test_dry_run_freezes_business_time_and_never_executes(make_harness):
    noop = RecordingAction()
    h = make_harness(noop)
    policy = h.policy(rule("test_noop", when={"field": "now", "operator": "before",
                                              "value": "2026-01-01T00:00:00Z"}))

    trigger = h.post_trigger(policy_id=policy.id,
                             dryrun={"overwrite_data": {"now": "2025-12-31T23:00:00Z"}})

    execution = h.execution(trigger.execution_ids[0])
    assert execution.mode.value == "dry_run" and execution.status is ExecutionStatus.SUCCEEDED
    assert execution.rule_executions[0].outcome.value == "matched"
    assert execution.business_now.isoformat() == "2025-12-31T23:00:00+00:00"
    assert [c[0] for c in noop.calls] == ["plan"]


def test_dry_runs_are_exempt_from_mutual_exclusion(make_harness):
    waiting = RecordingAction("test_wait", park_for=60)
    h = make_harness(waiting)
    policy = h.policy(rule("test_wait"))
    live = h.post_trigger()
    assert h.execution(live.execution_ids[0]).status is ExecutionStatus.EXECUTING

    dry = [h.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {}})
           for _ in range(2)]

    assert all(t.status is TriggerStatus.COMPLETED and len(t.execution_ids) == 1 for t in dry)


def test_busy_policy_is_skipped_on_auto_match_and_fails_an_explicit_trigger(make_harness):
    waiting = RecordingAction("test_wait", park_for=60)
    h = make_harness(waiting)
    policy = h.policy(rule("test_wait"))
    first = h.post_trigger()

    auto = h.post_trigger()
    explicit = h.post_trigger(policy_id=policy.id)

    assert len(first.execution_ids) == 1
    assert auto.status is TriggerStatus.COMPLETED and auto.execution_ids == []
    assert explicit.status is TriggerStatus.FAILED
    assert "already has a live execution" in explicit.failure_reason
    h.advance(60)
    assert h.execution(first.execution_ids[0]).status is ExecutionStatus.SUCCEEDED


def test_a_trigger_matching_a_busy_and_an_idle_policy_creates_only_the_idle_one(make_harness):
    # The first insert names both policies and the busy one's lock refuses it: nothing of it
    # may remain, and the idle policy's execution is created on the second, informed try.
    waiting, noop = RecordingAction("test_wait", park_for=60), RecordingAction()
    h = make_harness(waiting, noop)
    busy = h.policy(rule("test_wait"))
    first = h.post_trigger()
    idle = h.policy(rule("test_noop"))

    both = h.post_trigger()

    assert both.status is TriggerStatus.COMPLETED and len(both.execution_ids) == 1
    assert h.execution(both.execution_ids[0]).policy_id == idle.id
    assert both.failure_reason == f"skipped busy policies {busy.id}"
    assert [len(h.store.executions.page(policy_id=p.id)[0]) for p in (busy, idle)] == [1, 1]
    h.advance(60)
    assert h.execution(first.execution_ids[0]).status is ExecutionStatus.SUCCEEDED


def test_terminate_skips_everything_after_it(make_harness):
    stop, noop = RecordingAction("test_stop", result="terminate"), RecordingAction()
    h = make_harness(stop, noop)
    h.policy(rule("test_stop", "test_noop", on_success="continue"),
             rule("test_noop", priority=20))

    execution = h.execution(h.post_trigger().execution_ids[0])

    assert execution.status is ExecutionStatus.SUCCEEDED
    assert [[a.status.value for a in r.action_executions] for r in execution.rule_executions] \
        == [["succeeded", "skipped"], ["skipped"]]
    assert noop.calls == []


def test_plan_error_fails_the_execution_with_its_code(make_harness):
    h = make_harness(RecordingAction("test_fail", fail_in="plan"))
    h.policy(rule("test_fail"))

    execution = h.execution(h.post_trigger().execution_ids[0])

    assert execution.status is ExecutionStatus.FAILED
    assert execution.failure_code == "no_candidates"
    assert execution.live_lock_key is None


def test_parked_execution_frees_its_slot_and_resumes_when_time_comes(make_harness):
    waiting, noop = RecordingAction("test_wait", park_for=300), RecordingAction()
    h = make_harness(waiting, noop, slots=1)
    h.policy(rule("test_wait"))
    h.jira.put(issue(key="TCID-2"))
    parked = h.post_trigger("TCID-1")

    other = h.post_trigger("TCID-2")  # runs although the only slot's owner is waiting

    assert h.execution(parked.execution_ids[0]).status is ExecutionStatus.EXECUTING
    assert h.execution(parked.execution_ids[0]).wake_at is not None
    assert h.runtime.status()["pool"]["parked"] == 2
    h.advance(299)
    assert h.execution(parked.execution_ids[0]).status is ExecutionStatus.EXECUTING
    h.advance(1)
    assert h.execution(parked.execution_ids[0]).status is ExecutionStatus.SUCCEEDED
    assert h.execution(other.execution_ids[0]).status is ExecutionStatus.SUCCEEDED


def test_restart_mid_execution_resumes_without_duplicating_the_action(make_harness):
    waiting = RecordingAction("test_wait", park_for=120)
    h = make_harness(waiting)
    h.policy(rule("test_wait"))
    execution_id = h.post_trigger().execution_ids[0]

    h.restart()
    h.advance(120)

    execution = h.execution(execution_id)
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert len(execution.rule_executions[0].action_executions) == 1
    assert [c[0] for c in waiting.calls] == ["plan", "execute", "execute"]


def test_a_parked_execution_recovered_at_boot_waits_for_its_own_wake_at(make_harness):
    waiting = RecordingAction("test_wait", park_for=62)  # not on a heartbeat (every 5 s)
    h = make_harness(waiting)
    h.policy(rule("test_wait"))
    execution_id = h.post_trigger().execution_ids[0]

    h.restart()
    parked = h.runtime.status()["parked_executions"]
    h.advance(61)
    before = h.execution(execution_id).status
    h.advance(1)

    assert [p["execution_id"] for p in parked] == [execution_id]  # with its timer again
    assert before is ExecutionStatus.EXECUTING
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED


def test_crash_inside_an_action_restarts_it_from_the_checkpoint(make_harness):
    flaky = RecordingAction("test_flaky", crash_in="execute")
    h = make_harness(flaky, ACTOR_RESTARTS="3")
    h.policy(rule("test_flaky"))

    original_execute = flaky.execute

    def crash_once(run):
        flaky.execute = original_execute
        flaky.crash_in = ""
        raise RuntimeError("boom")

    flaky.execute = crash_once
    execution = h.execution(h.post_trigger().execution_ids[0])

    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.restart_count == 1
    assert [c[0] for c in flaky.calls] == ["plan", "execute"]  # plan not repeated


def test_execution_that_keeps_crashing_fails_with_internal_error(make_harness):
    h = make_harness(RecordingAction("test_crash", crash_in="execute"), ACTOR_RESTARTS="2")
    h.policy(rule("test_crash"))

    execution = h.execution(h.post_trigger().execution_ids[0])

    assert execution.status is ExecutionStatus.FAILED
    assert execution.failure_code == "internal_error"
    assert execution.restart_count == 3


def test_issue_load_refused_at_run_time_parks_with_backoff_then_fails(make_harness):
    h = make_harness(RecordingAction(park_for=1), EXECUTION_LOAD_RETRIES="2")
    h.policy(rule("test_noop"))
    # The trigger's load works, and its execution's first run starts from it; the loads of
    # the woken run are refused (a permanent answer: counted retries).
    h.jira.fail_next("TCID-1", times=10, after=1, status=403)
    execution_id = h.post_trigger().execution_ids[0]
    woke = h.clock.now() + timedelta(seconds=1)

    h.advance(1)
    first = h.execution(execution_id)
    h.advance(5)
    second = h.execution(execution_id)
    h.advance(10)
    final = h.execution(execution_id)

    assert first.status is ExecutionStatus.EXECUTING and first.load_attempts == 1
    assert (first.wake_at - woke).total_seconds() == 5
    assert (second.wake_at - woke).total_seconds() == 5 + 10  # 5 s doubling
    assert final.status is ExecutionStatus.FAILED
    assert final.failure_code == "issue_load_failed"


def test_issue_load_recovers_after_a_failure(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    h.jira.fail_next("TCID-1", times=1, after=1)
    execution_id = h.post_trigger().execution_ids[0]

    h.advance(5)

    execution = h.execution(execution_id)
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.load_attempts == 0



def test_policy_gone_before_the_run_retries_then_fails_with_policy_load_failed(make_harness):
    noop = RecordingAction()
    h = make_harness(noop, EXECUTION_LOAD_RETRIES="1")
    h.stop()
    draft = h.policy(rule("test_noop"), active=False)  # an explicit run may use a draft
    trigger = h.store.triggers.create("jira_automation", "TCID-1", policy_id=draft.id,
                                      dryrun=None, now=h.clock.now())
    execution = new_execution(trigger, draft, issue(), None, h.registry, h.clock.now())
    [execution_id] = h.store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                               ensure_context=True, now=h.clock.now())
    h.store.policies.delete_draft(draft.id)

    h.start()
    h.wait_idle()
    waiting = h.execution(execution_id)
    h.advance(5)
    failed = h.execution(execution_id)

    assert waiting.status is ExecutionStatus.CREATED and waiting.wake_at is not None
    assert failed.status is ExecutionStatus.FAILED
    assert failed.failure_code == "policy_load_failed"
    assert noop.calls == []
