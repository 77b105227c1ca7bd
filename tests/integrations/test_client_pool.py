"""Client actor pools: a call goes to an idle actor or waits in one FIFO
queue, queue time and call time are separate limits, shutdown support, stats; the typed pools
serve the ports of domain/ports.py.

No test sleeps: callers run in threads and are synchronised with Events; every wait is bounded.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from dataclasses import dataclass

import pykka
import pytest

from tests.clocks import ManualClock
from tests.fakes import FakeJira, issue
from tests.integrations.mocking import mock_http
from tests.peer import Answering, serving
from ticket_dispatcher.actors import client_pool
from ticket_dispatcher.actors.call_queue import Call
from ticket_dispatcher.actors.client_pool import ClientActor, ClientPool, call_guard
from ticket_dispatcher.actors.client_ports import (
    CorePool,
    JiraPool,
    LarkPool,
    OncallPool,
    _ask_timeout,
    build_client_pools,
)
from ticket_dispatcher.config import Config, CoreConfig, JiraConfig, LarkConfig, OncallConfig
from ticket_dispatcher.domain.ports import Jira
from ticket_dispatcher.errors import CallAbandoned, IntegrationError, LeaseLost, OutcomeUnknown
from ticket_dispatcher.integrations.http import HttpClient
from ticket_dispatcher.integrations.jira import JiraClient
from ticket_dispatcher.integrations.transport import send_guard
from ticket_dispatcher.metrics import Metrics

WAIT = 5  # seconds: the bound on every wait for something that should happen at once


def limits() -> dict:
    """A pool's limits, and metrics of its own."""
    return {"call_timeout": WAIT, "queue_timeout": WAIT, "metrics": Metrics()}


class Log:
    """What the clients of one pool were asked to do, in order, whichever actor ran it."""

    def __init__(self):
        self.entries: list[str] = []
        self._lock = threading.Lock()
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}

    def add(self, tag: str) -> None:
        with self._lock:
            self.entries.append(tag)

    def gate(self, tag: str) -> threading.Event:
        with self._lock:
            self.entered.setdefault(tag, threading.Event())
            return self.gates.setdefault(tag, threading.Event())


class EchoClient:
    """A stand-in client: knows which instance it is; ``hold`` blocks until its gate opens."""

    def __init__(self, number: int, log: Log):
        self.number = number
        self.log = log
        self.closed = False

    def whoami(self) -> int:
        return self.number

    def thread(self) -> threading.Thread:
        return threading.current_thread()

    def add(self, a: int, b: int = 0) -> int:
        return a + b

    def churn(self) -> int:
        return sum(range(2000))  # a little work, so that callers overlap

    def record(self, tag: str) -> str:
        self.log.add(tag)
        return tag

    def hold(self, tag: str) -> str:
        """Logged on entry, then held until the test opens ``tag``'s gate."""
        gate = self.log.gate(tag)
        self.log.add(tag)
        self.log.entered[tag].set()
        gate.wait(WAIT)
        return tag

    def hold_then_send(self, tag: str) -> str:
        """As ``hold``, then writes a request as a connection does: the send guard first (a
        call that waited out a rate limit before it sent)."""
        self.hold(tag)
        guard = send_guard.get()
        if guard is not None:
            guard()
        self.log.add(f"{tag} sent")
        return tag

    def fail(self, message: str) -> None:
        raise IntegrationError(message, status=502, service="echo")

    def crash(self) -> None:
        raise RuntimeError("bug")

    def close(self) -> None:
        self.closed = True


class QueueProbe(deque):
    """Stands in for the pool's wait queue to tell the test when a caller has joined it."""

    def __init__(self):
        super().__init__()
        self.joined = threading.Semaphore(0)

    def append(self, item) -> None:
        super().append(item)
        self.joined.release()

    def wait_joined(self) -> None:
        assert self.joined.acquire(timeout=WAIT), "no caller joined the queue"


class SentProbe(dict):
    """Stands in for the pool's running-calls map to tell the test when a call was sent to an
    actor (the caller then waits for its answer, holding the pool's lock until it does)."""

    def __init__(self):
        super().__init__()
        self.sent = threading.Semaphore(0)
        self.sent_to: list[str] = []  # the actors' URNs, in the order calls were sent

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.sent_to.append(key)
        self.sent.release()

    def wait_sent(self) -> None:
        assert self.sent.acquire(timeout=WAIT), "no call was sent to an actor"


class Caller(threading.Thread):
    """One caller in its own thread; keeps its answer or its exception."""

    def __init__(self, call):
        super().__init__(daemon=True)
        self._call = call
        self.answer = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.answer = self._call()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc

    def result(self):
        self.join(WAIT)
        assert not self.is_alive(), "the caller is still waiting"
        return self.answer, self.error


def start_caller(call) -> Caller:
    caller = Caller(call)
    caller.start()
    return caller


@pytest.fixture
def log() -> Log:
    yield (log := Log())
    for gate in log.gates.values():  # never leave an actor thread held
        gate.set()


