"""Client actors: a pool of actors per integration, each owning one client (SPEC §3, §11).

Executions and triggers call a typed pool as the port it implements (domain/ports.py):
``JiraPool.load_issue("TCID-1")`` runs ``JiraClient.load_issue`` on one of the pool's actors and
answers in the caller's thread. A call goes to an idle actor at once, or waits in the pool's one
FIFO queue for the first actor that frees; it is never queued behind a busy actor, so a slow peer
holds only its own caller (issue 7). Requests only flow down into client actors, which ask
nobody, so these calls cannot deadlock.

Two separate limits bound a caller:

- ``queue_timeout``: how long it waits for a free actor. A caller that gives up while queued is
  removed from the queue and its call never starts (``IntegrationError``: nothing happened).
- ``call_timeout``: how long it waits for the answer once its call runs on an actor. A caller
  that gives up then gets ``OutcomeUnknown``: the call is still running and may take effect; the
  actor rejoins the pool only when the call really ends.

Every transition (queued → running → done) happens under the pool's one lock; each caller waits
on its own condition of that lock, so a hand-off wakes exactly the caller it concerns. The pool
has no thread of its own: a ClientActor hands itself back from its own thread when a call ends.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pykka

from ticket_dispatcher.actors.stopping import Deadline, await_stopped
from ticket_dispatcher.clock import Clock
from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.domain.ports import (
    DirectoryUser,
    GroupMember,
    PageResult,
    Responder,
    TriageChange,
)
from ticket_dispatcher.errors import CallAbandoned, IntegrationError, OutcomeUnknown
from ticket_dispatcher.integrations.core import CoreClient
from ticket_dispatcher.integrations.jira import JiraClient
from ticket_dispatcher.integrations.lark import LarkClient
from ticket_dispatcher.integrations.oncall import OncallClient
from ticket_dispatcher.metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT = 60.0  # seconds; build_client_pools derives it from the HTTP timeouts


@dataclass(frozen=True)
class Call:
    """Run ``client.<method>(*args, **kwargs)``; asked directly, a ClientActor answers it."""

    method: str
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


class _State(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"  # sent to an actor (which was idle, so it starts at once)
    DONE = "done"  # answered, failed, refused, or skipped because its caller had left


@dataclass(eq=False)
class _Ticket:
    """One pooled call, from the caller's arrival to its end. Guarded by the pool's lock."""

    call: Call
    ready: threading.Condition  # a condition of the pool's lock, notified on every change
    queued_at: float
    state: _State = _State.QUEUED
    started: bool = False  # the actor began the client call: from here it may take effect
    caller_gone: bool = False  # the caller stopped waiting: an unstarted call must not start
    result: Any = None
    error: BaseException | None = None


@dataclass(frozen=True)
class _Job:
    """The message a pool sends to its actor: run the ticket's call, then hand yourself back."""

    ticket: _Ticket


class ClientActor(pykka.ThreadingActor):
    """One client and its session; calls run one at a time in this actor's thread."""

    # A call can sit in a socket read for the whole read timeout. Shutdown stops these actors
    # and abandons their callers, but must never wait for such a read: a daemon thread cannot
    # keep the process alive past its shutdown deadline (issue 7).
    use_daemon_thread = True

    def __init__(self, client: Any, pool: ClientPool | None = None):
        super().__init__()
        self._client = client
        self._pool = pool

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Job):
            return self._run_job(message.ticket)
        if isinstance(message, Call):
            # An exception goes back to the asker (pykka re-raises it there); the actor lives on.
            return self._invoke(message)
        log.warning("client actor ignored %s", type(message).__name__)
        return None

    def _invoke(self, call: Call) -> Any:
        return getattr(self._client, call.method)(*call.args, **call.kwargs)

    def _run_job(self, ticket: _Ticket) -> None:
        assert self._pool is not None, "a job comes only from this actor's pool"
        if not self._pool._begin(ticket):  # its caller left before the call began
            self._pool._finish(self.actor_ref, ticket, None, None, None)
            return
        started = time.monotonic()
        result: Any = None
        error: BaseException | None = None
        try:
            result = self._invoke(ticket.call)
        except Exception as exc:  # the caller's to raise, not this actor's
            error = exc
        except BaseException as exc:  # the actor stops, but its caller still gets an answer
            error = exc
            raise
        finally:
            self._pool._finish(self.actor_ref, ticket, result, error, time.monotonic() - started)

    def on_stop(self) -> None:
        if self._pool is not None:
            self._pool._retire(self.actor_ref)
        close = getattr(self._client, "close", None)
        if callable(close):
            close()

    def on_failure(self, *exc_info: Any) -> None:
        if self._pool is not None:
            self._pool._retire(self.actor_ref)


