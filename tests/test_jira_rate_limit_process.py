"""Jira rate-limits a real ``ticket-dispatcher serve`` process for 20 s, and a missing issue.

A real process (tests/process.py) runs ``assign`` dispatches, round robin over three engineers,
against the independent fake Jira of tests/peer.py, served over real HTTP. The fake here
(``RateLimitedJira``) answers every call 429 with ``Retry-After`` for ``LIMITED_SECONDS`` of
wall time from the moment the test switches the limit on, then answers normally; it records
when each call arrived and when it was answered.

- Three executions have their PUT assignee in flight (held at the fake) when the limit starts:
  each is answered 429, so the assign action's write is put off and tried again. The other
  triggers are posted while the limit holds: their issue loads are answered 429, so each
  trigger goes back to pending and is tried again. Every issue ends assigned exactly once, no
  trigger or execution fails, a trigger shows its retries with the 429, the time spent
  rate-limited is a metric, and the process made no Jira call while a ``Retry-After`` it was
  given still ran (from the fake's timestamps).
- A 404 (the issue does not exist) fails the trigger at once, with no retry.

The rate-limit scenario is real time (the 20 s of 429s); everything else waits for states by
polling (``wait_until``), never for fixed times. Both run on each engine (``db_url``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests import process
from tests.peer import Call, FakeJira, Route
from tests.process import wait_until

PROJECT = "RATE"
ENGINEERS = {"alice@example.com": "acc-alice", "bob@example.com": "acc-bob",
             "carol@example.com": "acc-carol"}
ISSUES = [f"{PROJECT}-{number}" for number in range(1, 11)]
IN_FLIGHT = ISSUES[:3]  # their PUT assignee is sent before the limit starts, answered after
LIMITED_SECONDS = 20.0  # how long the fake answers 429 once the limit is switched on
RETRY_AFTER = 5  # seconds, in every 429; under the client's own wait (max_retry_wait, 10 s)
# A call that arrived this soon after a 429 was answered had left before the process read
# that 429 (concurrent calls); one that arrived this little before the wait ran out is one
# the two clocks disagree on. Anything between broke the Retry-After.
SENT_ALREADY = 0.25
CLOCKS = 0.2
SETTINGS = {
    # A trigger put off for the 429s is due again after its backoff and picked up by the next
    # poll: a poll every second, not every 5 s, keeps the test short.
    "TRIGGER_POLL_INTERVAL": "1s",
}
RATE_LIMITED_METRIC = "ticket_manager_dispatch_integration_rate_limited_seconds_total"
RETRIES_METRIC = "ticket_manager_dispatch_transient_retries_total"


@dataclass
class Arrival:
    """One request at the fake: when it arrived and when it was answered (monotonic)."""

    method: str
    path: str
    arrived: float
    answered: float | None = None
    status: int | None = None


class RateLimitedJira(FakeJira):
    """The fake Jira, answering every call 429 with ``Retry-After`` while a rate limit set by
    ``rate_limit`` holds. The limit is checked when the fake handles a call: after any gate
    (``hold``) it waited at, so a call held from before the limit and released during it is
    answered 429 too. ``arrivals`` records every request with its times."""

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._limited_until: float | None = None
        self._retry_after = 0
        self._arrivals: list[Arrival] = []

    def rate_limit(self, seconds: float, retry_after: int) -> float:
        """429 for every call from now for ``seconds``; the monotonic time it ends."""
        with self._condition:
            self._limited_until = time.monotonic() + seconds
            self._retry_after = retry_after
            return self._limited_until

    def arrivals(self) -> list[Arrival]:
        with self._condition:
            return [Arrival(a.method, a.path, a.arrived, a.answered, a.status)
                    for a in self._arrivals]

    def _limited(self) -> bool:
        with self._condition:
            return self._limited_until is not None and time.monotonic() < self._limited_until

    def apply_then_503(self, route: Route) -> None:
        """The next call of ``route`` is applied, then answered 503 with ``Retry-After: 1``:
        a write that took effect though its answer says otherwise."""
        with self._condition:
            self._applied_then_503 = route

    def _handle(self, call: Call, query: dict[str, list[str]]) -> tuple[int, Any]:
        if self._limited():
            return 429, {"errorMessages": ["Rate limit exceeded."], "errors": {}}
        answer = super()._handle(call, query)
        with self._condition:
            if call.route is not None and call.route is getattr(self, "_applied_then_503", None):
                self._applied_then_503 = None
                return 503, {"errorMessages": ["Service unavailable."], "errors": {}}
        return answer

    def _app(self, environ: dict, start_response: Callable) -> list[bytes]:
        arrival = Arrival(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
                          time.monotonic())
        with self._condition:
            self._arrivals.append(arrival)

        def answer(status: str, headers: list[tuple[str, str]], exc_info: Any = None):
            code = int(status.split()[0])
            if code == 429:
                status = "429 Too Many Requests"
                headers = [*headers, ("Retry-After", str(self._retry_after))]
            elif code == 503:
                headers = [*headers, ("Retry-After", "1")]
            with self._condition:
                arrival.answered, arrival.status = time.monotonic(), code
            return start_response(status, headers, exc_info)

        return super()._app(environ, answer)


def too_early(arrivals: list[Arrival], retry_after: float) -> list[tuple[Arrival, Arrival]]:
    """(429, call) pairs where ``call`` reached Jira while the ``Retry-After`` of that 429
    still ran: later than a call already sent could arrive, earlier than the wait's end."""
    limited = [a for a in arrivals if a.status == 429 and a.answered is not None]
    return [(no, call) for no in limited for call in arrivals
            if no.answered + SENT_ALREADY < call.arrived < no.answered + retry_after - CLOCKS]


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``, in an
    exposition; 0 when there are none."""
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


class Dispatcher(process.Dispatcher):
    """The serve process, configured for an ``assign`` dispatch of the RATE project."""

    def configure_dispatch(self) -> None:
        for email, account_id in ENGINEERS.items():
            self.call("PUT", f"/engineers/{email}", (200, 201),
                      json={"dispatch_enabled": True, "jira_account_id": account_id})
        self.activate(process.round_robin_policy(
            "Assign RATE tickets", "round robin over the RATE squad", PROJECT, ENGINEERS))

    def trigger(self, trigger_id: int) -> dict:
        return self.call("GET", f"/dispatch/triggers/{trigger_id}")

    def metrics(self) -> str:
        response = requests.get(f"{self.url}/metrics", timeout=15)
        assert response.status_code == 200, response.text
        return response.text


@pytest.fixture
def jira() -> Iterator[RateLimitedJira]:
    with RateLimitedJira() as fake:
        for email, account_id in ENGINEERS.items():
            fake.add_user(email, account_id)
        for key in ISSUES:
            fake.add_issue(key)
        yield fake


@pytest.fixture
def dispatcher(db_url, jira) -> Iterator[Dispatcher]:
    """A configured process on the test's database, once per engine."""
    started = process.Processes(Dispatcher)
    try:
        dispatcher = started.start(db_url, jira, **SETTINGS).wait_serving()
        dispatcher.configure_dispatch()
        yield dispatcher
    finally:
        started.stop_all()