@pytest.fixture
def started(log):
    """Start pools through this fixture: each is stopped at teardown, whatever the test did."""
    pools: list[ClientPool] = []

    def start(pool: ClientPool) -> ClientPool:
        pools.append(pool)
        return pool.start()

    yield start
    for gate in log.gates.values():
        gate.set()
    for pool in pools:
        pool.stop(timeout=WAIT)


@pytest.fixture
def echo(log, started):
    """``echo(size, **options)``: a started pool of EchoClients sharing ``log``; the clients
    are in ``pool.made``."""

    def make(size: int = 3, **options) -> ClientPool:
        made: list[EchoClient] = []
        numbers = itertools.count()

        def factory() -> EchoClient:
            made.append(EchoClient(next(numbers), log))
            return made[-1]

        options.setdefault("call_timeout", WAIT)
        options.setdefault("queue_timeout", WAIT)
        options.setdefault("metrics", Metrics())
        pool = started(ClientPool("echo", factory, size, **options))
        pool.made = made
        return pool

    return make


def hold(pool: ClientPool, log: Log, tag: str) -> Caller:
    """A caller whose call runs on one actor and stays there until ``log.gates[tag]`` opens."""
    log.gate(tag)
    caller = start_caller(lambda: pool.call(EchoClient.hold, tag))
    assert log.entered[tag].wait(WAIT)
    return caller


def probe_queue(pool: ClientPool) -> QueueProbe:
    probe = QueueProbe()
    pool._calls._queue = probe
    return probe


# --- used like the client ---------------------------------------------------------------------


def test_a_call_answers_with_the_clients_result(echo):
    pool = echo()

    assert pool.call(EchoClient.add, 2, b=3) == 5


def test_calls_run_in_daemon_actor_threads(echo):
    pool = echo(size=1)

    thread = pool.call(EchoClient.thread)

    assert thread is not threading.current_thread()
    # A read stuck in a socket must never keep the process alive past shutdown.
    assert thread.daemon and ClientActor.use_daemon_thread


def test_client_exception_reaches_the_caller_and_the_actor_lives_on(echo):
    pool = echo(size=1)

    with pytest.raises(IntegrationError) as caught:
        pool.call(EchoClient.fail, "jira said no")

    assert (caught.value.message, caught.value.status) == ("jira said no", 502)
    assert pool.call(EchoClient.add, 1) == 1


def test_a_call_whose_caller_guard_fails_when_it_would_begin_is_never_made(echo, log):
    """A lease that runs out while the call waits for an actor (a paused process): the client
    actor checks the caller's guard just before it sends, and the call is not made."""
    pool = echo(size=1)
    busy = hold(pool, log, "first")
    queue = probe_queue(pool)
    lease = {"valid": True}

    def guard() -> None:
        if not lease["valid"]:
            raise LeaseLost("the lease ran out")

    def guarded_call() -> str:  # in the caller's thread, as the execution actor sets it
        token = call_guard.set(guard)
        try:
            return pool.call(EchoClient.record, "second")
        finally:
            call_guard.reset(token)

    waiting = start_caller(guarded_call)
    queue.wait_joined()
    lease["valid"] = False  # while "second" waits behind "first"
    log.gates["first"].set()
    busy.result()

    assert isinstance(waiting.result()[1], LeaseLost)
    assert log.entries == ["first"]  # "second" never reached the client
    assert pool.call(EchoClient.record, "third") == "third"  # no guard: the pool goes on


@pytest.fixture
def busy():
    """A peer that answers every request 503 with ``Retry-After: 1``."""
    app = Answering("503 Service Unavailable", [("Retry-After", "1")])
    with serving(app, "busy") as app.url:
        yield app


class _Fetcher:
    """A client making one HTTP request per call, each retried after a 503."""

    def __init__(self, url: str):
        self.http = HttpClient("svc", url, connect_timeout=1, read_timeout=2,
                               sleep=lambda _: None)

    def fetch(self) -> dict:
        return self.http.request_json("GET", "/thing")


def test_a_request_checks_the_callers_guard_again_right_before_it_leaves(started, busy):
    """The guard held when the call began, then the lease ran out (a pause, a Retry-After
    wait) before a request left: that request is not sent, and the caller gets the refusal."""
    pool = started(ClientPool("svc", lambda: _Fetcher(busy.url), 1, **limits()))
    checks = []

    def guard() -> None:  # holds for the call's start and its first request only
        checks.append(len(checks))
        if len(checks) > 2:
            raise LeaseLost("the lease ran out")

    token = call_guard.set(guard)
    try:
        with pytest.raises(LeaseLost):
            pool.call(_Fetcher.fetch)
    finally:
        call_guard.reset(token)

    assert busy.paths == ["/thing"]  # the first request; its retry never left
    assert checks == [0, 1, 2]  # at the call's start, before the request, before the retry