class ClientPool:
    """``size`` ClientActors built by ``factory``, used like one client.

    ``call(method, ...)`` returns the client's answer or raises its exception in the caller's
    thread; the typed pools below name each method of their port. The pool adds
    ``IntegrationError`` (no free actor within ``queue_timeout``, the call was not made; or the
    pool is stopped), ``OutcomeUnknown`` (no answer within ``call_timeout``, the call still
    runs) and ``CallAbandoned`` (after ``abandon()``).
    """

    def __init__(self, name: str, factory: Callable[[], Any], size: int = 4, *,
                 call_timeout: float = DEFAULT_CALL_TIMEOUT,
                 queue_timeout: float | None = None, metrics: Metrics | None = None):
        if size < 1:
            raise ValueError("a client pool needs at least one actor")
        self.name = name
        self.size = size
        self.call_timeout = call_timeout
        self.queue_timeout = call_timeout if queue_timeout is None else queue_timeout
        self._factory = factory
        self._lock = threading.Lock()
        self._actors: list[pykka.ActorRef] = []  # live actors, idle or busy
        self._idle: deque[pykka.ActorRef] = deque()
        self._queue: deque[_Ticket] = deque()  # callers waiting for an actor, oldest first
        self._running: dict[str, _Ticket] = {}  # by actor URN
        self._started = False
        self._stopped = False
        self._abandoned = False
        self._calls = 0
        self._errors: Counter[str] = Counter()
        self._waiting_on_calls = 0
        self._gave_up_queued = 0
        self._unknown_outcomes = 0
        self._latency = _Latency()
        self._metrics = metrics

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> ClientPool:
        with self._lock:
            if self._started:
                return self
            self._started = True
        clients = [self._factory() for _ in range(self.size)]
        actors = [ClientActor.start(client, self) for client in clients]
        with self._lock:
            self._actors = list(actors)
            self._idle = deque(actors)
        return self

    def stop(self, block: bool = True,
             timeout: float | None = 30) -> list[pykka.Future[bool]] | None:
        """Tell every actor to stop: an idle one stops now, a busy one after its running call
        (then closes its client). Queued callers fail at once, their calls not made.

        ``block=False`` returns the actors' stop futures without waiting (the runtime awaits all
        pools under one deadline); ``block=True`` waits for them, at most ``timeout`` seconds in
        all, and raises ``pykka.Timeout`` when that passes."""
        with self._lock:
            self._started = self._stopped = True
            self._fail_queued_locked()
            self._idle.clear()
            # Sent under the lock, so no call can slip into an inbox behind the stop message.
            futures = [actor.stop(block=False) for actor in self._actors]
        if not block:
            return futures
        if not await_stopped(futures, Deadline(timeout)):
            raise pykka.Timeout(f"{self.name} client actors did not stop within {timeout} s")
        return None

    def abandon(self) -> None:
        """Shutdown: every caller waiting for an actor or for a started call raises
        ``CallAbandoned`` now, and so does every later call, without starting; a call sent to an
        actor but not yet begun never begins. Running calls go on in their actors (their outcome
        is left to recovery, SPEC §7). Never blocks."""
        with self._lock:
            self._abandoned = True
            waiting = list(self._queue) + list(self._running.values())
            self._queue.clear()
            for ticket in waiting:
                ticket.ready.notify_all()

    # -- calls --------------------------------------------------------------------------------

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``client.<method>`` on a free actor and return its answer (see the class)."""
        with self._lock:
            self._check_open_locked(method)
            ticket = _Ticket(Call(method, args, kwargs), threading.Condition(self._lock),
                             queued_at=time.monotonic())
            self._dispatch_locked(ticket)
            self._await_actor_locked(ticket)
            self._await_answer_locked(ticket)
        if ticket.error is not None:
            raise ticket.error
        return ticket.result

    def _check_open_locked(self, method: str) -> None:
        if self._abandoned:
            raise CallAbandoned(f"{self.name} {method}: the service is shutting down")
        if not self._started:
            raise IntegrationError(f"{self.name} client is not started", service=self.name)
        if self._stopped or not self._actors:
            raise self._stopped_error(method)

    def _await_actor_locked(self, ticket: _Ticket) -> None:
        """Queue phase: wait until an actor runs the call (or the pool refuses it)."""
        if ticket.state is not _State.QUEUED:
            return
        ticket.ready.wait_for(
            lambda: ticket.state is not _State.QUEUED or self._abandoned,
            timeout=self.queue_timeout)
        if ticket.state is not _State.QUEUED:
            return  # handed an actor (perhaps just as the wait ran out): the call has started
        ticket.caller_gone = True
        if ticket in self._queue:
            self._queue.remove(ticket)  # so no actor is ever handed to a caller who left
        if self._abandoned:
            raise CallAbandoned(f"{self.name} {ticket.call.method}: the service is shutting "
                                f"down; the call was not made")
        self._gave_up_queued += 1
        raise IntegrationError(
            f"{self.name} {ticket.call.method}: no free client within "
            f"{self.queue_timeout:g} s; the call was not made", service=self.name)

    def _await_answer_locked(self, ticket: _Ticket) -> None:
        """Call phase: wait for the answer at most ``call_timeout``."""
        self._waiting_on_calls += 1
        try:
            ticket.ready.wait_for(lambda: ticket.state is _State.DONE or self._abandoned,
                                  timeout=self.call_timeout)
        finally:
            self._waiting_on_calls -= 1
        if ticket.state is _State.DONE:
            return
        ticket.caller_gone = True  # from now on, a call not yet begun never begins
        method = ticket.call.method
        if self._abandoned:
            made = ("the call was running and may still take effect" if ticket.started
                    else "the call was not made")
            raise CallAbandoned(f"{self.name} {method}: the service is shutting down; {made}")
        if not ticket.started:  # only when the actor was stopping: it never took the call
            self._gave_up_queued += 1
            raise IntegrationError(f"{self.name} {method}: the client did not take the call "
                                   f"within {self.call_timeout:g} s; the call was not made",
                                   service=self.name)
        self._unknown_outcomes += 1
        raise OutcomeUnknown(
            f"{self.name} {method}: no answer within {self.call_timeout:g} s; the call is "
            f"still running and may take effect", service=self.name)

    # -- hand-offs (always under the lock) ------------------------------------------------------

    def _dispatch_locked(self, ticket: _Ticket, *, front: bool = False) -> None:
        """Send ``ticket`` to an idle actor, else queue it (at the front when it had already
        waited its turn)."""
        while self._idle:
            if self._send_locked(self._idle.popleft(), ticket):
                return
        if not self._actors:
            self._refuse_locked(ticket)
        elif front:
            self._queue.appendleft(ticket)
        else:
            self._queue.append(ticket)

    def _send_locked(self, actor: pykka.ActorRef, ticket: _Ticket) -> bool:
        try:
            actor.tell(_Job(ticket))
        except pykka.ActorDeadError:  # stopped from outside the pool and not yet retired
            self._forget_locked(actor)
            return False
        ticket.state = _State.RUNNING
        self._running[actor.actor_urn] = ticket
        ticket.ready.notify_all()
        if self._metrics is not None:
            self._metrics.client_queue_wait(self.name, time.monotonic() - ticket.queued_at)
        return True

    def _begin(self, ticket: _Ticket) -> bool:
        """From the actor's thread, just before the client call: may it start?"""
        with self._lock:
            if ticket.caller_gone:
                return False
            ticket.started = True
            self._calls += 1
            return True

    def _finish(self, actor: pykka.ActorRef, ticket: _Ticket, result: Any,
                error: BaseException | None, seconds: float | None) -> None:
        """From the actor's thread when its job ended (``seconds`` is None when the call was
        skipped): answer the caller if it still waits, then hand the actor to the oldest
        queued caller or back to idle."""
        with self._lock:
            ticket.state, ticket.result, ticket.error = _State.DONE, result, error
            self._running.pop(actor.actor_urn, None)
            if seconds is not None:
                self._latency.add(seconds)
                if self._metrics is not None:
                    self._metrics.integration_call(self.name, ticket.call.method,
                                                   _call_outcome(error), seconds)
            if error is not None:
                self._errors[type(error).__name__] += 1
            ticket.ready.notify_all()
            if self._stopped or actor not in self._actors:
                return  # a stop message waits in its inbox
            if self._queue:
                self._send_locked(actor, self._queue.popleft())
            else:
                self._idle.append(actor)

    def _retire(self, actor: pykka.ActorRef) -> None:
        """From the actor's thread as it stops. A call sent to it and not yet run (its message
        still behind the stop) never started, so it goes to another actor or is refused."""
        with self._lock:
            self._forget_locked(actor)
            ticket = self._running.pop(actor.actor_urn, None)
            if ticket is not None and ticket.state is _State.RUNNING:
                ticket.state = _State.QUEUED
                if ticket.caller_gone:
                    ticket.state = _State.DONE  # nobody waits for it: it just never runs
                elif self._stopped or self._abandoned:
                    self._refuse_locked(ticket)
                else:
                    self._dispatch_locked(ticket, front=True)
            if not self._actors:
                self._fail_queued_locked()

    def _forget_locked(self, actor: pykka.ActorRef) -> None:
        if actor in self._actors:
            self._actors.remove(actor)
        if actor in self._idle:
            self._idle.remove(actor)

    def _fail_queued_locked(self) -> None:
        while self._queue:
            self._refuse_locked(self._queue.popleft())

    def _refuse_locked(self, ticket: _Ticket) -> None:
        ticket.state, ticket.error = _State.DONE, self._stopped_error(ticket.call.method)
        ticket.ready.notify_all()

    def _stopped_error(self, method: str) -> IntegrationError:
        return IntegrationError(f"{self.name} {method}: the client is stopped; the call was "
                                f"not made", service=self.name)

    # -- admin view ---------------------------------------------------------------------------

    def stats(self) -> dict:
        """What ``GET /admin/actors`` shows for this client. ``busy`` counts actors running a
        call (also one whose caller gave up); ``in_flight`` counts callers waiting for an
        answer; latencies are call time only, never queue time."""
        with self._lock:
            now = time.monotonic()
            oldest = self._queue[0].queued_at if self._queue else now
            return {
                "actors": len(self._actors),
                "busy": len(self._running),
                "queue_length": len(self._queue),
                "longest_wait_seconds": round(now - oldest, 3),
                "calls": self._calls,
                "errors": dict(self._errors),
                "in_flight": self._waiting_on_calls,
                "gave_up_queued": self._gave_up_queued,
                "unknown_outcomes": self._unknown_outcomes,
                "abandoned": self._abandoned,
                **self._latency.stats(),
            }


