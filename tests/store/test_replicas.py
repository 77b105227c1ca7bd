"""The replica registry on both engines: each serving process's heartbeat, one row per owner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.clocks import ManualClock
from ticket_dispatcher.store.replicas import FORGET_AFTER, ReplicaBeat, StoredSiteLimits

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def beat(owner: str, busy: int = 0) -> ReplicaBeat:
    return ReplicaBeat(owner=owner, host="host-a", pid=10, version="1.2.3", started_at=NOW,
                       slots=10, busy=busy, parked=2)


def test_each_heartbeat_updates_its_replicas_one_row(store):
    store.replicas.beat(beat("a:10:aaaaaa", busy=1), NOW)
    store.replicas.beat(beat("a:10:aaaaaa", busy=4), NOW + timedelta(seconds=5))
    store.replicas.beat(beat("b:20:bbbbbb"), NOW + timedelta(seconds=6))

    replicas = {r.owner: r for r in store.replicas.known()}

    assert set(replicas) == {"a:10:aaaaaa", "b:20:bbbbbb"}
    first = replicas["a:10:aaaaaa"]
    assert (first.busy, first.parked, first.slots) == (4, 2, 10)
    assert first.heartbeat_at == NOW + timedelta(seconds=5)
    assert first.started_at == NOW


def test_a_replica_silent_for_a_day_is_forgotten(store):
    store.replicas.beat(beat("gone:1:aaaaaa"), NOW)
    store.replicas.beat(beat("here:2:bbbbbb"), NOW + FORGET_AFTER + timedelta(seconds=1))

    assert [r.owner for r in store.replicas.known()] == ["here:2:bbbbbb"]



def test_a_replica_that_gave_its_work_back_shows_none_busy_or_parked(store):
    store.replicas.beat(beat("a:10:aaaaaa", busy=4), NOW)
    store.replicas.beat(beat("b:20:bbbbbb", busy=2), NOW)

    store.replicas.gave_back("a:10:aaaaaa")

    replicas = {r.owner: r for r in store.replicas.known()}
    assert (replicas["a:10:aaaaaa"].busy, replicas["a:10:aaaaaa"].parked) == (0, 0)
    assert replicas["a:10:aaaaaa"].heartbeat_at == NOW  # it stays as lost as it was
    assert replicas["b:20:bbbbbb"].busy == 2


def test_a_replica_that_stopped_cleanly_is_forgotten_and_the_others_stay(store):
    store.replicas.beat(beat("a:10:aaaaaa"), NOW)
    store.replicas.beat(beat("b:20:bbbbbb"), NOW)

    store.replicas.stopped("a:10:aaaaaa")
    store.replicas.stopped("never:1:seen")  # nothing to forget: no error

    assert [r.owner for r in store.replicas.known()] == ["b:20:bbbbbb"]


def test_the_live_replicas_are_those_with_a_heartbeat_within_a_lease(store):
    store.replicas.beat(beat("a:10:aaaaaa"), NOW - timedelta(seconds=50))
    store.replicas.beat(beat("b:20:bbbbbb"), NOW - timedelta(seconds=5))
    store.replicas.beat(beat("c:30:cccccc"), NOW)

    assert store.replicas.alive(NOW, timedelta(seconds=30)) == 2


def test_a_sites_hold_is_shared_and_only_ever_lengthened(store):
    assert store.replicas.site_held_until("jira") is None

    store.replicas.hold_site("jira", NOW + timedelta(seconds=30))
    store.replicas.hold_site("jira", NOW + timedelta(seconds=10))  # a shorter one, later

    assert store.replicas.site_held_until("jira") == NOW + timedelta(seconds=30)
    store.replicas.hold_site("jira", NOW + timedelta(seconds=40))
    assert store.replicas.site_held_until("jira") == NOW + timedelta(seconds=40)


def test_stored_site_limits_read_the_hold_at_most_once_a_second(store):
    clock = ManualClock(NOW)
    here = StoredSiteLimits(store.replicas, clock, "jira", timedelta(seconds=30))
    there = StoredSiteLimits(store.replicas, clock, "jira", timedelta(seconds=30))
    assert here.until() is None

    there.hold(NOW + timedelta(seconds=20))

    assert here.until() is None  # its last reading still stands
    clock.advance(1)
    assert here.until() == NOW + timedelta(seconds=20)
    store.replicas.beat(beat("a:10:aaaaaa"), clock.now())
    store.replicas.beat(beat("b:20:bbbbbb"), clock.now())
    assert here.share() == 2