class Unrelated:
    """No client of the echo pool has its method."""

    def no_such_method(self) -> None:
        raise AssertionError("never run: a call runs the client's own method of its name")


def test_a_pool_routes_no_client_method_by_attribute(echo):
    pool = echo(size=1)

    assert not hasattr(pool, "whoami")  # only the typed pools name methods, each written out
    assert not hasattr(pool, "close")  # the actors close their clients as they stop
    with pytest.raises(AttributeError):
        pool.call(Unrelated.no_such_method)


def test_pool_needs_at_least_one_actor(log):
    with pytest.raises(ValueError):
        ClientPool("echo", lambda: EchoClient(0, log), 0, **limits())


def test_a_call_before_start_is_refused(log):
    pool = ClientPool("echo", lambda: EchoClient(0, log), 1, **limits())

    with pytest.raises(IntegrationError, match="not started"):
        pool.call(EchoClient.add, 1)


# --- no head-of-line blocking ----------------------------------------------------------------


def test_one_stuck_call_holds_only_its_own_caller(echo, log):
    pool = echo(size=3)
    stuck = hold(pool, log, "stuck")

    # Round-robin would put every third of these behind the stuck call.
    answers = [pool.call(EchoClient.add, n) for n in range(12)]

    assert answers == list(range(12))
    assert stuck.is_alive() and pool.stats()["busy"] == 1
    assert pool.stats()["queue_length"] == 0
    log.gates["stuck"].set()
    assert stuck.result() == ("stuck", None)


def test_concurrent_callers_each_get_an_idle_actor(echo, log):
    pool = echo(size=3)
    first, second = hold(pool, log, "a"), hold(pool, log, "b")

    # A third concurrent hold gets the last idle actor at once instead of queueing.
    third = hold(pool, log, "c")

    assert pool.stats()["busy"] == 3
    for tag in "abc":
        log.gates[tag].set()
    assert [c.result() for c in (first, second, third)] == [
        ("a", None), ("b", None), ("c", None)]


def test_queued_callers_are_served_in_fifo_order(echo, log):
    pool = echo(size=1)
    held = hold(pool, log, "held")
    probe = probe_queue(pool)
    callers = []
    for tag in ("c1", "c2", "c3", "c4"):
        callers.append(start_caller(lambda tag=tag: pool.call(EchoClient.record, tag)))
        probe.wait_joined()  # each caller is queued before the next one arrives

    assert pool.stats()["queue_length"] == 4
    log.gates["held"].set()

    assert [c.result() for c in callers] == [(t, None) for t in ("c1", "c2", "c3", "c4")]
    assert held.result() == ("held", None)
    assert log.entries == ["held", "c1", "c2", "c3", "c4"]


# --- queue time and call time ------------------------------------------------------------------


def test_a_caller_that_gives_up_while_queued_never_makes_its_call(echo, log):
    pool = echo(size=1, queue_timeout=0.05)
    held = hold(pool, log, "held")

    with pytest.raises(IntegrationError) as caught:
        pool.call(EchoClient.record, "late")

    assert not isinstance(caught.value, OutcomeUnknown)
    assert caught.value.service == "echo"
    assert "no free client within 0.05 s; the call was not made" in caught.value.message
    log.gates["held"].set()
    assert held.result() == ("held", None)
    # The actor serves calls in order, so "late" would have run before this one.
    assert pool.call(EchoClient.record, "after") == "after"
    assert log.entries == ["held", "after"]
    stats = pool.stats()
    assert (stats["gave_up_queued"], stats["queue_length"], stats["calls"]) == (1, 0, 2)


def test_a_jira_call_given_up_while_queued_never_reaches_jira(started):
    base = "https://j.example"
    pool = started(JiraPool("jira", lambda: JiraClient(JiraConfig(base_url=base)), 1,
                            call_timeout=WAIT, queue_timeout=0.05, metrics=Metrics()))
    entered, release = threading.Event(), threading.Event()

    def slow_issue(request):
        entered.set()
        release.wait(WAIT)
        return 200, {}, ('{"key": "TCID-1", "fields": {"project": {"key": "TCID"}, '
                           '"summary": "s"}}')

    with mock_http() as mocked:
        mocked.add_callback("GET", f"{base}/rest/api/2/issue/TCID-1", callback=slow_issue)
        loading = start_caller(lambda: pool.load_issue("TCID-1"))
        assert entered.wait(WAIT)

        with pytest.raises(IntegrationError, match="the call was not made"):
            pool.assign("TCID-2", "acc-a")

        release.set()
        issue, error = loading.result()
        assert error is None and issue.key == "TCID-1"
        pool.stop(timeout=WAIT)  # the actor is done with everything it was ever sent

        assert [(c.request.method, c.request.url.split("?")[0]) for c in mocked.calls] == [
            ("GET", f"{base}/rest/api/2/issue/TCID-1")]