# -- the ports, served by pools (domain/ports.py) --------------------------------------------------
# One line per port method: the same name on the client, run on one of the pool's actors. An
# iterable argument is made a tuple here, so the actor's thread never consumes the caller's.


class JiraPool(ClientPool):
    """The ``Jira`` port: ``integrations.jira.JiraClient`` on the pool's actors."""

    def load_issue(self, key: str) -> Issue:
        return self.call("load_issue", key)

    def assign(self, key: str, account_id: str | None) -> None:
        self.call("assign", key, account_id)

    def set_l2_assignee(self, key: str, account_id: str | None) -> None:
        self.call("set_l2_assignee", key, account_id)

    def edit_labels(self, key: str, add: Iterable[str] = (), remove: Iterable[str] = ()) -> None:
        self.call("edit_labels", key, tuple(add), tuple(remove))

    def apply_triage(self, key: str, change: TriageChange) -> None:
        self.call("apply_triage", key, change)

    def find_user_by_email(self, email: str) -> JiraUser | None:
        return self.call("find_user_by_email", email)

    def add_internal_comment(self, key: str, text: str) -> None:
        self.call("add_internal_comment", key, text)


class LarkPool(ClientPool):
    """The ``Messenger`` port: ``integrations.lark.LarkClient`` on the pool's actors."""

    def open_ids_by_email(self, emails: Iterable[str]) -> dict[str, str]:
        return self.call("open_ids_by_email", tuple(emails))

    def send_card(self, open_id: str, card: dict, uuid: str) -> str:
        return self.call("send_card", open_id, card, uuid)

    def urgent_app(self, message_id: str, open_id: str) -> list[str]:
        return self.call("urgent_app", message_id, open_id)

    def read_user_ids(self, message_id: str) -> list[str]:
        return self.call("read_user_ids", message_id)


