"""Each Jira rate limit held at its own scope, and the budget of calls a second, with a manual
clock: a 429 names its scope in ``RateLimit-Reason``; the pacer never lets more calls go in
any sliding second than its budget, and halves it when the service says the limit is near."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.clocks import ManualClock
from tests.integrations.http_clients import BASE, Waits, client
from ticket_dispatcher.errors import FaultKind, fault_of
from ticket_dispatcher.integrations.call_policy import (
    EVERY_CALL,
    LimitScope,
    Pacer,
    RateGate,
    Slot,
    calls_first,
    endpoint_of,
    scope_of,
)
from ticket_dispatcher.integrations.http import IntegrationRejected

NOW = datetime(2026, 11, 30, 1, 0, 0, tzinfo=UTC)
ASSIGNEE = "/rest/api/2/issue/{key}/assignee"


def test_a_reason_names_the_scope_it_holds():
    assert scope_of("jira-per-issue-on-write", "PUT", "/rest/api/2/issue/ABC-1/assignee") \
        == LimitScope("issue", "ABC-1")
    assert scope_of("jira-burst-based", "PUT", "/rest/api/2/issue/ABC-1/assignee") \
        == LimitScope("endpoint", "PUT /rest/api/2/issue/{issue}/assignee")
    for reason in ("jira-quota-tenant-based", "jira-something-new", "", None):
        assert scope_of(reason, "PUT", "/rest/api/2/issue/ABC-1") == EVERY_CALL
    # A per-issue limit on a call that names no issue, or only reads, holds everything.
    assert scope_of("jira-per-issue-on-write", "POST", "/rest/api/3/search/jql") == EVERY_CALL
    assert endpoint_of("get", "/rest/api/2/issue/10042?fields=x") == "GET /rest/api/2/issue/{issue}"


def limited(mocked, method: str, key: str, reason: str | None, retry: int = 30) -> None:
    headers = {"Retry-After": str(retry)}
    if reason is not None:
        headers["RateLimit-Reason"] = reason
    mocked.add(method, f"{BASE}{ASSIGNEE.format(key=key)}", status=429, headers=headers)


def test_a_per_issue_write_limit_holds_only_that_issues_writes(mocked):
    clock = ManualClock(NOW)
    held: list[tuple[str, str]] = []
    gate = RateGate(clock, on_held=lambda scope, reason: held.append((scope, reason)))
    limited(mocked, "PUT", "ABC-1", "jira-per-issue-on-write")
    mocked.put(f"{BASE}{ASSIGNEE.format(key='ABC-2')}", status=204)
    mocked.get(f"{BASE}/rest/api/2/issue/ABC-1", json={"key": "ABC-1"})
    http = client(clock=clock, gate=gate)

    with pytest.raises(IntegrationRejected):  # 30 s: longer than the client waits
        http.request("PUT", ASSIGNEE.format(key="ABC-1"), json={}, expected=(204,))
    http.request("PUT", ASSIGNEE.format(key="ABC-2"), json={}, expected=(204,))  # at once
    http.request("GET", "/rest/api/2/issue/ABC-1")  # a read of the held issue: at once
    clock.advance(10)
    with pytest.raises(IntegrationRejected) as again:  # its write: not sent before the wait
        http.request("PUT", ASSIGNEE.format(key="abc-1"), json={}, expected=(204,))

    assert len(mocked.calls) == 3
    assert "not sent" in again.value.message and again.value.retry_after == 20.0
    assert fault_of(again.value).kind is FaultKind.HELD
    # the write answered 429, then the one refused unsent
    assert held == [("issue", "jira-per-issue-on-write")] * 2
    clock.advance(20)
    assert gate.remaining("PUT", ASSIGNEE.format(key="ABC-1")) == 0


def test_a_burst_limit_holds_that_endpoint_and_method_only(mocked):
    clock = ManualClock(NOW)
    gate = RateGate(clock)
    limited(mocked, "PUT", "ABC-1", "jira-burst-based")
    mocked.get(f"{BASE}{ASSIGNEE.format(key='ABC-2')}", json={})
    mocked.put(f"{BASE}/rest/api/2/issue/ABC-2", status=204)
    http = client(clock=clock, gate=gate)

    with pytest.raises(IntegrationRejected):
        http.request("PUT", ASSIGNEE.format(key="ABC-1"), json={}, expected=(204,))
    http.request("GET", ASSIGNEE.format(key="ABC-2"))  # another method
    http.request("PUT", "/rest/api/2/issue/ABC-2", json={}, expected=(204,))  # another path
    with pytest.raises(IntegrationRejected) as held:  # the same endpoint, another issue
        http.request("PUT", ASSIGNEE.format(key="ABC-2"), json={}, expected=(204,))

    assert len(mocked.calls) == 3 and held.value.retry_after == 30.0


@pytest.mark.parametrize("reason", [None, "jira-quota-tenant-based", "jira-unheard-of"])
def test_a_quota_or_an_unknown_or_missing_reason_holds_every_call(mocked, reason):
    clock = ManualClock(NOW)
    limits: list[float] = []
    gate = RateGate(clock, limits.append)
    limited(mocked, "PUT", "ABC-1", reason)
    http = client(clock=clock, gate=gate)

    with pytest.raises(IntegrationRejected):
        http.request("PUT", ASSIGNEE.format(key="ABC-1"), json={}, expected=(204,))
    with pytest.raises(IntegrationRejected):
        http.request("GET", "/rest/api/2/myself")

    assert len(mocked.calls) == 1 and limits == [30.0]


class Shared:
    """The holds the replicas share, in memory."""

    def __init__(self) -> None:
        self.until_: datetime | None = None

    def until(self) -> datetime | None:
        return self.until_

    def hold(self, until: datetime) -> None:
        self.until_ = until

    def share(self) -> int:
        return 1


def test_a_hold_of_every_call_is_shared_and_a_shared_one_holds_here(mocked):
    clock = ManualClock(NOW)
    shared = Shared()
    limited(mocked, "PUT", "ABC-1", None)
    limited(mocked, "PUT", "ABC-2", "jira-per-issue-on-write")
    with pytest.raises(IntegrationRejected):
        client(clock=clock, gate=RateGate(clock, site=shared)).request(
            "PUT", ASSIGNEE.format(key="ABC-1"), json={}, expected=(204,))
    assert shared.until_ == NOW + timedelta(seconds=30)

    other = Shared()
    with pytest.raises(IntegrationRejected):  # a scoped hold stays with the replica
        client(clock=clock, gate=RateGate(clock, site=other)).request(
            "PUT", ASSIGNEE.format(key="ABC-2"), json={}, expected=(204,))
    assert other.until_ is None

    elsewhere = RateGate(clock, site=shared)  # another replica: holds without a 429
    with pytest.raises(IntegrationRejected) as held:
        client(clock=clock, gate=elsewhere).request("GET", "/rest/api/2/myself")
    assert held.value.retry_after == 30.0 and len(mocked.calls) == 2


def sent_in_any_second(times: list[datetime]) -> int:
    return max(sum(1 for t in times if start <= t < start + timedelta(seconds=1))
               for start in times)


def take_all(pacer: Pacer, clock: ManualClock, calls: int) -> list[datetime]:
    """The times ``calls`` calls go, one after another, each waiting its slot."""
    times = []
    for _ in range(calls):
        slot = pacer.take(max_wait=10)
        assert slot is not None and slot.taken
        clock.advance(slot.wait)
        times.append(clock.now())
    return times


def test_a_budget_is_never_exceeded_in_any_sliding_second():
    clock = ManualClock(NOW)
    pacer = Pacer(clock, budget=5)

    times = take_all(pacer, clock, 23)

    assert sent_in_any_second(times) == 5
    assert times[4] == NOW and times[5] == NOW + timedelta(seconds=1)  # no burst past five


def test_a_budget_is_divided_among_the_live_replicas_and_a_slot_too_far_is_refused():
    clock = ManualClock(NOW)
    replicas = [3]
    pacer = Pacer(clock, budget=6, share=lambda: replicas[0])

    times = take_all(pacer, clock, 6)

    assert sent_in_any_second(times) == 2 and pacer.budget() == 2
    assert pacer.take(max_wait=0.5) is None  # the next slot is a second away: nothing taken
    replicas[0] = 1
    assert pacer.budget() == 6


def test_a_near_limit_halves_the_budget_for_a_minute():
    clock = ManualClock(NOW)
    pacer = Pacer(clock, budget=8)

    pacer.near_limit()
    halved = take_all(pacer, clock, 12)
    clock.advance(60)

    assert sent_in_any_second(halved) == 4 and pacer.budget() == 8


def test_without_a_budget_a_near_limit_takes_half_the_rate_of_the_last_minute():
    clock = ManualClock(NOW)
    pacer = Pacer(clock)
    for _ in range(60):  # 600 calls in the minute up to now: 10 a second
        clock.advance(1)
        take_all(pacer, clock, 10)
    assert pacer.budget() is None

    pacer.near_limit()

    assert pacer.budget() == 5.0
    clock.advance(61)
    assert pacer.budget() is None


def test_a_call_waits_for_its_slot_under_the_budget(mocked):
    clock = ManualClock(NOW)
    waits = Waits(clock)
    mocked.get(f"{BASE}/x", json={})
    http = client(clock=clock, gate=RateGate(clock, pacer=Pacer(clock, budget=2)), sleep=waits)
    for _ in range(5):
        http.request("GET", "/x")

    assert waits == [1.0, 1.0] and len(mocked.calls) == 5


def test_the_last_hour_counts_the_calls_sent_and_the_time_every_call_was_held(mocked):
    clock = ManualClock(NOW)
    gate = RateGate(clock)
    mocked.get(f"{BASE}/x", json={})
    http = client(clock=clock, gate=gate)
    http.request("GET", "/x")
    http.request("GET", "/x")

    gate.limit(30)  # every call
    gate.limit(50, method="PUT", path=ASSIGNEE.format(key="ABC-1"), reason="jira-burst-based")
    clock.advance(59 * 60)
    assert gate.last_hour.totals() == (2, 30.0)
    clock.advance(60)
    assert gate.last_hour.totals() == (0, 0.0)


def test_a_call_the_budget_has_no_slot_for_soon_is_held_back_unsent(mocked):
    clock = ManualClock(NOW)
    held: list[tuple[str, str]] = []
    pacer = Pacer(clock, budget=0.05)  # one call every 20 s
    gate = RateGate(clock, pacer=pacer, on_held=lambda scope, reason: held.append((scope, reason)))
    mocked.get(f"{BASE}/x", json={})
    http = client(clock=clock, gate=gate)
    http.request("GET", "/x")

    with pytest.raises(IntegrationRejected) as caught:
        http.request("GET", "/x")

    assert len(mocked.calls) == 1 and "budget" in caught.value.message
    assert fault_of(caught.value).kind is FaultKind.HELD
    assert held == [("budget", "budget")]


def test_under_a_budget_a_notification_takes_the_next_slot_before_an_ordinary_call_waiting():
    clock = ManualClock(NOW)
    pacer = Pacer(clock, budget=1)
    take_all(pacer, clock, 1)  # this second's one call is made

    ordinary = pacer.take(max_wait=10, first=False)
    notification = pacer.take(max_wait=10, first=True)

    assert ordinary == Slot(1.0, taken=False)  # nothing held: it looks again in a second
    assert notification == Slot(1.0)  # holds that next slot
    clock.advance(1.0)
    assert pacer.take(max_wait=10, first=False) == Slot(1.0, taken=False)  # after it
    clock.advance(1.0)
    assert pacer.take(max_wait=10, first=False) == Slot(0.0)


def test_an_ordinary_call_takes_a_free_slot_between_slots_held_ahead():
    clock = ManualClock(NOW)
    pacer = Pacer(clock, budget=3)
    assert [pacer.take(max_wait=10, first=True) for _ in range(4)] == [
        Slot(0.0), Slot(0.0), Slot(0.0), Slot(1.0)]

    clock.advance(1.0)
    # the held slot leaves room for two more in any second: no window ever holds four
    assert pacer.take(max_wait=10, first=False) == Slot(0.0)
    assert pacer.take(max_wait=10, first=False) == Slot(0.0)
    assert pacer.take(max_wait=10, first=False) == Slot(1.0, taken=False)


def test_an_ordinary_call_looks_again_until_a_slot_no_notification_holds_is_free(mocked):
    clock = ManualClock(NOW)
    waits = Waits(clock)
    mocked.get(f"{BASE}/x", json={})
    pacer = Pacer(clock, budget=1)
    http = client(clock=clock, gate=RateGate(clock, pacer=pacer), sleep=waits)
    http.request("GET", "/x")  # this second's call
    assert pacer.take(max_wait=10, first=True) == Slot(1.0)  # a notification's, held

    http.request("GET", "/x")  # an ordinary call: it goes after the notification's

    # it looked, held nothing, and went when no slot was held: after the notification's
    assert waits == [2.0] and clock.now() == NOW + timedelta(seconds=2)
    with calls_first():  # a notification's call holds the first free slot at once
        http.request("GET", "/x")
    assert waits == [2.0, 1.0] and len(mocked.calls) == 3
