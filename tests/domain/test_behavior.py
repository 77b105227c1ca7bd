"""The execution state machine without threads or a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.clocks import ManualClock
from tests.fakes import MemoryCheckpoints, RecordingAction, bare_ports, issue
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.behavior import Behavior, StepKind
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    Execution,
    ExecutionMode,
    ExecutionStatus,
    FailureCode,
    RuleOutcome,
    build_rule_executions,
)
from ticket_dispatcher.domain.model import Policy, PolicyStatus, PolicyTrigger, Rule

P1 = {"field": "issue.priority", "operator": "in", "values": ["P0", "P1"]}
P3 = {"field": "issue.priority", "operator": "eq", "value": "P3"}
ALWAYS = {"always": True}


def rule(rule_id, priority, when, actions, on_success="terminate") -> Rule:
    from ticket_dispatcher.domain.catalog import OnSuccess
    return Rule(id=rule_id, name=f"rule-{rule_id}", priority=priority, when=when,
                then=[{"type": a, a: {}} for a in actions], on_success=OnSuccess(on_success))


def execution(*rules, mode=ExecutionMode.LIVE, business_now=None) -> Execution:
    now = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
    policy = Policy(id=1, family_id="pf_TEST", version=1, status=PolicyStatus.ACTIVE,
                    name="p", description="", trigger=PolicyTrigger(), rules=tuple(rules),
                    created_at=now, updated_at=now)
    return Execution(id=7, trigger_id=1, issue_key="TCID-1", mode=mode, policy_id=1,
                     policy_family_id="pf_TEST", policy_version=1,
                     rule_executions=build_rule_executions(policy), business_now=business_now,
                     live_lock_key=None if mode is ExecutionMode.DRY_RUN else "TCID-1#policy:1")


class Runner:
    def __init__(self, *actions):
        self.clock = ManualClock()
        self.checkpoints = MemoryCheckpoints()
        self.behavior = Behavior(ActionRegistry(actions), self.checkpoints, self.clock.now,
                                 bare_ports())

    def run(self, ex: Execution, the_issue=None, max_steps=100):
        the_issue = the_issue or issue()
        for _ in range(max_steps):
            step = self.behavior.step(ex, the_issue)
            if step.kind is not StepKind.ADVANCED:
                return step
        raise AssertionError("execution did not settle")


def statuses(ex: Execution) -> list[list[str]]:
    return [[a.status.value for a in r.action_executions] for r in ex.rule_executions]


def test_created_moves_to_executing_and_is_saved_first():
    runner = Runner(RecordingAction())
    ex = execution(rule(1, 10, ALWAYS, ["test_noop"]))

    runner.behavior.step(ex, issue())

    assert runner.checkpoints.last.status is ExecutionStatus.EXECUTING
    assert runner.checkpoints.last.rule_executions[0].outcome is RuleOutcome.NOT_EVALUATED


def test_rules_run_in_priority_then_id_order_and_first_match_wins():
    noop = RecordingAction()
    ex = execution(rule(3, 20, ALWAYS, ["test_noop"]), rule(2, 10, P1, ["test_noop"]),
                   rule(1, 10, P3, ["test_noop"]))
    runner = Runner(noop)

    step = runner.run(ex)

    assert step.kind is StepKind.FINISHED
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert [r.rule_id for r in ex.rule_executions] == [1, 2, 3]
    assert [r.outcome for r in ex.rule_executions] == [
        RuleOutcome.NOT_MATCHED, RuleOutcome.MATCHED, RuleOutcome.NOT_EVALUATED]
    assert statuses(ex) == [["skipped"], ["succeeded"], ["skipped"]]
    assert ex.live_lock_key is None and ex.completed_at is not None


def test_rule_outcome_is_persisted_as_soon_as_it_is_evaluated():
    runner = Runner(RecordingAction())
    ex = execution(rule(1, 10, P1, ["test_noop"]))

    runner.behavior.step(ex, issue())
    runner.behavior.step(ex, issue())

    saved = runner.checkpoints.last.rule_executions[0]
    assert saved.outcome is RuleOutcome.MATCHED
    assert saved.evaluation["reason"]
    assert saved.action_executions[0].status is ActionStatus.PENDING


def test_the_evaluation_keeps_every_leaf_of_the_condition_beside_the_reason():
    runner = Runner(RecordingAction())
    ex = execution(rule(1, 10, {"any": [P3, P1]}, ["test_noop"]))

    runner.behavior.step(ex, issue())
    runner.behavior.step(ex, issue())

    evaluation = runner.checkpoints.last.rule_executions[0].evaluation
    assert evaluation["reason"] == 'any matched [issue.priority "P1" in ["P0","P1"]]'
    tree = evaluation["tree"]
    assert tree["matched"] is True
    assert [(leaf["expected"], leaf["actual"], leaf["matched"]) for leaf in tree["any"]] == [
        ("P3", '"P1"', False), (["P0", "P1"], '"P1"', True)]


def test_continue_runs_the_next_rule():
    noop = RecordingAction()
    ex = execution(rule(1, 10, ALWAYS, ["test_noop"], on_success="continue"),
                   rule(2, 20, P1, ["test_noop", "test_noop"]))

    Runner(noop).run(ex)

    assert statuses(ex) == [["succeeded"], ["succeeded", "succeeded"]]
    assert len([c for c in noop.calls if c[0] == "execute"]) == 3


def test_terminate_result_skips_everything_after_it():
    stop = RecordingAction("test_stop", result="terminate")
    noop = RecordingAction()
    ex = execution(rule(1, 10, ALWAYS, ["test_stop", "test_noop"], on_success="continue"),
                   rule(2, 20, ALWAYS, ["test_noop"]))

    Runner(stop, noop).run(ex)

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert statuses(ex) == [["succeeded", "skipped"], ["skipped"]]
    assert ex.rule_executions[1].outcome is RuleOutcome.NOT_EVALUATED
    assert noop.calls == []


@pytest.mark.parametrize("fail_in,code", [("plan", "no_candidates"),
                                          ("execute", "execute_failed")])
def test_action_error_fails_the_execution_with_its_code(fail_in, code):
    failing = RecordingAction("test_fail", fail_in=fail_in)
    noop = RecordingAction()
    ex = execution(rule(1, 10, ALWAYS, ["test_fail", "test_noop"], on_success="continue"),
                   rule(2, 20, ALWAYS, ["test_noop"]))

    Runner(failing, noop).run(ex)

    assert ex.status is ExecutionStatus.FAILED
    assert ex.failure_code == code
    assert statuses(ex) == [["failed", "skipped"], ["skipped"]]
    assert ex.rule_executions[0].outcome is RuleOutcome.MATCHED  # no rollback of the outcome
    assert ex.rule_executions[1].outcome is RuleOutcome.NOT_EVALUATED
    assert ex.rule_executions[0].action_executions[0].context["planned"] is True


def test_unknown_action_type_fails_as_plan_failed():
    ex = execution(rule(1, 10, ALWAYS, ["test_unregistered"]))

    Runner().run(ex)

    assert ex.failure_code == "plan_failed"
    assert "test_unregistered" in ex.failure_reason


def test_broken_condition_fails_with_condition_error():
    ex = execution(rule(1, 10, {"field": "issue.nope", "operator": "eq", "value": "x"},
                        ["test_noop"]))

    Runner(RecordingAction()).run(ex)

    assert ex.status is ExecutionStatus.FAILED
    assert ex.failure_code == "condition_error"


def test_dry_run_plans_but_never_executes_and_uses_frozen_time():
    noop = RecordingAction()
    frozen = datetime(2026, 1, 1, 3, 0, tzinfo=UTC)
    window = {"field": "now", "operator": "before", "value": "2026-01-02T00:00:00Z"}
    ex = execution(rule(1, 10, window, ["test_noop"]), mode=ExecutionMode.DRY_RUN,
                   business_now=frozen)

    Runner(noop).run(ex)

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert ex.rule_executions[0].outcome is RuleOutcome.MATCHED  # 2026-01-01 < 2026-01-02
    assert [c[0] for c in noop.calls] == ["plan"]
    assert statuses(ex) == [["succeeded"]]


def test_park_keeps_the_action_executing_and_resumes_without_replanning():
    waiting = RecordingAction("test_wait", park_for=300)
    runner = Runner(waiting)
    ex = execution(rule(1, 10, ALWAYS, ["test_wait"]))

    parked = runner.run(ex)

    assert parked.kind is StepKind.PARKED
    assert parked.wake_at == runner.clock.now() + timedelta(seconds=300)
    assert ex.wake_at == parked.wake_at
    assert ex.status is ExecutionStatus.EXECUTING
    assert statuses(ex) == [["executing"]]
    assert runner.checkpoints.last.wake_at == parked.wake_at

    runner.clock.advance(300)
    done = runner.run(ex)

    assert done.kind is StepKind.FINISHED
    assert [c[0] for c in waiting.calls] == ["plan", "execute", "execute"]
    assert ex.wake_at is None and statuses(ex) == [["succeeded"]]


def test_action_found_executing_after_restart_is_rerun_in_place():
    noop = RecordingAction()
    ex = execution(rule(1, 10, ALWAYS, ["test_noop"]))
    runner = Runner(noop)
    runner.behavior.step(ex, issue())  # executing
    runner.behavior.step(ex, issue())  # evaluated
    action = ex.rule_executions[0].action_executions[0]
    action.status = ActionStatus.EXECUTING  # as if the process died right after marking it

    runner.run(ex)

    assert len(ex.rule_executions[0].action_executions) == 1
    assert action.status is ActionStatus.SUCCEEDED


def test_cancel_fails_with_cancelled_and_skips_unfinished_actions():
    waiting = RecordingAction("test_wait", park_for=300)
    runner = Runner(waiting, RecordingAction())
    ex = execution(rule(1, 10, ALWAYS, ["test_wait", "test_noop"]))
    runner.run(ex)

    runner.behavior.abort(ex, FailureCode.CANCELLED, "operator cancelled")

    assert ex.status is ExecutionStatus.FAILED and ex.failure_code == "cancelled"
    assert statuses(ex) == [["skipped", "skipped"]]
    assert runner.checkpoints.last.status is ExecutionStatus.FAILED


class CheckpointingAction(RecordingAction):
    """Saves a phase from inside execute, then dies before its side effect."""

    def execute(self, run):
        run.context["phase"] = "started"
        run.checkpoint()
        raise RuntimeError("the process died")


def test_an_action_can_checkpoint_its_phase_from_inside_execute():
    runner = Runner(CheckpointingAction())
    ex = execution(rule(1, 10, ALWAYS, ["test_noop"]))

    with pytest.raises(RuntimeError):
        runner.run(ex)

    saved = runner.checkpoints.last
    action = saved.rule_executions[0].action_executions[0]
    assert (action.status, action.context["phase"]) == (ActionStatus.EXECUTING, "started")
    assert action.planned_at is not None and saved.status is ExecutionStatus.EXECUTING


def test_an_execution_keeps_its_own_copy_of_the_rules_and_initial_contexts():
    when = {"all": [P1, {"field": "issue.labels", "operator": "contains", "value": "x"}]}
    action = {"type": "assign", "assign": {"receiver": {"type": "users", "users": ["a@x.io"]},
                                           "weights": [1.5, None, True]}}
    now = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
    policy = Policy(id=1, family_id="pf_TEST", version=1, status=PolicyStatus.ACTIVE,
                    name="p", description="", trigger=PolicyTrigger(),
                    rules=(Rule(id=1, name="r", priority=10, when=when, then=[action]),),
                    created_at=now, updated_at=now)
    initial = {"assign": {"candidates": ["a@x.io"], "judged": [{"email": "a@x.io"}]}}

    [built] = build_rule_executions(policy, [[initial]])
    when["all"][0]["values"].append("P2")
    action["assign"]["receiver"]["users"].append("b@x.io")
    initial["assign"]["judged"][0]["email"] = "changed"

    assert built.when["all"][0]["values"] == ["P0", "P1"]
    [copied] = built.action_executions
    assert copied.action["assign"]["receiver"]["users"] == ["a@x.io"]
    assert copied.action["assign"]["weights"] == [1.5, None, True]
    assert copied.context["assign"]["judged"] == [{"email": "a@x.io"}]