class OncallPool(ClientPool):
    """The ``OnCall`` port: ``integrations.oncall.OncallClient`` on the pool's actors."""

    def responders(self, team: str) -> list[Responder]:
        return self.call("responders", team)

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> PageResult:
        return self.call("page", email, title, message, issue_key, dedup_key)


class CorePool(ClientPool):
    """The ``Directory`` port: ``integrations.core.CoreClient`` on the pool's actors."""

    def group_members(self, group: str) -> list[GroupMember]:
        return self.call("group_members", group)

    def user(self, email: str) -> DirectoryUser | None:
        return self.call("user", email)

    def leader(self, email: str) -> DirectoryUser | None:
        return self.call("leader", email)


class _Latency:
    """Call durations (monotonic, not business time), in milliseconds for the admin view."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.last: float | None = None
        self.max: float | None = None

    def add(self, seconds: float) -> None:
        ms = seconds * 1000
        self.count += 1
        self.total += ms
        self.last = ms
        self.max = ms if self.max is None else max(self.max, ms)

    def stats(self) -> dict:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 1)

        return {"last_latency_ms": rounded(self.last),
                "mean_latency_ms": rounded(self.total / self.count if self.count else None),
                "max_latency_ms": rounded(self.max)}


def _seconds(value: Any) -> float:
    return value.total_seconds() if hasattr(value, "total_seconds") else float(value)


def _call_outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    return "unknown" if isinstance(error, OutcomeUnknown) else "error"


def build_client_pools(config: Config, clock: Clock, *, start: bool = True,
                       sleep: Callable[[float], None] = time.sleep,
                       metrics: Metrics | None = None) -> dict[str, ClientPool]:
    """A typed pool per configured integration (``JiraPool``, ``LarkPool``, ``OncallPool``,
    ``CorePool``; a service with an empty ``base_url``, or Lark without an ``app_id``, is left
    out), started unless ``start`` is False."""
    timeouts = {"connect_timeout": _seconds(config.integrations.connect_timeout),
                "read_timeout": _seconds(config.integrations.read_timeout),
                "clock": clock, "sleep": sleep}
    # Lark's base_url has a default, so it counts as configured only with an app id.
    factories: dict[str, tuple[bool, type[ClientPool], Callable[[], Any]]] = {
        "jira": (bool(config.jira.base_url), JiraPool,
                 lambda: JiraClient(config.jira, **timeouts)),
        "lark": (bool(config.lark.base_url and config.lark.app_id), LarkPool,
                 lambda: LarkClient(config.lark, **timeouts)),
        "oncall": (bool(config.oncall.base_url), OncallPool,
                   lambda: OncallClient(config.oncall, **timeouts)),
        "core": (bool(config.core.base_url), CorePool,
                 lambda: CoreClient(config.core, **timeouts)),
    }
    call_timeout = _ask_timeout(timeouts["connect_timeout"], timeouts["read_timeout"])
    # The queue wait gets the same bound. With the default size (an actor per execution slot and
    # trigger actor) nobody queues; with a smaller configured pool, a caller still queued after
    # the longest time a call may take is behind something truly stuck, and giving up then is
    # safe: a queued call was never made.
    pools = {name: pool_class(name, factory, config.client_actors, call_timeout=call_timeout,
                              queue_timeout=call_timeout, metrics=metrics)
             for name, (configured, pool_class, factory) in factories.items() if configured}
    if start:
        for pool in pools.values():
            pool.start()
    return pools


def _ask_timeout(connect: float, read: float) -> float:
    """Room for a call with its token fetch, its retries and their waits (HttpClient defaults:
    2 retries of at most 10 s), so a caller gives up only when something is truly stuck; the
    HttpClient's own connect/read timeouts end a normal slow call well before."""
    return 4 * (connect + read) + 2 * 10 + 5