def test_a_started_call_past_call_timeout_is_an_unknown_outcome(echo, log):
    pool = echo(size=1, call_timeout=0.05)
    log.gate("slow")

    with pytest.raises(OutcomeUnknown) as caught:
        pool.call(EchoClient.hold, "slow")

    assert isinstance(caught.value, IntegrationError) and caught.value.service == "echo"
    assert "may take effect" in caught.value.message
    stats = pool.stats()
    assert (stats["unknown_outcomes"], stats["busy"], stats["in_flight"]) == (1, 1, 0)

    # The actor is still running "slow": it is not handed out until that call really ends.
    probe = probe_queue(pool)
    following = start_caller(lambda: pool.call(EchoClient.record, "next"))
    probe.wait_joined()
    assert log.entries == ["slow"]
    log.gates["slow"].set()

    assert following.result() == ("next", None)
    assert log.entries == ["slow", "next"]
    assert pool.stats()["busy"] == 0


def test_call_timeout_counts_only_call_time_not_queue_time(echo, log):
    pool = echo(size=1, call_timeout=0.2)
    held = hold(pool, log, "held")
    probe = probe_queue(pool)
    queued = start_caller(lambda: pool.call(EchoClient.hold, "second"))
    probe.wait_joined()
    log.gate("second").set()  # the second call answers at once when it runs

    # The held caller gives up after call_timeout; the second has been queued at least as long.
    assert isinstance(held.result()[1], OutcomeUnknown)
    log.gates["held"].set()

    assert queued.result() == ("second", None)


# --- shutdown support -------------------------------------------------------------------------


def test_abandon_wakes_queued_and_running_callers_and_refuses_new_calls(echo, log):
    pool = echo(size=1, call_timeout=60, queue_timeout=60)
    running = hold(pool, log, "running")
    probe = probe_queue(pool)
    queued = start_caller(lambda: pool.call(EchoClient.record, "queued"))
    probe.wait_joined()

    pool.abandon()

    # Both wake now, long before either 60 s limit (Caller.result waits at most 5 s).
    for caller in (running, queued):
        answer, error = caller.result()
        assert isinstance(error, CallAbandoned) and answer is None
    with pytest.raises(CallAbandoned):
        pool.call(EchoClient.record, "new")
    log.gates["running"].set()
    pool.stop(timeout=WAIT)  # the running call ends, then the actor stops
    assert log.entries == ["running"]  # neither the queued nor the new call ever ran
    assert pool.stats()["abandoned"] is True


def test_a_running_call_that_has_not_sent_yet_when_abandoned_sends_nothing(echo, log):
    pool = echo(size=1, call_timeout=60, queue_timeout=60)
    log.gate("waiting")
    caller = start_caller(lambda: pool.call(EchoClient.hold_then_send, "waiting"))
    assert log.entered["waiting"].wait(WAIT)

    pool.abandon()
    log.gates["waiting"].set()  # its wait (a rate limit's, say) ends during the shutdown
    pool.stop(timeout=WAIT)

    assert isinstance(caller.result()[1], CallAbandoned)
    assert log.entries == ["waiting"]  # never "waiting sent"


@dataclass(frozen=True)
class Direct:
    """Asked of one client actor behind its pool's back: run ``client.<method>(*args)``."""

    method: str
    args: tuple = ()


class DirectlyAskable(ClientActor):
    """A ClientActor that also answers a ``Direct`` ask, which its pool never sends."""

    def on_receive(self, message):
        if isinstance(message, Direct):
            return getattr(self._client, message.method)(*message.args)
        return super().on_receive(message)


@pytest.fixture
def askable(monkeypatch):
    """The pools started from here on run ``DirectlyAskable`` actors."""
    monkeypatch.setattr(client_pool, "ClientActor", DirectlyAskable)


def occupy_behind_the_pools_back(pool: ClientPool, log: Log, tag: str) -> pykka.ActorRef:
    """Keep the actor the pool will hand out next busy with a direct ask, so that the next
    pooled call waits in that actor's inbox: sent, but not begun. The pool hands out the
    right end of its idle actors (the last freed), so that is the one held."""
    actor = pool._calls._idle[-1]
    log.gate(tag)
    actor.ask(Direct("hold", (tag,)), block=False)
    assert log.entered[tag].wait(WAIT)
    return actor


def test_a_call_sent_but_not_begun_when_abandoned_never_begins(askable, echo, log):
    pool = echo(size=1)
    occupy_behind_the_pools_back(pool, log, "direct")
    pool._calls._running = probe = SentProbe()
    caller = start_caller(lambda: pool.call(EchoClient.record, "sent"))
    probe.wait_sent()
    assert pool.stats()["in_flight"] == 1

    pool.abandon()

    _, error = caller.result()
    assert isinstance(error, CallAbandoned) and "the call was not made" in str(error)
    log.gates["direct"].set()
    pool.stop(timeout=WAIT)  # the actor takes its job from the inbox, skips it, stops
    assert log.entries == ["direct"]
    assert pool.stats()["calls"] == 0


