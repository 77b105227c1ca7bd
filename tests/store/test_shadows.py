"""Shadow policies in the store, on both engines: one shadow per family, a frozen draft, and
decisions judged against the live execution whichever of the two ends first."""

from __future__ import annotations

import pytest

from tests.store.test_executions_and_triggers import NOW, make_policy, new
from ticket_dispatcher.domain.execution import ExecutionStatus, RuleOutcome
from ticket_dispatcher.domain.shadow import Decision, ShadowVerdict
from ticket_dispatcher.errors import Conflict, NotFound

LIVE = Decision(matched_rules=["rule 0"], actions=["assign"], assignee="a@x.io")
OTHER = Decision(matched_rules=["rule 0"], actions=["assign"], assignee="b@x.io")


def family(store):
    """An active version and a replacement draft of its family."""
    active = make_policy(store)
    store.policies.activate(active.id, now=NOW)
    draft = store.policies.create_replacement(active.id, active.spec, now=NOW)
    return active, draft


def live_execution(store, policy, *, ended: bool):
    trigger, execution = new(store, policy)
    [execution_id] = store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                             ensure_context=False, now=NOW)
    execution = store.executions.get(execution_id)
    if ended:
        end(store, execution)
    return trigger, execution


def end(store, execution) -> None:
    """The live execution matched its rule, assigned a@x.io and succeeded."""
    execution.rule_executions[0].outcome = RuleOutcome.MATCHED
    execution.rule_executions[0].action_executions[0].context["assign"] = {
        "assignee": "a@x.io"}
    execution.status = ExecutionStatus.SUCCEEDED
    execution.completed_at = NOW
    execution.live_lock_key = None
    store.executions.save(execution, execution.rule_executions)


def record(store, draft, trigger, execution, decision):
    return store.shadows.record(policy_id=draft.id, family_id=draft.family_id,
                                trigger_id=trigger.id, issue_key="TCID-1",
                                live_execution_id=execution.id, shadow=decision, now=NOW)


def test_one_shadow_per_family_and_only_a_draft(store):
    active, draft = family(store)
    second = store.policies.create_replacement(active.id, active.spec, now=NOW)

    store.shadows.start(draft.id, now=NOW)

    with pytest.raises(Conflict, match="has a shadow already"):
        store.shadows.start(second.id, now=NOW)
    with pytest.raises(Conflict, match="only a draft"):
        store.shadows.start(active.id, now=NOW)
    with pytest.raises(NotFound):
        store.shadows.start(999, now=NOW)
    assert store.shadows.of_families([draft.family_id]) == {draft.family_id: draft.id}


def test_a_shadowed_draft_is_frozen_and_activation_ends_the_shadow(store):
    _, draft = family(store)
    store.shadows.start(draft.id, now=NOW)

    with pytest.raises(Conflict, match="in shadow"):
        store.policies.update_draft(draft.id, draft.spec, now=NOW)
    with pytest.raises(Conflict, match="in shadow"):
        store.policies.delete_draft(draft.id)
    store.policies.activate(draft.id, now=NOW)

    assert store.shadows.of_families([draft.family_id]) == {}
    assert store.shadows.report(draft.id).shadowing is False
    with pytest.raises(NotFound):
        store.shadows.stop(draft.id)


def test_a_decision_is_judged_when_the_live_execution_ends(store):
    active, draft = family(store)
    store.shadows.start(draft.id, now=NOW)
    trigger, execution = live_execution(store, active, ended=False)

    assert record(store, draft, trigger, execution, OTHER) is None  # live still running
    assert store.shadows.report(draft.id).to_json()["pending"] == 1
    end(store, execution)

    judged = store.shadows.settle(execution, NOW)

    assert judged == [(draft.family_id, ShadowVerdict.OTHER_ASSIGNEE)]
    report = store.shadows.report(draft.id).to_json()
    assert (report["seen"], report["differed"], report["pending"]) == (1, 1, 0)
    [case] = report["latest_differences"]
    assert (case["live"]["assignee"], case["shadow"]["assignee"]) == ("a@x.io", "b@x.io")
    assert store.shadows.settle(execution, NOW) == []  # judged once


def test_a_decision_recorded_after_the_live_execution_ended_is_judged_at_once(store):
    active, draft = family(store)
    store.shadows.start(draft.id, now=NOW)
    trigger, execution = live_execution(store, active, ended=True)

    assert record(store, draft, trigger, execution, LIVE) is ShadowVerdict.AGREED
    report = store.shadows.report(draft.id).to_json()
    assert (report["seen"], report["agreed"], report["latest_differences"]) == (1, 1, [])


def test_dropped_evaluations_are_counted_while_in_shadow(store):
    _, draft = family(store)
    store.shadows.start(draft.id, now=NOW)

    store.shadows.dropped(draft.family_id)
    store.shadows.dropped(draft.family_id)

    assert store.shadows.report(draft.id).to_json()["dropped"] == 2
