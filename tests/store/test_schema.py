"""Constraints and JSON columns of the execution tables."""

from __future__ import annotations

from datetime import UTC, datetime

import peewee
import pytest

from ticket_dispatcher.store import unit_of_work
from ticket_dispatcher.store.models import ExecutionRow, RuleExecutionRow, TriggerRow

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)

ACTION_EXECUTIONS = [
    {"index": 0, "type": "assign", "status": "succeeded",
     "action": {"type": "assign", "assign": {"receiver": {"type": "user", "user": "a@x.com"},
                                             "strategy": "first"}},
     "context": {"assign": {"candidates": ["b@x.com", "a@x.com"], "assignee": "b@x.com",
                            "reason": "round_robin: 最早 last_dispatched_at"}},
     "result": "continue", "error": "", "started_at": "2026-11-30T01:00:00.000Z",
     "finished_at": None},
    {"index": 1, "type": "page_assignment", "status": "pending",
     "action": {"type": "page_assignment", "page_assignment": {"attempt": 2}},
     "context": {"page": {"deadline": None, "polls": [1, 2.5, True, None]}},
     "result": "", "error": "", "started_at": None, "finished_at": None},
]


def trigger(**overrides) -> TriggerRow:
    fields = dict(source="jira", issue_key="TCID-1", input_json={"issue_key": "TCID-1"},
                  status="pending", available_at=T0, output_json={"execution_ids": []},
                  created_at=T0, updated_at=T0)
    fields.update(overrides)
    return TriggerRow.create(**fields)


def execution(trigger_row, **overrides) -> ExecutionRow:
    fields = dict(trigger=trigger_row, issue_key="TCID-1", mode="live", policy_id=1,
                  policy_family_id="pf_A", policy_version=1, status="created",
                  business_now=T0, created_at=T0, updated_at=T0)
    fields.update(overrides)
    return ExecutionRow.create(**fields)


def test_trigger_json_columns_round_trip_including_nulls(store):
    with unit_of_work(store.db):
        row = trigger(dryrun_json={"overwrite_data": {"now": "2026-11-30T09:00:00+08:00"}})
        plain = trigger(policy_id=None, dryrun_json=None)
        loaded = TriggerRow.get_by_id(row.id)
        loaded_plain = TriggerRow.get_by_id(plain.id)

    assert loaded.dryrun_json == {"overwrite_data": {"now": "2026-11-30T09:00:00+08:00"}}
    assert loaded.output_json == {"execution_ids": []}
    assert (loaded_plain.dryrun_json, loaded_plain.policy_id) == (None, None)
    assert loaded.available_at == T0 and loaded.completed_at is None


def test_rule_execution_action_arrays_round_trip_in_order(store):
    with unit_of_work(store.db):
        parent = execution(trigger())
        RuleExecutionRow.create(execution=parent, sequence=0, rule_id=11, name="business hours",
                                priority=10, when_json={"always": True},
                                transition_json={"on_success": "terminate"},
                                outcome="not_evaluated", evaluation_json=None,
                                action_executions_json=ACTION_EXECUTIONS)
        loaded = RuleExecutionRow.get(RuleExecutionRow.execution == parent.id)

    assert loaded.action_executions_json == ACTION_EXECUTIONS
    assert loaded.evaluation_json is None


def test_rule_execution_sequence_is_unique_per_execution(store):
    def rule_execution(parent, sequence):
        RuleExecutionRow.create(execution=parent, sequence=sequence, rule_id=1, name="r",
                                priority=1, when_json={}, transition_json={}, outcome="matched",
                                action_executions_json=[])

    with unit_of_work(store.db):
        first, second = execution(trigger()), execution(trigger())
        rule_execution(first, 0)
        rule_execution(second, 0)
        with pytest.raises(peewee.IntegrityError), store.db.atomic():
            rule_execution(first, 0)


def test_live_lock_key_is_unique_but_many_executions_may_hold_none(store):
    with unit_of_work(store.db):
        parent = trigger()
        execution(parent, live_lock_key="TCID-1/policy/1")
        for _ in range(3):
            execution(parent, live_lock_key=None)
            execution(parent, mode="dry_run", live_lock_key=None)
        with pytest.raises(peewee.IntegrityError), store.db.atomic():
            execution(parent, live_lock_key="TCID-1/policy/1")
        execution(parent, live_lock_key="TCID-1/policy/2")
        assert ExecutionRow.select().count() == 8


def test_live_lock_key_is_refused_on_dry_runs_and_terminal_executions(store):
    with unit_of_work(store.db):
        parent = trigger()
        held = execution(parent, live_lock_key="TCID-1/policy/1", status="executing")
        with pytest.raises(peewee.IntegrityError), store.db.atomic():
            execution(parent, mode="dry_run", live_lock_key="TCID-1/policy/3")
        with pytest.raises(peewee.IntegrityError), store.db.atomic():
            ExecutionRow.update(status="succeeded").where(ExecutionRow.id == held.id).execute()

        # Cleared in the same UPDATE that makes it terminal.
        ExecutionRow.update(status="succeeded", live_lock_key=None, completed_at=T0).where(
            ExecutionRow.id == held.id).execute()
        execution(parent, live_lock_key="TCID-1/policy/1")


def test_deleting_an_execution_deletes_its_rule_executions(store):
    with unit_of_work(store.db):
        parent = execution(trigger())
        RuleExecutionRow.create(execution=parent, sequence=0, rule_id=1, name="r", priority=1,
                                when_json={}, transition_json={}, outcome="matched",
                                action_executions_json=[])
        ExecutionRow.delete().where(ExecutionRow.id == parent.id).execute()
        assert RuleExecutionRow.select().count() == 0