def test_a_call_behind_a_stop_from_outside_goes_to_another_actor(askable, echo, log):
    pool = echo(size=2)
    doomed = occupy_behind_the_pools_back(pool, log, "direct")
    [other] = [actor for actor in pool._calls._workers if actor != doomed]
    stopping = doomed.stop(block=False)  # queued behind "direct": the pool does not know yet

    pool._calls._running = probe = SentProbe()
    caller = start_caller(lambda: pool.call(EchoClient.record, "moved"))
    probe.wait_sent()
    assert probe.sent_to == [doomed.actor_urn]  # to the doomed actor, behind its stop
    log.gates["direct"].set()

    # The doomed actor stops without running the call; as it stops it hands the call back,
    # and the pool sends it to the other actor, which runs it.
    assert caller.result() == ("moved", None)
    assert probe.sent_to == [doomed.actor_urn, other.actor_urn]
    assert stopping.get(timeout=WAIT) is True
    assert log.entries == ["direct", "moved"]
    assert pool.stats()["actors"] == 1 and doomed not in pool._calls._workers
    assert pool.stats()["calls"] == 1


def test_abandoned_is_not_a_business_error():
    assert not issubclass(CallAbandoned, IntegrationError)


def test_stop_without_blocking_returns_futures_while_a_call_runs(echo, log):
    pool = echo(size=2)
    running = hold(pool, log, "running")
    busy = [ref.actor_urn for ref in pool._calls._workers].index(
        next(iter(pool._calls._running)))

    futures = pool.stop(block=False)  # returns at once although one actor is busy

    assert len(futures) == 2
    assert futures[1 - busy].get(timeout=WAIT) is True  # the idle one stops now
    with pytest.raises(pykka.Timeout):
        futures[busy].get(timeout=0.01)  # the busy one only after its call
    log.gates["running"].set()
    assert pykka.get_all(futures, timeout=WAIT) == [True, True]
    assert running.result() == ("running", None)  # a stop lets the running call finish
    assert all(client.closed for client in pool.made)
    assert pool.stats()["actors"] == 0


def test_stop_refuses_queued_and_later_calls_without_making_them(echo, log):
    pool = echo(size=1)
    held = hold(pool, log, "held")
    probe = probe_queue(pool)
    queued = start_caller(lambda: pool.call(EchoClient.record, "queued"))
    probe.wait_joined()

    futures = pool.stop(block=False)

    _, error = queued.result()
    assert isinstance(error, IntegrationError) and "not made" in error.message
    with pytest.raises(IntegrationError, match="stopped"):
        pool.call(EchoClient.record, "later")
    log.gates["held"].set()
    pykka.get_all(futures, timeout=WAIT)
    assert held.result() == ("held", None)
    assert log.entries == ["held"]


def test_blocking_stop_stops_every_actor_and_closes_its_client(echo):
    pool = echo(size=2)
    refs = list(pool._calls._workers)

    assert pool.stop(timeout=WAIT) is None

    assert not any(ref.is_alive() for ref in refs)
    assert all(client.closed for client in pool.made)
    assert pool.stats()["actors"] == 0


def test_an_actor_stopped_from_outside_leaves_the_pool(echo):
    pool = echo(size=2)
    pool._calls._workers[0].stop(timeout=WAIT)

    assert [pool.call(EchoClient.add, n) for n in range(4)] == [0, 1, 2, 3]
    assert pool.stats()["actors"] == 1

    pool._calls._workers[0].stop(timeout=WAIT)
    with pytest.raises(IntegrationError, match="stopped"):
        pool.call(EchoClient.add, 1)


# --- no actor leaks out of the pool -----------------------------------------------------------


def test_no_actor_leaks_when_callers_give_up_at_the_moment_of_a_hand_off(echo, log):
    # A queue wait so short that callers give up while actors are being handed to them.
    pool = echo(size=3, queue_timeout=0.00001)
    refusals: list[str] = []

    def churn_30_times() -> None:
        for _ in range(30):
            try:
                pool.call(EchoClient.churn)
            except IntegrationError as exc:
                refusals.append(exc.message)

    callers = [start_caller(churn_30_times) for _ in range(12)]
    assert [caller.result()[1] for caller in callers] == [None] * 12
    assert all("the call was not made" in message for message in refusals)

    stats = pool.stats()
    assert (stats["busy"], stats["queue_length"], stats["in_flight"]) == (0, 0, 0)
    assert stats["calls"] + stats["gave_up_queued"] == 12 * 30  # each ran, or never started
    # All three actors are back: three calls can be held at the same time.
    pool._calls.queue_timeout = WAIT
    held = [hold(pool, log, tag) for tag in ("x", "y", "z")]
    assert pool.stats()["busy"] == 3
    for tag in ("x", "y", "z"):
        log.gates[tag].set()
    assert [c.result()[1] for c in held] == [None, None, None]


# --- stats for /admin/actors -------------------------------------------------------------------


