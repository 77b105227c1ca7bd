"""The call policy: what a call is tried again after inside itself, how long a Retry-After is
waited, and the rate gate shared by a service's clients."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.clocks import ManualClock
from tests.integrations.http_clients import BASE, Waits, client
from ticket_dispatcher.errors import FaultKind, fault_of
from ticket_dispatcher.integrations.call_policy import RateGate, retry_after
from ticket_dispatcher.integrations.http import IntegrationRejected

NOW = datetime(2026, 11, 30, 1, 0, 0, tzinfo=UTC)


def test_429_with_retry_after_is_retried_after_that_wait(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=429, headers={"Retry-After": "2"})
    mocked.get(f"{BASE}/x", json={"ok": True})

    answer = client(sleep=waits).request_json("GET", "/x")

    assert answer == {"ok": True}
    assert waits == [2.0]
    assert len(mocked.calls) == 2


def test_503_with_http_date_retry_after_waits_until_that_date(mocked):
    waits = Waits()
    clock = ManualClock(datetime(2026, 11, 30, 1, 0, 0, tzinfo=UTC))
    mocked.get(f"{BASE}/x", status=503, headers={"Retry-After": "Mon, 30 Nov 2026 01:00:04 GMT"})
    mocked.get(f"{BASE}/x")

    client(sleep=waits, clock=clock).request("GET", "/x")

    assert waits == [4.0]


def test_429_with_too_long_retry_after_fails_fast(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=429, headers={"Retry-After": "60"},
               json={"code": 99991400, "msg": "request trigger frequency limit"})

    with pytest.raises(IntegrationRejected) as caught:
        client(sleep=waits, max_retry_wait=10).request("GET", "/x")

    assert caught.value.status == 429
    assert waits == []
    assert len(mocked.calls) == 1


def test_429_without_retry_after_is_not_retried(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=429)

    with pytest.raises(IntegrationRejected):
        client(sleep=waits).request("GET", "/x")

    assert waits == [] and len(mocked.calls) == 1


def test_retries_are_bounded(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=503, headers={"Retry-After": "1"})

    with pytest.raises(IntegrationRejected) as caught:
        client(sleep=waits, max_retries=2).request("GET", "/x")

    assert caught.value.status == 503
    assert waits == [1.0, 1.0]
    assert len(mocked.calls) == 3


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE"])
def test_a_write_answered_503_goes_back_to_its_caller_unrepeated(mocked, method):
    """A 503 may come after the service acted: the caller reads before it writes again."""
    waits = Waits()
    mocked.add(method, f"{BASE}/x", status=503, headers={"Retry-After": "1"})

    with pytest.raises(IntegrationRejected) as caught:
        client(sleep=waits).request(method, "/x", json={}, expected=(204,))

    assert (caught.value.status, caught.value.retry_after) == (503, 1.0)
    assert waits == [] and len(mocked.calls) == 1


def test_a_read_sent_as_post_is_repeated_after_a_503_when_it_says_so(mocked):
    waits = Waits()
    mocked.post(f"{BASE}/search", status=503, headers={"Retry-After": "1"})
    mocked.post(f"{BASE}/search", json={"issues": []})

    answer = client(sleep=waits).request_json("POST", "/search", json={}, repeatable=True)

    assert answer == {"issues": []} and waits == [1.0]


def test_a_write_answered_429_is_repeated_after_the_wait(mocked):
    """A rate limit refuses the request: nothing was applied, so it is sent again."""
    waits = Waits()
    mocked.put(f"{BASE}/x", status=429, headers={"Retry-After": "2"})
    mocked.put(f"{BASE}/x", status=204)

    client(sleep=waits).request("PUT", "/x", json={}, expected=(204,))

    assert waits == [2.0] and len(mocked.calls) == 2


@pytest.mark.parametrize("given, taken", [
    ("999999", 600.0), ("1e12", None), ("inf", None), ("nan", None), ("-5", None),
    ("1.5", 1.5), ("0", 0.0), ("9" * 400, 600.0), ("Fri, 31 Dec 9999 23:59:59 GMT", 600.0),
    ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0), ("soon", None),
])
def test_retry_after_is_seconds_or_a_date_and_never_more_than_ten_minutes(mocked, given, taken):
    mocked.get(f"{BASE}/x", status=429, headers={"Retry-After": given})

    with pytest.raises(IntegrationRejected) as caught:
        client(max_retries=0).request("GET", "/x")

    assert caught.value.retry_after == taken


def test_500_is_not_retried(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=500, headers={"Retry-After": "1"})

    with pytest.raises(IntegrationRejected):
        client(sleep=waits).request("GET", "/x")

    assert waits == [] and len(mocked.calls) == 1


@pytest.mark.parametrize("given, taken", [
    (None, None), ("", None), ("  7 ", 7.0), ("Mon, 30 Nov 2026 01:00:04 GMT", 4.0),
    ("Mon, 30 Nov 2026 00:59:00 GMT", 0.0),
])
def test_retry_after_is_read_against_the_clock(given, taken):
    assert retry_after(given, NOW) == taken


def test_a_429_closes_the_gate_and_holds_back_another_client_unsent(mocked):
    clock = ManualClock(NOW)
    limited: list[float] = []
    gate = RateGate(clock, limited.append)
    mocked.get(f"{BASE}/x", status=429, headers={"Retry-After": "30"})

    with pytest.raises(IntegrationRejected) as answered:  # longer than the client waits
        client(clock=clock, gate=gate).request("GET", "/x")
    clock.advance(5)
    with pytest.raises(IntegrationRejected) as held:
        client(clock=clock, gate=gate).request("PUT", "/y", json={}, expected=(204,))

    assert len(mocked.calls) == 1  # the second call never left
    assert (answered.value.status, answered.value.retry_after) == (429, 30.0)
    assert "not sent" in held.value.message
    assert (held.value.status, held.value.retry_after) == (429, 25.0)
    assert fault_of(held.value).kind is FaultKind.HELD
    assert limited == [30.0]


def test_a_short_hold_is_waited_out_before_the_call_goes(mocked):
    clock = ManualClock(NOW)
    gate = RateGate(clock)
    gate.limit(3)
    waits = Waits(clock)
    mocked.get(f"{BASE}/x", json={"ok": True})

    answer = client(clock=clock, gate=gate, sleep=waits).request_json("GET", "/x")

    assert answer == {"ok": True} and waits == [3.0]


def test_the_gate_counts_only_the_time_a_429_adds_to_the_hold():
    clock = ManualClock(NOW)
    limited: list[float] = []
    gate = RateGate(clock, limited.append)

    gate.limit(10)
    gate.limit(4)  # within the hold already: adds nothing
    clock.advance(5)
    gate.limit(8)  # 3 s past the hold's end

    assert limited == [10.0, 3.0]
    assert gate.remaining() == 8.0
