"""Shared-mode claims in the store, on both engines: a replica claims only what is due and
nobody holds, no more than it asks for, and replicas claiming at the same moment never get the
same row (docs/operations.md, "How the replicas share the work")."""

from __future__ import annotations

import threading
from datetime import timedelta

from tests.store.test_leases import LEASE, ME, NOW, OTHER, claim, created, running
from ticket_dispatcher.domain.execution import TriggerStatus


def claim_due(store, limit, owner=ME, at=NOW):
    return store.executions.claim_due(owner, limit, now=at, expires_at=at + LEASE)


def test_claims_take_what_is_due_and_unheld_longest_due_first_and_no_more(store):
    first, second, third = created(store, "TCID-1"), created(store, "TCID-2"), created(
        store, "TCID-3")
    parked = running(store, second)
    parked.wake_at = NOW + timedelta(seconds=10)  # a parked wait, not due yet
    store.executions.save(parked, [], parked=True)
    claim(store, third, owner=OTHER)  # a live lease of another replica

    assert claim_due(store, 5) == [first]
    assert claim_due(store, 5) == []  # now held by ME
    assert claim_due(store, 5, at=NOW + timedelta(seconds=10)) == [second]  # its wake came
    # Leases expire: the oldest due first, and only as many as asked for.
    later = NOW + 2 * LEASE
    assert claim_due(store, 1, owner=OTHER, at=later) == [first]
    assert claim(store, first) is None  # another replica's live lease now


def test_replicas_claiming_together_never_get_the_same_execution(store):
    ids = {created(store, f"TCID-{n}") for n in range(1, 41)}
    owners = [f"host:{n}:x" for n in range(4)]
    barrier, taken, errors = threading.Barrier(len(owners)), {}, []

    def replica(owner: str) -> None:
        try:
            barrier.wait(timeout=10)
            mine = []
            while batch := claim_due(store, 3, owner=owner):
                mine += batch
            taken[owner] = mine
        except Exception as exc:  # reported below, with the owner
            errors.append((owner, exc))

    threads = [threading.Thread(target=replica, args=(owner,)) for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    claimed = [execution_id for mine in taken.values() for execution_id in mine]
    assert sorted(claimed) == sorted(ids)  # each exactly once


def test_triggers_are_claimed_pending_or_unheld_and_given_back_by_their_owner(store):
    pending = store.triggers.create("jira_automation", "TCID-1", policy_id=None, dryrun=None,
                                    now=NOW)
    held = store.triggers.create("jira_automation", "TCID-2", policy_id=None, dryrun=None,
                                 now=NOW)
    store.triggers.claim(held.id, NOW, owner=OTHER, expires_at=NOW + LEASE)

    [mine] = store.triggers.claim_due(ME, 5, now=NOW, expires_at=NOW + LEASE)
    assert (mine.id, mine.status, mine.lease.owner) == (pending.id, TriggerStatus.PROCESSING,
                                                        ME)
    assert store.triggers.claim_due(ME, 5, now=NOW, expires_at=NOW + LEASE) == []

    assert store.triggers.release_owner(OTHER) == 1  # a replica that stops hands it back
    [taken] = store.triggers.claim_due(ME, 5, now=NOW, expires_at=NOW + LEASE)
    assert taken.id == held.id
    # This process's own claim does not keep its own trigger actor out.
    assert store.triggers.claim(held.id, NOW, owner=ME, expires_at=NOW + LEASE) is not None


def test_a_stopping_replica_gives_back_its_running_executions_only(store):
    mine, theirs = created(store, "TCID-1"), created(store, "TCID-2")
    claim(store, mine)
    claim(store, theirs, owner=OTHER)

    assert store.executions.release_owner(ME) == 1
    assert claim_due(store, 5, owner=OTHER) == [mine]
    assert store.executions.next_wake(NOW) is None


def test_a_claim_takes_the_lane_it_is_asked_to_take_first(store):
    """Shared mode's lanes: three ordinary triggers, then a notification; a claim asked for
    notifications first takes it before the older ordinary ones, one asked for ordinary
    triggers first takes the oldest ordinary one, and without a lane the oldest of all."""
    def pending(source: str, key: str) -> int:
        return store.triggers.create(source, key, policy_id=None, dryrun=None, now=NOW).id

    ordinary = [pending("jira_automation", f"TCID-{n}") for n in range(1, 4)]
    notification = pending("jira_assignment_assignee", "TCID-9")

    def take(first):
        [taken] = store.triggers.claim_due(ME, 1, now=NOW, expires_at=NOW + LEASE, first=first)
        return taken.id

    assert take("notification") == notification
    assert take("ordinary") == ordinary[0]
    assert take(None) == ordinary[1]
    later = pending("jira_assignment_l2_assignee", "TCID-10")
    assert take("ordinary") == ordinary[2]
    assert take("ordinary") == later  # no ordinary one left: the other lane's


def test_due_waits_are_taken_once_the_longest_due_first_and_a_grace_keeps_claims_off(store):
    ids = [created(store, f"TCID-{n}") for n in range(1, 5)]
    for n, execution_id in enumerate(ids):
        wait = running(store, execution_id)
        wait.wake_at = NOW + timedelta(seconds=n)  # due one after another
        store.executions.save(wait, [], parked=True)
    claim(store, ids[0], owner=OTHER)  # held: never taken
    at, until = NOW + timedelta(seconds=2), NOW + timedelta(seconds=3)

    assert store.executions.claim_due(ME, 5, now=at, expires_at=at + LEASE,
                                      woken_before=NOW) == []  # held, or not due at NOW
    taken = store.executions.adopt_due(at, until, 5)
    again = store.executions.adopt_due(at, until, 5)

    assert taken == [(ids[1], until), (ids[2], until)]  # ids[3] is not due yet
    assert again == []  # parked until ``until`` now: nobody takes them twice
    assert store.executions.get(ids[1]).wake_at == until
    assert store.executions.adopt_due(until, until, 1) == [(ids[1], until)]  # not looked at
    assert store.executions.claim_due(ME, 5, now=until, expires_at=until + LEASE,
                                      woken_before=until) == ids[1:]