def test_calls_and_errors_are_counted_by_exception(echo):
    pool = echo(size=2)

    pool.call(EchoClient.add, 1)
    for call in (lambda: pool.call(EchoClient.fail, "x"),
                 lambda: pool.call(EchoClient.fail, "y"), lambda: pool.call(EchoClient.crash)):
        with pytest.raises((IntegrationError, RuntimeError)):
            call()

    stats = pool.stats()
    assert stats["actors"] == 2
    assert stats["calls"] == 4
    assert stats["errors"] == {"IntegrationError": 2, "RuntimeError": 1}
    assert stats["in_flight"] == 0 and stats["busy"] == 0
    assert 0 <= stats["last_latency_ms"] <= stats["max_latency_ms"]
    assert 0 <= stats["mean_latency_ms"] <= stats["max_latency_ms"]


def test_stats_show_the_queue_the_longest_wait_and_in_flight_calls(echo, log):
    pool = echo(size=1)
    empty = pool.stats()
    assert (empty["queue_length"], empty["longest_wait_seconds"]) == (0, 0)
    assert empty["last_latency_ms"] is None and empty["mean_latency_ms"] is None
    held = hold(pool, log, "held")
    probe = probe_queue(pool)
    queued = start_caller(lambda: pool.call(EchoClient.record, "queued"))
    probe.wait_joined()

    stats = pool.stats()

    assert (stats["actors"], stats["busy"], stats["in_flight"], stats["queue_length"]) == (
        1, 1, 1, 1)
    assert stats["longest_wait_seconds"] >= 0
    assert set(stats) >= {"actors", "busy", "queue_length", "longest_wait_seconds", "calls",
                          "errors", "in_flight", "last_latency_ms", "mean_latency_ms",
                          "max_latency_ms", "gave_up_queued", "unknown_outcomes"}
    log.gates["held"].set()
    assert queued.result() == ("queued", None) and held.result() == ("held", None)
    after = pool.stats()
    assert (after["queue_length"], after["longest_wait_seconds"], after["calls"]) == (0, 0, 2)


def test_longest_wait_is_the_oldest_queued_callers_wait(echo, log):
    pool = echo(size=1)
    held = hold(pool, log, "held")
    probe = probe_queue(pool)
    queued = start_caller(lambda: pool.call(EchoClient.record, "queued"))
    probe.wait_joined()
    # The wait is measured on the monotonic clock from the oldest queued caller's arrival.
    probe[0].queued_at -= 7

    assert pool.stats()["longest_wait_seconds"] >= 7
    log.gates["held"].set()
    assert queued.result()[1] is None and held.result()[1] is None


def test_latency_is_call_time_not_queue_time(echo, log):
    pool = echo(size=1)
    held = hold(pool, log, "held")
    probe = probe_queue(pool)
    queued = start_caller(lambda: pool.call(EchoClient.record, "queued"))
    probe.wait_joined()
    probe[0].queued_at -= 60  # as if it had waited a minute for its actor
    log.gates["held"].set()
    assert queued.result()[1] is None and held.result()[1] is None

    assert pool.stats()["last_latency_ms"] < 60_000


# --- build_client_pools -----------------------------------------------------------------------


def config(**sections) -> Config:
    values = dict(jira=JiraConfig(), lark=LarkConfig(base_url=""), oncall=OncallConfig(),
                  core=CoreConfig(), client_pool_size=2)
    values.update(sections)
    return Config(**values)


def test_services_without_base_url_get_no_pool():
    pools = build_client_pools(config(jira=JiraConfig(base_url="https://j.example"),
                                      core=CoreConfig(base_url="https://c.example")),
                               ManualClock(), metrics=Metrics(), start=False)

    assert sorted(pools) == ["core", "jira"]
    assert all(pool.size == 2 for pool in pools.values())


def test_pool_size_defaults_to_one_actor_per_slot_and_trigger_actor():
    pools = build_client_pools(
        config(jira=JiraConfig(base_url="https://j.example"), client_pool_size=0,
               execution_slots=7, trigger_actors=3), ManualClock(), metrics=Metrics(), start=False)

    assert pools["jira"].size == 10


def test_call_and_queue_timeouts_come_from_the_http_timeouts():
    pools = build_client_pools(config(jira=JiraConfig(base_url="https://j.example")),
                               ManualClock(), metrics=Metrics(), start=False)

    expected = _ask_timeout(3, 10)  # the default connect and read timeouts
    assert (pools["jira"].call_timeout, pools["jira"].queue_timeout) == (expected, expected)
    assert expected > 10 + 3


def test_lark_without_an_app_id_gets_no_pool_despite_its_default_url():
    pools = build_client_pools(config(lark=LarkConfig()), ManualClock(), metrics=Metrics(),
                               start=False)

    assert LarkConfig().base_url and "lark" not in pools


