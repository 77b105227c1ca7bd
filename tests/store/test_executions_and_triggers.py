"""The execution and trigger repositories on both engines."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.fakes import issue
from ticket_dispatcher.actors.cluster import SharedReplicas, SingleProcess
from ticket_dispatcher.actors.first_read import IssueRead, ReadBegan
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    ExecutionStatus,
    RuleOutcome,
    TriggerStatus,
)
from ticket_dispatcher.domain.fanout import new_execution
from ticket_dispatcher.domain.model import PolicySpec, PolicyTrigger, RuleSpec
from ticket_dispatcher.errors import Conflict

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def make_policy(store, rules=1):
    spec = PolicySpec(name="p", trigger=PolicyTrigger(project_key_in=("TCID",)), rules=tuple(
        RuleSpec(f"rule {n}", 10 * n, {"always": True},
                 [{"type": "assign", "assign": {"receiver": {"type": "user", "user": "a@x.io"},
                                                "strategy": "first"}}],
                 OnSuccess.CONTINUE) for n in range(rules)))
    return store.policies.create(spec, now=NOW)


def new(store, policy, key="TCID-1", dryrun=None):
    trigger = store.triggers.create("jira_automation", key, policy_id=None, dryrun=dryrun,
                                    now=NOW)
    return trigger, new_execution(trigger, policy, issue(key=key), None, ActionRegistry(), NOW)


def test_execution_aggregate_round_trips(store):
    policy = make_policy(store, rules=2)
    trigger, execution = new(store, policy)

    [execution_id] = store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                             ensure_context=True, now=NOW)
    loaded = store.executions.get(execution_id)

    assert loaded.to_json() == {**execution.to_json(), "id": execution_id}
    assert [r.sequence for r in loaded.rule_executions] == [0, 1]
    assert loaded.live_lock_key == f"TCID-1#policy:{policy.id}"
    assert store.triggers.get(trigger.id).execution_ids == [execution_id]
    assert store.triggers.get(trigger.id).status is TriggerStatus.COMPLETED
    assert store.contexts.find("TCID-1") is not None


def test_checkpoint_save_persists_rules_and_clears_the_lock_when_terminal(store):
    policy = make_policy(store)
    trigger, execution = new(store, policy)
    store.executions.create(trigger.id, [execution], issue_key="TCID-1", ensure_context=False,
                            now=NOW)
    rule = execution.rule_executions[0]
    rule.outcome = RuleOutcome.MATCHED
    rule.evaluation = {"matched": True, "reason": "always", "evaluated_at": "x"}
    rule.action_executions[0].status = ActionStatus.SUCCEEDED
    rule.action_executions[0].context = {"assign": {"assignee": "a@x.io", "emoji": "✓"}}
    execution.status, execution.live_lock_key = ExecutionStatus.SUCCEEDED, None
    execution.completed_at = execution.updated_at = NOW + timedelta(seconds=3)

    store.executions.save(execution, [rule])

    loaded = store.executions.get(execution.id)
    assert loaded.status is ExecutionStatus.SUCCEEDED and loaded.live_lock_key is None
    assert loaded.rule_executions[0].action_executions[0].context["assign"]["emoji"] == "✓"
    assert store.executions.busy_lock_keys([f"TCID-1#policy:{policy.id}"]) == set()


def test_saving_an_execution_that_ended_elsewhere_is_a_conflict(store):
    policy = make_policy(store)
    trigger, execution = new(store, policy)
    store.executions.create(trigger.id, [execution], issue_key="TCID-1", ensure_context=False,
                            now=NOW)
    execution.status, execution.live_lock_key = ExecutionStatus.FAILED, None
    store.executions.save(execution, [])

    execution.status = ExecutionStatus.EXECUTING
    with pytest.raises(Conflict):
        store.executions.save(execution, [])
    assert store.executions.get(execution.id).status is ExecutionStatus.FAILED


def test_a_save_writes_every_rule_it_carries_and_a_refused_one_writes_none(store):
    policy = make_policy(store, rules=2)
    trigger, execution = new(store, policy)
    store.executions.create(trigger.id, [execution], issue_key="TCID-1", ensure_context=False,
                            now=NOW)
    first, second = execution.rule_executions
    first.outcome, second.outcome = RuleOutcome.MATCHED, RuleOutcome.NOT_MATCHED
    first.evaluation = {"matched": True, "reason": "always", "evaluated_at": "x"}
    second.action_executions[0].status = ActionStatus.SKIPPED
    execution.status = ExecutionStatus.EXECUTING

    store.executions.save(execution, [first, second])

    saved = store.executions.get(execution.id)
    assert [rule.outcome for rule in saved.rule_executions] == [RuleOutcome.MATCHED,
                                                                RuleOutcome.NOT_MATCHED]
    assert saved.rule_executions[0].evaluation["reason"] == "always"
    assert saved.rule_executions[1].action_executions[0].status is ActionStatus.SKIPPED

    ended = store.executions.get(execution.id)  # cancelled elsewhere meanwhile
    ended.status, ended.live_lock_key = ExecutionStatus.FAILED, None
    store.executions.save(ended, [])
    first.outcome, second.outcome = RuleOutcome.NOT_MATCHED, RuleOutcome.MATCHED
    with pytest.raises(Conflict):
        store.executions.save(execution, [first, second])

    after = store.executions.get(execution.id)
    assert after.status is ExecutionStatus.FAILED
    assert [rule.outcome for rule in after.rule_executions] == [RuleOutcome.MATCHED,
                                                                RuleOutcome.NOT_MATCHED]


def test_failing_creation_leaves_nothing_behind(store):
    policy, other = make_policy(store), make_policy(store)
    holder_trigger, holder = new(store, policy)
    store.executions.create(holder_trigger.id, [holder], issue_key="TCID-1",
                            ensure_context=False, now=NOW)
    trigger, fresh = new(store, other)
    _, clash = new(store, policy)  # same lock key as the holder

    with pytest.raises(Conflict):
        store.executions.create(trigger.id, [fresh, clash], issue_key="TCID-1",
                                ensure_context=True, now=NOW)

    assert [e.id for e in store.executions.page(issue_key="TCID-1")[0]] == [holder.id]
    assert store.contexts.find("TCID-1") is None
    assert store.triggers.get(trigger.id).status is TriggerStatus.PENDING


def test_one_creation_writes_each_execution_with_its_rules_in_order(store):
    one, two = make_policy(store, rules=1), make_policy(store, rules=3)
    trigger, first = new(store, one)
    second = new_execution(trigger, two, issue(key="TCID-1"), None, ActionRegistry(), NOW)

    ids = store.executions.create(trigger.id, [first, second], issue_key="TCID-1",
                                  ensure_context=True, now=NOW, reason="why")

    assert ids == [first.id, second.id] and ids[0] < ids[1]
    assert store.triggers.get(trigger.id).execution_ids == ids
    assert store.triggers.get(trigger.id).failure_reason == "why"
    for execution, policy in zip((first, second), (one, two), strict=True):
        loaded = store.executions.get(execution.id)
        assert loaded.to_json() == execution.to_json()
        assert loaded.policy_id == policy.id
        assert [r.sequence for r in loaded.rule_executions] == list(range(len(policy.rules)))


def test_dry_runs_hold_no_lock(store):
    policy = make_policy(store)
    executions = []
    for _ in range(2):
        trigger, execution = new(store, policy, dryrun={"overwrite_data": {}})
        store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                ensure_context=False, now=NOW)
        executions.append(execution)

    assert all(e.live_lock_key is None for e in executions)
    assert len(store.executions.page(issue_key="TCID-1")[0]) == 2


def test_list_filters_and_recoverable_order(store):
    policy = make_policy(store)
    ids = []
    for key in ("TCID-1", "TCID-2", "TCID-3"):
        trigger, execution = new(store, policy, key=key)
        ids += store.executions.create(trigger.id, [execution], issue_key=key,
                                       ensure_context=False, now=NOW)

    items, total = store.executions.page(issue_key="TCID-2")
    assert total == 1 and items[0].issue_key == "TCID-2"
    recovered = store.executions.recoverable()
    assert [i for i, _, _ in recovered] == ids
    assert [key for _, _, key in recovered] == [store.executions.get(i).live_lock_key
                                                for i in ids] and all(k for _, _, k in recovered)
    assert store.executions.page(limit=2)[1] == 3


def test_restart_and_load_counters_are_single_updates(store):
    policy = make_policy(store)
    trigger, execution = new(store, policy)
    [execution_id] = store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                             ensure_context=False, now=NOW)

    assert store.executions.record_restart(execution_id) == 1
    assert store.executions.record_restart(execution_id) == 2
    assert store.executions.record_load_failure(execution_id, NOW) == (1, NOW)
    later = NOW + timedelta(minutes=1)
    assert store.executions.record_load_failure(execution_id, later) == (2, NOW)  # the first
    store.executions.reset_load_attempts(execution_id)
    assert store.executions.get(execution_id).load_attempts == 0
    assert store.executions.record_load_failure(execution_id, later) == (1, later)


def test_a_trigger_is_claimed_once(store):
    trigger = store.triggers.create("jira_automation", "TCID-1", policy_id=None, dryrun=None,
                                    now=NOW)

    first = store.triggers.claim(trigger.id, NOW)
    second = store.triggers.claim(trigger.id, NOW)
    recovered = store.triggers.claim(trigger.id, NOW, recovering=True)

    assert first is not None and first.status is TriggerStatus.PROCESSING
    assert second is None
    assert recovered is not None  # boot recovery takes over a trigger left processing


def test_deferred_trigger_is_due_only_when_its_time_comes(store):
    trigger = store.triggers.create("jira_assignment_assignee", "TCID-1", policy_id=None,
                                    dryrun=None, now=NOW)
    store.triggers.claim(trigger.id, NOW)

    store.triggers.defer(trigger.id, NOW + timedelta(seconds=5), NOW)

    assert store.triggers.due(NOW + timedelta(seconds=4)) == []
    assert store.triggers.claim(trigger.id, NOW) is None
    assert store.triggers.due(NOW + timedelta(seconds=5)) == [(trigger.id, trigger.source)]
    assert store.triggers.recoverable() == [(trigger.id, trigger.source)]


def test_failed_and_completed_triggers_keep_reason_and_output(store):
    failed = store.triggers.create("jira_automation", "TCID-1", policy_id=None, dryrun=None,
                                   now=NOW)
    done = store.triggers.create("jira_automation", "TCID-1", policy_id=7,
                                 dryrun={"overwrite_data": {"now": "2026-01-01T00:00:00Z"}},
                                 now=NOW)

    store.triggers.fail(failed.id, "issue load failed: 404", NOW)
    store.triggers.complete(done.id, [], NOW, reason="assignment notification disabled")

    assert store.triggers.get(failed.id).failure_reason == "issue load failed: 404"
    loaded = store.triggers.get(done.id)
    assert loaded.status is TriggerStatus.COMPLETED and loaded.completed_at == NOW
    assert loaded.dryrun == {"overwrite_data": {"now": "2026-01-01T00:00:00Z"}}
    assert loaded.policy_id == 7
    assert store.triggers.recoverable() == []


def test_ensuring_a_reserved_trigger_reuses_a_pending_one_and_creates_one_otherwise(store):
    now = datetime(2026, 11, 30, tzinfo=UTC)
    source = "jira_assignment_assignee"

    store.triggers.ensure_reserved_trigger(source, "TCID-1", now)
    store.triggers.ensure_reserved_trigger(source, "TCID-1", now)
    [(first, _)] = store.triggers.due(now)
    store.triggers.claim(first, now)
    store.triggers.ensure_reserved_trigger(source, "TCID-1", now)

    [(second, second_source)] = store.triggers.due(now)
    assert second != first and second_source == source
    assert store.triggers.get(second).source == source


def test_get_many_returns_the_existing_executions_by_id_with_their_rules(store):
    policy = make_policy(store, rules=2)
    ids = []
    for key in ("TCID-1", "TCID-2"):
        trigger, execution = new(store, policy, key)
        ids += store.executions.create(trigger.id, [execution], issue_key=key,
                                       ensure_context=False, now=NOW)

    found = store.executions.get_many([*ids, 999_999])

    assert set(found) == set(ids)
    assert [found[i].issue_key for i in ids] == ["TCID-1", "TCID-2"]
    assert [e.to_json() for e in found.values()] == [
        store.executions.get(i).to_json() for i in ids]


def test_a_replica_sees_its_peers_writes_to_an_issue_since_a_read_but_not_its_own(store):
    policy = make_policy(store)
    trigger, execution = new(store, policy)
    [mine] = store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                     ensure_context=False, now=NOW)
    read = IssueRead(issue(key="TCID-1"), trigger.id, ReadBegan(at=0.0, stops=0),
                     since=NOW - timedelta(seconds=5))
    shared = SharedReplicas(drain=timedelta(seconds=5))

    # the execution about to start is the only one of its issue: the trigger's read stands
    assert not shared.written_unseen(store, read, mine)
    assert not SingleProcess().written_unseen(store, read, mine)

    other_trigger, other = new(store, make_policy(store))
    [theirs] = store.executions.create(other_trigger.id, [other], issue_key="TCID-1",
                                       ensure_context=False, now=NOW)
    # another execution of the issue, not ended: it may have written since the read
    assert shared.written_unseen(store, read, mine)
    assert not shared.written_unseen(store, replace(read, issue=issue(key="TCID-2")), mine)
    assert shared.written_unseen(store, replace(read, since=None), mine)
    assert theirs != mine