def settled(dispatcher: Dispatcher, trigger_ids: list[int]) -> Callable[[], bool]:
    """True once every execution succeeded; raises at the first failed one, or when a
    trigger failed, with what the service says of it."""
    def check() -> bool:
        failed, _ = dispatcher.executions(status="failed")
        assert not failed, f"an execution failed: {failed}\nserver log:\n{dispatcher.log()}"
        if dispatcher.succeeded() < len(trigger_ids):
            return False
        triggers = [dispatcher.trigger(trigger_id) for trigger_id in trigger_ids]
        assert all(t["status"] != "failed" for t in triggers), triggers
        return all(t["status"] == "completed" for t in triggers)

    return check


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_twenty_seconds_of_429s_delay_every_assignment_and_fail_none(dispatcher, jira):
    assignments = jira.hold(Route.ASSIGN)
    trigger_ids = [dispatcher.post_trigger(key)["id"] for key in IN_FLIGHT]
    assert assignments.wait_until_held(len(IN_FLIGHT), timeout=20), dispatcher.log()

    began = time.monotonic()
    jira.rate_limit(LIMITED_SECONDS, RETRY_AFTER)
    assignments.release()  # the held PUTs are answered 429 now
    trigger_ids += [dispatcher.post_trigger(key)["id"] for key in ISSUES[len(IN_FLIGHT):]]
    wait_until(settled(dispatcher, trigger_ids), LIMITED_SECONDS + 40,
               "every trigger completed and every execution succeeded")
    took = time.monotonic() - began

    # Every issue assigned once, to the engineer its execution chose, round robin.
    chosen, writes = {}, {}
    for key in ISSUES:
        execution = dispatcher.execution_of(key)
        assert execution is not None and execution["status"] == "succeeded", execution
        [action] = [a for r in execution["rule_executions"] for a in r["action_executions"]]
        chosen[key], writes[key] = action["context"]["assign"]["assignee"], action
        assert jira.assignee(key) == ENGINEERS[chosen[key]], (key, chosen[key])
        accepted = [c for c in jira.calls(Route.ASSIGN, key) if c.applied]
        assert len(accepted) == 1 and accepted[0].status == 204, jira.calls(Route.ASSIGN, key)
    assert sorted(list(chosen.values()).count(e) for e in ENGINEERS) == [3, 3, 4], chosen
    assert took >= LIMITED_SECONDS  # nothing could be assigned while every call was a 429

    # The writes in flight were answered 429, and put off: tried again, not failed.
    for key in IN_FLIGHT:
        assert jira.calls(Route.ASSIGN, key)[0].status == 429, jira.calls(Route.ASSIGN, key)
        assign = writes[key]["context"]["assign"]
        assert assign.get("retries", 0) >= 1 and "429" in assign.get("retry_reason", ""), \
            writes[key]
    # A trigger posted under the limit had its load refused 429 and was retried, unless its
    # load waited in line behind the rate gate (at most the client's own 10 s) until the
    # limit ended; none failed, and none waits any more.
    triggers = [dispatcher.trigger(trigger_id) for trigger_id in trigger_ids]
    retried = []
    for trigger in triggers:
        retries = trigger["retries"]
        assert trigger["failure_reason"] == "" and retries["next_at"] is None, trigger
        if trigger["input"]["issue_key"] in IN_FLIGHT:  # loaded before the limit
            assert retries["count"] == 0, trigger
        elif retries["count"]:
            assert "429" in retries["last_reason"], trigger
            retried.append(trigger["input"]["issue_key"])
    assert retried, triggers

    # No call reached Jira while a Retry-After it was answered still ran.
    early = too_early(jira.arrivals(), RETRY_AFTER)
    assert not early, [(f"429 answered at {no.answered - began:.3f} s",
                        f"{call.method} {call.path} arrived at {call.arrived - began:.3f} s")
                       for no, call in early[:10]]

    exposition = dispatcher.metrics()
    assert metric(exposition, RATE_LIMITED_METRIC, client="jira") >= RETRY_AFTER
    assert metric(exposition, RETRIES_METRIC, work="trigger", cause="rate_limited") \
        == sum(t["retries"]["count"] for t in triggers)
    assert dispatcher.log_problems() == []