def test_every_configured_service_gets_a_started_pool():
    pools = build_client_pools(config(
        jira=JiraConfig(base_url="https://j.example"), lark=LarkConfig(app_id="cli_app"),
        oncall=OncallConfig(base_url="https://o.example"),
        core=CoreConfig(base_url="https://c.example")), ManualClock(), metrics=Metrics())
    try:
        assert sorted(pools) == ["core", "jira", "lark", "oncall"]
        assert {name: type(pool) for name, pool in pools.items()} == {
            "jira": JiraPool, "lark": LarkPool, "oncall": OncallPool, "core": CorePool}
        assert all(pool.stats()["actors"] == 2 for pool in pools.values())
    finally:
        for pool in pools.values():
            pool.stop(timeout=WAIT)


def test_built_jira_pool_loads_an_issue_through_its_actor():
    jira_config = JiraConfig(base_url="https://j.example", email="bot@example.com",
                             api_token="tok")
    pools = build_client_pools(config(jira=jira_config), ManualClock(), metrics=Metrics())
    try:
        with mock_http() as mocked:
            mocked.get("https://j.example/rest/api/2/issue/TCID-1", json={
                "key": "TCID-1", "fields": {"project": {"key": "TCID"}, "summary": "s"}})

            issue = pools["jira"].load_issue("TCID-1")

        assert (issue.key, issue.project_key) == ("TCID-1", "TCID")
        assert pools["jira"].stats()["calls"] == 1
    finally:
        for pool in pools.values():
            pool.stop(timeout=WAIT)


def test_a_jira_pool_exposes_exactly_the_jira_protocols_methods():
    protocol = {name for name in dir(Jira) if not name.startswith("_")}
    own = {name for name in dir(JiraPool) if not name.startswith("_")} - set(dir(ClientPool))

    assert own == protocol == {"load_issue", "assign", "assign_and_label", "set_l2_assignee",
                               "edit_labels",
                               "apply_triage", "find_user_by_email", "add_internal_comment",
                               "count_issues", "find_users_by_email", "load_issues"}


def test_a_typed_pool_method_runs_the_same_named_client_method(started):
    jira = FakeJira(issue())
    jira.add_user("alice@example.com", "acc-a")
    pool = started(JiraPool("jira", lambda: jira, 1, **limits()))

    pool.assign("TCID-1", "acc-a")
    pool.edit_labels("TCID-1", remove=(label for label in ["auto-dispatch"]))

    assert jira.writes == [("assign", "TCID-1", "acc-a"),
                           ("edit_labels", "TCID-1", (), ("auto-dispatch",))]
    assert pool.load_issue("TCID-1").assignee.account_id == "acc-a"
    assert pool.stats()["calls"] == 3


# --- batches: call_each and the JiraSearch batches --------------------------------------------


class Meeting:
    """What the clients of one batch test share: how many calls are inside at once, and a
    barrier each call waits at until ``parties`` calls are inside together (or ``WAIT``
    passes: then it fails, so calls made one after another fail the test, never hang it)."""

    def __init__(self, parties: int):
        self.barrier = threading.Barrier(parties, timeout=WAIT)
        self.lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0
        self.order: list[str] = []

    def enter(self, tag: str) -> None:
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self.order.append(tag)

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1


class MeetingClient:
    """A client whose ``meet`` returns only once its meeting is full; ``approximate_count``
    is the Jira client's count, meeting too."""

    def __init__(self, meeting: Meeting):
        self.meeting = meeting

    def meet(self, tag: str) -> str:
        self.meeting.enter(tag)
        try:
            self.meeting.barrier.wait()
            return tag
        finally:
            self.meeting.leave()

    def approximate_count(self, jql: str) -> int:
        self.meet(jql)
        if "refused" in jql:
            raise IntegrationError("jira POST /rest/api/2/search/approximate-count failed: "
                                   "HTTP 400: Error in the JQL Query", status=400,
                                   service="jira")
        return len(jql)

    def find_user_by_email(self, email: str) -> None:
        if email.startswith("bug@"):
            raise RuntimeError("bug")
        return None


def meeting_pool(started, pool_class: type[ClientPool], size: int, parties: int,
                 **options) -> tuple[ClientPool, Meeting]:
    meeting = Meeting(parties)
    options = {**limits(), **options}
    pool = started(pool_class("jira", lambda: MeetingClient(meeting), size, **options))
    return pool, meeting


def test_a_batch_runs_its_calls_concurrently(started):
    pool, meeting = meeting_pool(started, ClientPool, size=4, parties=4)

    answers = pool.call_each([Call.of(MeetingClient.meet, f"c{n}") for n in range(4)])

    # each call waited at the barrier until all four were inside: one after another, the
    # first would have failed after WAIT
    assert answers == [(f"c{n}", None) for n in range(4)]
    assert meeting.most_inside == 4


def test_a_batch_holds_at_most_the_pool_size_at_once(started):
    pool, meeting = meeting_pool(started, ClientPool, size=3, parties=3)

    answers = pool.call_each([Call.of(MeetingClient.meet, f"c{n}") for n in range(9)])

    assert answers == [(f"c{n}", None) for n in range(9)]
    assert meeting.most_inside == 3  # three rounds of three
    assert pool.stats()["calls"] == 9 and pool.stats()["queue_length"] == 0


