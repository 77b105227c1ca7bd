"""Leases in the store, on both engines: claims raise the epoch, writes are fenced by owner and
epoch, renewals extend only one's own leases, and the sweeper's query finds what nobody holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.store.test_executions_and_triggers import make_policy, new
from ticket_dispatcher.domain.execution import ExecutionStatus, Lease, RuleOutcome, TriggerStatus
from ticket_dispatcher.errors import Conflict, LeaseLost

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
ME, OTHER = "host-a:10:aaaaaa", "host-b:20:bbbbbb"


def created(store, key="TCID-1") -> int:
    trigger, execution = new(store, make_policy(store), key=key)
    [execution_id] = store.executions.create(trigger.id, [execution], issue_key=key,
                                             ensure_context=False, now=NOW)
    return execution_id


def claim(store, execution_id, owner=ME, at=NOW):
    return store.executions.claim(execution_id, owner=owner, now=at, expires_at=at + LEASE)


def running(store, execution_id):
    execution = store.executions.get(execution_id)
    execution.status = ExecutionStatus.EXECUTING
    return execution


def test_each_claim_raises_the_epoch_and_a_live_lease_keeps_others_out(store):
    execution_id = created(store)

    first = claim(store, execution_id)
    again = claim(store, execution_id)  # this process hands it to a new actor
    refused = claim(store, execution_id, owner=OTHER, at=NOW + LEASE - timedelta(seconds=1))
    taken = claim(store, execution_id, owner=OTHER, at=NOW + LEASE + timedelta(seconds=1))

    assert first == Lease(ME, 1)
    assert again == Lease(ME, 2)
    assert refused is None
    assert taken == Lease(OTHER, 3)


def test_a_loaded_claim_brings_the_execution_as_stored_and_refuses_as_the_claim_does(store):
    execution_id = created(store)
    stored = store.executions.get(execution_id)

    lease, execution = store.executions.claim_loaded(execution_id, owner=ME, now=NOW,
                                                     expires_at=NOW + LEASE)
    refused = store.executions.claim_loaded(execution_id, owner=OTHER, now=NOW,
                                            expires_at=NOW + LEASE)
    ended = running(store, execution_id)
    ended.status, ended.live_lock_key = ExecutionStatus.SUCCEEDED, None
    store.executions.save(ended, ended.rule_executions, lease=lease)
    after_end = store.executions.claim_loaded(execution_id, owner=ME, now=NOW,
                                              expires_at=NOW + LEASE)

    assert lease == Lease(ME, 1)
    assert execution == stored  # its rules (and their JSON) read back the same
    assert len(execution.rule_executions) == len(stored.rule_executions) > 0
    assert refused is None and after_end is None
    assert store.executions.claim_loaded(10**9, owner=ME, now=NOW,
                                         expires_at=NOW + LEASE) is None


def test_a_write_under_an_old_lease_is_refused_and_changes_nothing(store):
    execution_id = created(store)
    old = claim(store, execution_id)
    claim(store, execution_id, owner=OTHER, at=NOW + 2 * LEASE)
    execution = running(store, execution_id)

    with pytest.raises(LeaseLost):
        store.executions.save(execution, [], lease=old)
    rule = execution.rule_executions[0]
    rule.outcome = RuleOutcome.MATCHED
    with pytest.raises(LeaseLost):
        store.executions.save(execution, [rule], lease=old)

    unchanged = store.executions.get(execution_id)
    assert unchanged.status is ExecutionStatus.CREATED
    assert unchanged.rule_executions[0].outcome is RuleOutcome.NOT_EVALUATED


def test_a_write_to_a_finished_execution_is_a_conflict_not_a_lost_lease(store):
    execution_id = created(store)
    lease = claim(store, execution_id)
    execution = running(store, execution_id)
    execution.status, execution.live_lock_key = ExecutionStatus.SUCCEEDED, None
    store.executions.save(execution, [], lease=lease)

    with pytest.raises(Conflict):
        store.executions.save(running(store, execution_id), [], lease=lease)


def test_parking_and_finishing_give_the_lease_back(store):
    parked_id, finished_id = created(store, "TCID-1"), created(store, "TCID-2")
    parked = running(store, parked_id)
    parked.wake_at = NOW + timedelta(minutes=5)
    store.executions.save(parked, [], lease=claim(store, parked_id), parked=True)
    finished = running(store, finished_id)
    finished.status, finished.live_lock_key = ExecutionStatus.SUCCEEDED, None
    store.executions.save(finished, [], lease=claim(store, finished_id))

    # free to claim at once, while the lease it was parked under would still run
    assert claim(store, parked_id, owner=OTHER) == Lease(OTHER, 2)


def test_the_holder_of_a_running_execution_is_its_lease_owner_until_it_gives_it_back(store):
    held, parked_id = created(store, "TCID-1"), created(store, "TCID-2")
    assert store.executions.holder(held) is None  # queued: nobody holds it yet
    claim(store, held)
    parked = running(store, parked_id)
    parked.wake_at = NOW + timedelta(minutes=5)
    store.executions.save(parked, [], lease=claim(store, parked_id), parked=True)

    assert store.executions.holder(held) == (ME, NOW + LEASE)
    assert store.executions.holder(parked_id) is None
    assert store.executions.holder(999_999) is None
    finished = running(store, held)
    finished.status, finished.live_lock_key = ExecutionStatus.SUCCEEDED, None
    store.executions.save(finished, [], lease=Lease(ME, 1))
    assert store.executions.holder(held) is None


def test_renew_extends_only_the_owners_leases(store):
    mine, theirs = created(store, "TCID-1"), created(store, "TCID-2")
    claim(store, mine)
    claim(store, theirs, owner=OTHER)

    held = store.executions.renew(ME, [mine, theirs], NOW + 2 * LEASE)

    assert held == {mine}
    assert store.executions.stale(NOW + 2 * LEASE) == [theirs]  # mine runs until then
    assert store.executions.stale(NOW + 2 * LEASE + timedelta(seconds=1)) == [mine, theirs]


def test_the_sweeper_finds_unheld_expired_and_due_work_only(store):
    unheld = created(store, "TCID-1")
    expired = created(store, "TCID-2")
    live = created(store, "TCID-3")
    parked = created(store, "TCID-4")
    claim(store, expired, owner=OTHER, at=NOW - 2 * LEASE)
    claim(store, live, owner=OTHER)
    waiting = running(store, parked)
    waiting.wake_at = NOW + timedelta(minutes=1)
    store.executions.save(waiting, [], lease=claim(store, parked), parked=True)

    assert store.executions.stale(NOW) == [unheld, expired]
    assert store.executions.stale(NOW + timedelta(minutes=1)) == [unheld, expired, live, parked]


def test_boot_gives_back_every_running_lease(store):
    first, second = created(store, "TCID-1"), created(store, "TCID-2")
    claim(store, first)
    claim(store, second, owner=OTHER)

    assert store.executions.release_leases() == 2
    assert store.executions.stale(NOW) == [first, second]


def test_a_trigger_claim_is_fenced_through_to_its_completion(store):
    trigger = store.triggers.create("jira_automation", "TCID-1", policy_id=None, dryrun=None,
                                    now=NOW)
    mine = store.triggers.claim(trigger.id, NOW, owner=ME, expires_at=NOW + LEASE)
    late = NOW + LEASE + timedelta(seconds=1)
    assert store.triggers.stale(late) == [trigger.id]
    theirs = store.triggers.claim(trigger.id, late, owner=OTHER, expires_at=late + LEASE)

    with pytest.raises(LeaseLost):
        store.triggers.complete(trigger.id, [], late, lease=mine.lease)
    store.triggers.complete(trigger.id, [], late, lease=theirs.lease)

    assert (mine.lease, theirs.lease) == (Lease(ME, 1), Lease(OTHER, 2))
    assert store.triggers.get(trigger.id).status is TriggerStatus.COMPLETED
    assert store.triggers.stale(late + 2 * LEASE) == []


def test_a_trigger_is_taken_up_again_only_by_its_own_holder_while_its_lease_runs(store):
    trigger = store.triggers.create("jira_automation", "TCID-1", policy_id=None, dryrun=None,
                                    now=NOW)
    store.triggers.claim(trigger.id, NOW, owner=ME, expires_at=NOW + LEASE)

    other = store.triggers.claim(trigger.id, NOW, owner=OTHER,
                                 expires_at=NOW + LEASE)
    again = store.triggers.claim(trigger.id, NOW, owner=ME,
                                 expires_at=NOW + LEASE)

    assert other is None
    assert again.lease == Lease(ME, 2)
    assert store.triggers.renew(ME, [trigger.id], NOW + 2 * LEASE) == {trigger.id}
    assert store.triggers.renew(OTHER, [trigger.id], NOW + 2 * LEASE) == set()


def test_creating_executions_under_a_lost_trigger_lease_writes_nothing(store):
    policy = make_policy(store)
    trigger, execution = new(store, policy)
    mine = store.triggers.claim(trigger.id, NOW, owner=ME, expires_at=NOW + LEASE)
    store.triggers.claim(trigger.id, NOW + 2 * LEASE, owner=OTHER,
                         expires_at=NOW + 3 * LEASE)

    with pytest.raises(LeaseLost):
        store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                ensure_context=True, now=NOW, lease=mine.lease)

    assert store.executions.page(issue_key="TCID-1") == ([], 0)
    assert store.contexts.find("TCID-1") is None
    assert store.triggers.get(trigger.id).status is TriggerStatus.PROCESSING