def test_an_assignment_applied_though_answered_503_is_read_again_and_never_repeated(
        dispatcher, jira):
    """The 503 carries a short Retry-After, which a read would simply wait out and repeat;
    the PUT may have been applied (here it was), so the issue is read first and the PUT is
    not sent again."""
    key = ISSUES[0]
    jira.apply_then_503(Route.ASSIGN)

    trigger_id = dispatcher.post_trigger(key)["id"]
    wait_until(settled(dispatcher, [trigger_id]), 60, "the assignment succeeded")

    puts = jira.calls(Route.ASSIGN, key)
    assert [c.status for c in puts] == [503], puts
    execution = dispatcher.execution_of(key)
    [action] = [a for r in execution["rule_executions"] for a in r["action_executions"]]
    assert jira.assignee(key) == ENGINEERS[action["context"]["assign"]["assignee"]]
    assert [c.route for c in jira.calls() if c.key == key].count(Route.GET_ISSUE) == 2


def test_a_missing_issue_fails_its_trigger_at_once(dispatcher, jira):
    missing = f"{PROJECT}-404"
    trigger_id = dispatcher.post_trigger(missing)["id"]

    def ended() -> dict | None:
        trigger = dispatcher.trigger(trigger_id)
        return trigger if trigger["status"] in ("completed", "failed") else None

    trigger = wait_until(ended, 15, f"the trigger of {missing} ends")

    assert trigger["status"] == "failed", trigger
    assert "404" in trigger["failure_reason"], trigger
    assert trigger["retries"] == {"count": 0, "last_reason": "", "since": None,
                                  "next_at": None}, trigger
    assert trigger["output"]["execution_ids"] == []
    assert [c.status for c in jira.calls(Route.GET_ISSUE, missing)] == [404]
    assert dispatcher.executions(issue_key=missing)[1] == 0
    assert metric(dispatcher.metrics(), RETRIES_METRIC) == 0