def test_a_batch_asked_for_fewer_at_once_leaves_the_rest_of_the_pool_free(started):
    pool, meeting = meeting_pool(started, ClientPool, size=4, parties=2)

    answers = pool.call_each([Call.of(MeetingClient.meet, f"c{n}") for n in range(6)],
                             at_once=2)

    assert answers == [(f"c{n}", None) for n in range(6)]
    assert meeting.most_inside == 2  # three rounds of two, though four actors were free


def test_one_failing_call_of_a_batch_leaves_the_others_answered(echo):
    pool = echo(size=2)

    answers = pool.call_each([Call.of(EchoClient.add, 1),
                              Call.of(EchoClient.fail, "no"),
                              Call.of(EchoClient.add, 2, 3)])

    assert [answer for answer, _ in answers] == [1, None, 5]
    error = answers[1][1]
    assert isinstance(error, IntegrationError) and error.message == "no"


def test_an_empty_batch_calls_nobody(echo):
    pool = echo(size=1)

    assert pool.call_each([]) == []
    assert pool.stats()["calls"] == 0


def test_a_batch_lets_callers_queued_meanwhile_go_before_its_next_call(echo, log):
    pool = echo(size=1)
    log.gate("b1")
    batch = start_caller(lambda: pool.call_each([Call.of(EchoClient.hold, "b1"),
                                                 Call.of(EchoClient.record, "b2")]))
    assert log.entered["b1"].wait(WAIT)
    probe = probe_queue(pool)
    other = start_caller(lambda: pool.call(EchoClient.record, "other"))
    probe.wait_joined()

    log.gates["b1"].set()

    assert batch.result() == ([("b1", None), ("b2", None)], None)
    assert other.result() == ("other", None)
    assert log.entries == ["b1", "other", "b2"]


def test_a_batch_call_queued_past_queue_timeout_is_not_made(echo, log):
    pool = echo(size=1, queue_timeout=0.05)
    held = hold(pool, log, "held")

    answers = pool.call_each([Call.of(EchoClient.record, "late")])

    [(answer, error)] = answers
    assert answer is None and isinstance(error, IntegrationError)
    assert not isinstance(error, OutcomeUnknown)
    assert "no free client within 0.05 s; the call was not made" in error.message
    log.gates["held"].set()
    assert held.result() == ("held", None)
    assert pool.call(EchoClient.record, "after") == "after"
    assert log.entries == ["held", "after"]
    assert pool.stats()["gave_up_queued"] == 1


def test_a_batch_call_running_past_call_timeout_is_an_unknown_outcome(echo, log):
    pool = echo(size=2, call_timeout=0.05)
    log.gate("slow")

    answers = pool.call_each([Call.of(EchoClient.hold, "slow"),
                              Call.of(EchoClient.add, 1)])

    assert isinstance(answers[0][1], OutcomeUnknown) and answers[1] == (1, None)
    assert "may take effect" in answers[0][1].message
    log.gates["slow"].set()
    assert pool.stats()["unknown_outcomes"] == 1


def test_abandon_ends_a_batch_and_its_unbegun_calls_never_begin(echo, log):
    pool = echo(size=1, call_timeout=60, queue_timeout=60)
    log.gate("first")
    batch = start_caller(lambda: pool.call_each([Call.of(EchoClient.hold, "first"),
                                                 Call.of(EchoClient.record, "second")]))
    assert log.entered["first"].wait(WAIT)

    pool.abandon()

    answer, error = batch.result()
    assert answer is None and isinstance(error, CallAbandoned)
    log.gates["first"].set()
    pool.stop(timeout=WAIT)
    assert log.entries == ["first"]


def test_a_jira_pool_counts_every_jql_concurrently(started):
    jqls = [f'assignee = "acc-{n}" AND statusCategory != Done' for n in range(5)]
    pool, meeting = meeting_pool(started, JiraPool, size=5, parties=5)

    answers = pool.count_issues(jqls)

    assert [a.value for a in answers] == [len(jql) for jql in jqls]
    assert all(a.ok for a in answers) and meeting.most_inside == 5
    assert sorted(meeting.order) == sorted(jqls)


def test_a_jira_pool_answers_a_refused_count_as_that_jqls_error(started):
    pool, _ = meeting_pool(started, JiraPool, size=2, parties=2)

    answers = pool.count_issues(["assignee = refused", "assignee = fine"])

    assert answers[1].value == len("assignee = fine") and answers[1].ok
    assert answers[0].value is None and answers[0].error.status == 400


def test_a_jira_pool_batch_raises_a_clients_bug_like_a_single_call(started):
    pool, _ = meeting_pool(started, JiraPool, size=2, parties=1)

    with pytest.raises(RuntimeError, match="bug"):
        pool.find_users_by_email(["a@example.com", "bug@example.com"])
    assert [a.value for a in pool.find_users_by_email(["a@example.com"])] == [None]
