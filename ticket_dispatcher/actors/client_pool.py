"""The client pool: a few actors per integration, each owning one client, used like one client.

The typed pools of actors/client_ports.py serve the ports of domain/ports.py on top of it:
``JiraPool.load_issue("TCID-1")`` runs ``JiraClient.load_issue`` on one of the pool's actors and
answers in the caller's thread. A call names the client method itself,
``self.call(JiraClient.load_issue, key)``: ``call`` is typed with ``ParamSpec``, so mypy checks
the arguments against ``JiraClient.load_issue`` and the answer is an ``Issue``; the pool's type
parameter (``JiraPool`` is a ``ClientPool[JiraClient]``) lets through only methods of its own
client class. Across the actor boundary a call travels as the method's name and its arguments,
and the actor looks that name up on the client it holds. It does not apply the function it was
given: a test's stand-in client (``tests/fakes.py``) is no ``JiraClient``, and must run its own
method of that name, not the real code on the fake.

A call goes to an idle actor at once, or waits in the pool's one
FIFO queue for the first actor that frees; it is never queued behind a busy actor, so a slow peer
holds only its own caller. Requests only flow down into client actors, which ask
nobody, so these calls cannot deadlock.

Two separate limits bound a caller:

- ``queue_timeout``: how long it waits for a free actor. A caller that gives up while queued is
  removed from the queue and its call never starts (``IntegrationError``: nothing happened).
- ``call_timeout``: how long it waits for the answer once its call runs on an actor. A caller
  that gives up then gets ``OutcomeUnknown``: the call is still running and may take effect; the
  actor rejoins the pool only when the call really ends.

``call_each`` runs a batch of calls for one caller concurrently (``assign``'s ``balanced``
strategy counts every candidate's open issues at once): at most ``size`` of them are in the
pool at a time, the next one joining the queue as one ends, so other callers' calls queued
meanwhile go first. Each call of a batch keeps both limits of its own.

Every transition (queued → running → done) happens under the pool's one lock; each caller waits
on its own condition of that lock, so a hand-off wakes exactly the caller it concerns. The pool
has no thread of its own: a ClientActor hands itself back from its own thread when a call ends.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import (
    Any,
    Concatenate,
    Generic,
    Literal,
    NamedTuple,
    ParamSpec,
    Self,
    TypedDict,
    TypeVar,
    overload,
)

import pykka

from ticket_dispatcher.actors.stopping import Deadline, await_stopped
from ticket_dispatcher.errors import CallAbandoned, IntegrationError, OutcomeUnknown
from ticket_dispatcher.integrations.http import send_guard
from ticket_dispatcher.metrics import Metrics

log = logging.getLogger(__name__)

# What a caller requires at the moment its call would begin, checked in the client actor's
# thread just before the client call (a lease still held: actors/leases.py). Set around a call
# by the caller; an exception it raises is the call's answer, and the call is not made.
call_guard: ContextVar[Callable[[], None] | None] = ContextVar("call_guard", default=None)

ClientT = TypeVar("ClientT")
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Call(Generic[ClientT, R]):
    """``client.<method>(*args, **kwargs)`` on a ``ClientT``, answering an ``R``.

    Built with ``Call.of(JiraClient.approximate_count, jql)``: mypy checks the arguments
    against the method and carries its return type. The actor looks the method up by its name
    on the client it holds (see the module docstring)."""

    method: str  # the client method's name: also the ``operation`` label of its metrics
    args: tuple[object, ...] = ()
    kwargs: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, method: Callable[Concatenate[ClientT, P], R], /, *args: P.args,
           **kwargs: P.kwargs) -> Call[ClientT, R]:
        """The call of ``method``, a method of the client class, with these arguments."""
        return cls(method.__name__, args, kwargs)


class Settled(NamedTuple, Generic[R]):
    """What one call of a batch came to: its ``value``, or the ``error`` that ``call`` would
    have raised for it alone."""

    value: R | None
    error: BaseException | None


class LatencyStats(TypedDict):
    """Call durations in milliseconds (monotonic, not business time); None before any call."""

    last_latency_ms: float | None
    mean_latency_ms: float | None
    max_latency_ms: float | None


class ClientStats(LatencyStats):
    """One client pool as ``GET /admin/actors`` shows it."""

    actors: int  # live actors, idle or busy
    busy: int  # actors running a call (also one whose caller gave up)
    queue_length: int
    longest_wait_seconds: float  # the oldest queued caller's, so far
    calls: int  # client calls begun
    errors: dict[str, int]  # by exception class
    in_flight: int  # callers waiting for an answer
    gave_up_queued: int  # calls never made: their callers stopped waiting first
    unknown_outcomes: int
    abandoned: bool


class _State(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"  # sent to an actor (which was idle, so it starts at once)
    DONE = "done"  # answered, failed, refused, or skipped because its caller had left


@dataclass(eq=False)
class _PooledCall:
    """One pooled call, from the caller's arrival to its end. Guarded by the pool's lock."""

    call: Call[Any, Any]
    ready: threading.Condition  # a condition of the pool's lock, notified on every change
    queued_at: float
    sent_at: float | None = None  # handed to an actor (``call_timeout`` runs from here)
    state: _State = _State.QUEUED
    started: bool = False  # the actor began the client call: from here it may take effect
    caller_gone: bool = False  # the caller stopped waiting: an unstarted call must not start
    result: Any = None  # what the client method ``call.method`` answered: the call's ``R``
    error: BaseException | None = None
    guard: Callable[[], None] | None = field(default_factory=call_guard.get)  # the caller's


@dataclass(frozen=True)
class _Job:
    """The message a pool sends to its actor: run this call, then hand yourself back."""

    pooled: _PooledCall


class ClientActor(pykka.ThreadingActor):
    """One client and its session; calls run one at a time in this actor's thread."""

    # A call can sit in a socket read for the whole read timeout. Shutdown stops these actors
    # and abandons their callers, but must never wait for such a read: a daemon thread cannot
    # keep the process alive past its shutdown deadline.
    use_daemon_thread = True

    def __init__(self, client: object, pool: ClientPool[Any]):
        super().__init__()
        self._client = client
        self._pool = pool

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Job):
            return self._run_job(message.pooled)
        log.warning("client actor ignored %s", type(message).__name__)
        return None

    def _invoke(self, call: Call[Any, Any]) -> Any:
        """The client's method of the name ``call`` carries (see the module docstring)."""
        return getattr(self._client, call.method)(*call.args, **call.kwargs)

    def _run_job(self, pooled: _PooledCall) -> None:
        refused = _refusal(pooled)
        if refused is not None or not self._pool._begin(pooled):  # not made: skipped
            self._pool._finish(self.actor_ref, pooled, None, refused, None)
            return
        started = time.monotonic()
        result: Any = None
        error: BaseException | None = None
        # checked again before each write to a socket
        guard = send_guard.set(functools.partial(self._pool.check_sending, pooled.guard))
        try:
            result = self._invoke(pooled.call)
        except Exception as exc:  # the caller's to raise, not this actor's
            error = exc
        except BaseException as exc:  # the actor stops, but its caller still gets an answer
            error = exc
            raise
        finally:
            send_guard.reset(guard)
            self._pool._finish(self.actor_ref, pooled, result, error, time.monotonic() - started)

    def on_stop(self) -> None:
        self._pool._retire(self.actor_ref)
        close = getattr(self._client, "close", None)
        if callable(close):
            close()

    def on_failure(self, *exc_info: Any) -> None:
        self._pool._retire(self.actor_ref)


def _refusal(pooled: _PooledCall) -> Exception | None:
    """What the caller's guard raises now, at the last moment before the call; None when the
    call may begin."""
    if pooled.guard is None:
        return None
    try:
        pooled.guard()
    except Exception as exc:
        return exc
    return None


class ClientPool(Generic[ClientT]):
    """``size`` ClientActors, each over a client built by ``factory``, used like one client.

    ``call(method, ...)`` returns the client's answer or raises its exception in the caller's
    thread; the typed pools (actors/client_ports.py) name each method of their port. It adds
    ``IntegrationError`` (no free actor within ``queue_timeout``, the call was not made; or the
    pool is stopped), ``OutcomeUnknown`` (no answer within ``call_timeout``, the call still
    runs) and ``CallAbandoned`` (after ``abandon()``).
    """

    def __init__(self, name: str, factory: Callable[[], ClientT], size: int, *,
                 call_timeout: float, queue_timeout: float, metrics: Metrics):
        if size < 1:
            raise ValueError("a client pool needs at least one actor")
        self.name = name
        self.size = size
        self.call_timeout = call_timeout
        self.queue_timeout = queue_timeout
        self._factory = factory
        self._lock = threading.Lock()
        self._actors: list[pykka.ActorRef] = []  # live actors, idle or busy
        self._idle: deque[pykka.ActorRef] = deque()
        self._queue: deque[_PooledCall] = deque()  # callers waiting for an actor, oldest first
        self._running: dict[str, _PooledCall] = {}  # by actor URN
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

    def start(self) -> Self:
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

    @overload
    def stop(self, block: Literal[True] = True, timeout: float | None = 30) -> None: ...

    @overload
    def stop(self, block: Literal[False], timeout: float | None = 30,
             ) -> list[pykka.Future[bool]]: ...

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

    def check_sending(self, guard: Callable[[], None] | None) -> None:
        """Right before a running call writes a request (the first, or one after a wait at
        the service's rate limit): ``CallAbandoned`` once the pool is abandoned, so nothing
        leaves during a shutdown; then the caller's ``guard``."""
        if self._abandoned:  # a bool, set once: read without the lock
            raise CallAbandoned(f"{self.name}: the service is shutting down; the request was "
                                f"not sent")
        if guard is not None:
            guard()

    def abandon(self) -> None:
        """Shutdown: every caller waiting for an actor or for a started call raises
        ``CallAbandoned`` now, and so does every later call, without starting; a call sent to an
        actor but not yet begun never begins. Running calls go on in their actors (their outcome
        is left to recovery after the restart). Never blocks."""
        with self._lock:
            self._abandoned = True
            waiting = list(self._queue) + list(self._running.values())
            self._queue.clear()
            for pooled in waiting:
                pooled.ready.notify_all()

    # -- calls --------------------------------------------------------------------------------

    def call(self, method: Callable[Concatenate[ClientT, P], R], /, *args: P.args,
             **kwargs: P.kwargs) -> R:
        """Run ``method`` (a method of the pool's client class) with these arguments on a free
        actor's client, and return its answer (see the class)."""
        call = Call.of(method, *args, **kwargs)
        with self._lock:
            self._check_open_locked(call.method)
            pooled = _PooledCall(call, threading.Condition(self._lock),
                                 queued_at=time.monotonic())
            self._dispatch_locked(pooled)
            self._await_actor_locked(pooled)
            self._await_answer_locked(pooled)
        if pooled.error is not None:
            raise pooled.error
        return pooled.result  # what the method ``call`` names answered: its ``R``

    def call_each(self, calls: Sequence[Call[ClientT, R]], at_once: int | None = None,
                  ) -> list[Settled[R]]:
        """Run every call of ``calls`` concurrently, at most ``size`` (or ``at_once``, when
        smaller: a background batch that must leave the pool to others) at a time, and answer
        ``Settled(value, None)`` or ``Settled(None, error)`` for each, in order. An error is
        what ``call`` would have raised for that call alone: the client's exception,
        ``IntegrationError`` (no free actor within ``queue_timeout``, not made) or
        ``OutcomeUnknown`` (no answer within ``call_timeout``); one failing call does not stop
        the others. Only ``CallAbandoned`` (shutdown), or a pool that is not open, ends the
        whole batch: it is raised, and the calls not yet begun never begin."""
        if not calls:
            return []
        bound = min(self.size, at_once or self.size)
        batch = _Batch(list(calls), threading.Condition(self._lock), bound)
        with self._lock:
            self._check_open_locked(calls[0].method)
            self._waiting_on_calls += 1
            try:
                while not self._abandoned:
                    self._top_up_locked(batch)
                    self._settle_locked(batch)
                    if batch.finished:
                        break
                    if not batch.can_top_up():
                        batch.ready.wait(timeout=self._next_deadline(batch))
            finally:
                self._waiting_on_calls -= 1
            if self._abandoned and not batch.finished:
                self._leave_batch_locked(batch)
                raise CallAbandoned(f"{self.name} {calls[0].method}: the service is shutting "
                                    f"down; calls of the batch not begun were not made")
        return batch.answers()

    def _top_up_locked(self, batch: _Batch) -> None:
        """Hand the batch's next calls to the pool while fewer than its bound are in it."""
        while batch.can_top_up():
            index = batch.next_index
            batch.next_index += 1
            pooled = _PooledCall(batch.calls[index], batch.ready, queued_at=time.monotonic())
            batch.in_pool[index] = pooled
            if self._stopped:  # stopped mid-batch: no actor would ever take it
                self._refuse_locked(pooled)
            else:
                self._dispatch_locked(pooled)

    def _settle_locked(self, batch: _Batch) -> None:
        """Take the answer of every call of the batch that ended, and give up on every call
        past its limit, exactly as ``call`` would."""
        now = time.monotonic()
        for index, pooled in list(batch.in_pool.items()):
            if pooled.state is _State.DONE:
                batch.settle(index, Settled(pooled.result, pooled.error))
            elif pooled.state is _State.QUEUED and now >= pooled.queued_at + self.queue_timeout:
                pooled.caller_gone = True
                if pooled in self._queue:
                    self._queue.remove(pooled)
                self._gave_up_queued += 1
                batch.settle(index, Settled(None, IntegrationError(
                    f"{self.name} {pooled.call.method}: no free client within "
                    f"{self.queue_timeout:g} s; the call was not made", service=self.name)))
            elif (pooled.state is _State.RUNNING and pooled.sent_at is not None
                  and now >= pooled.sent_at + self.call_timeout):
                pooled.caller_gone = True
                batch.settle(index, Settled(None, self._overdue_locked(pooled)))

    def _overdue_locked(self, pooled: _PooledCall) -> IntegrationError:
        method = pooled.call.method
        if not pooled.started:  # only when the actor was stopping: it never took the call
            self._gave_up_queued += 1
            return IntegrationError(f"{self.name} {method}: the client did not take the call "
                                    f"within {self.call_timeout:g} s; the call was not made",
                                    service=self.name)
        self._unknown_outcomes += 1
        return OutcomeUnknown(f"{self.name} {method}: no answer within {self.call_timeout:g} "
                              f"s; the call is still running and may take effect",
                              service=self.name)

    def _next_deadline(self, batch: _Batch) -> float:
        """Seconds until the first limit of a call of the batch runs out."""
        deadlines = [pooled.queued_at + self.queue_timeout if pooled.state is _State.QUEUED
                     else (pooled.sent_at or pooled.queued_at) + self.call_timeout
                     for pooled in batch.in_pool.values()]
        return max(0.0, min(deadlines, default=0.0) - time.monotonic())

    def _leave_batch_locked(self, batch: _Batch) -> None:
        """The caller stops waiting: no call of the batch that has not begun ever begins."""
        for pooled in batch.in_pool.values():
            pooled.caller_gone = True
            if pooled in self._queue:
                self._queue.remove(pooled)

    def _check_open_locked(self, method: str) -> None:
        if self._abandoned:
            raise CallAbandoned(f"{self.name} {method}: the service is shutting down")
        if not self._started:
            raise IntegrationError(f"{self.name} client is not started", service=self.name)
        if self._stopped or not self._actors:
            raise self._stopped_error(method)

    def _await_actor_locked(self, pooled: _PooledCall) -> None:
        """Queue phase: wait until an actor runs the call (or the pool refuses it)."""
        if pooled.state is not _State.QUEUED:
            return
        pooled.ready.wait_for(
            lambda: pooled.state is not _State.QUEUED or self._abandoned,
            timeout=self.queue_timeout)
        if pooled.state is not _State.QUEUED:
            return  # handed an actor (perhaps just as the wait ran out): the call has started
        pooled.caller_gone = True
        if pooled in self._queue:
            self._queue.remove(pooled)  # so no actor is ever handed to a caller who left
        if self._abandoned:
            raise CallAbandoned(f"{self.name} {pooled.call.method}: the service is shutting "
                                f"down; the call was not made")
        self._gave_up_queued += 1
        raise IntegrationError(
            f"{self.name} {pooled.call.method}: no free client within "
            f"{self.queue_timeout:g} s; the call was not made", service=self.name)

    def _await_answer_locked(self, pooled: _PooledCall) -> None:
        """Call phase: wait for the answer at most ``call_timeout``."""
        self._waiting_on_calls += 1
        try:
            pooled.ready.wait_for(lambda: pooled.state is _State.DONE or self._abandoned,
                                  timeout=self.call_timeout)
        finally:
            self._waiting_on_calls -= 1
        if pooled.state is _State.DONE:
            return
        pooled.caller_gone = True  # from now on, a call not yet begun never begins
        method = pooled.call.method
        if self._abandoned:
            made = ("the call was running and may still take effect" if pooled.started
                    else "the call was not made")
            raise CallAbandoned(f"{self.name} {method}: the service is shutting down; {made}")
        raise self._overdue_locked(pooled)

    # -- hand-offs (always under the lock) ------------------------------------------------------

    def _dispatch_locked(self, pooled: _PooledCall, *, front: bool = False) -> None:
        """Send ``pooled`` to an idle actor, else queue it (at the front when it had already
        waited its turn)."""
        while self._idle:  # the last freed: its thread is the likeliest to be warm
            if self._send_locked(self._idle.pop(), pooled):
                return
        if not self._actors:
            self._refuse_locked(pooled)
        elif front:
            self._queue.appendleft(pooled)
        else:
            self._queue.append(pooled)

    def _send_locked(self, actor: pykka.ActorRef, pooled: _PooledCall) -> bool:
        try:
            actor.tell(_Job(pooled))
        except pykka.ActorDeadError:  # stopped from outside the pool and not yet retired
            self._forget_locked(actor)
            return False
        pooled.state = _State.RUNNING
        pooled.sent_at = time.monotonic()
        self._running[actor.actor_urn] = pooled
        pooled.ready.notify_all()
        self._metrics.client_queue_wait(self.name, time.monotonic() - pooled.queued_at)
        return True

    def _begin(self, pooled: _PooledCall) -> bool:
        """From the actor's thread, just before the client call: may it start?"""
        with self._lock:
            if pooled.caller_gone:
                return False
            pooled.started = True
            self._calls += 1
            return True

    def _finish(self, actor: pykka.ActorRef, pooled: _PooledCall, result: Any,
                error: BaseException | None, seconds: float | None) -> None:
        """From the actor's thread when its job ended (``seconds`` is None when the call was
        skipped): answer the caller if it still waits, then hand the actor to the oldest
        queued caller or back to idle."""
        with self._lock:
            pooled.state, pooled.result, pooled.error = _State.DONE, result, error
            self._running.pop(actor.actor_urn, None)
            if seconds is not None:
                self._latency.add(seconds)
                self._metrics.integration_call(self.name, pooled.call.method,
                                               _call_outcome(error), seconds)
            if error is not None:
                self._errors[type(error).__name__] += 1
            pooled.ready.notify_all()
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
            pooled = self._running.pop(actor.actor_urn, None)
            if pooled is not None and pooled.state is _State.RUNNING:
                pooled.state = _State.QUEUED
                if pooled.caller_gone:
                    pooled.state = _State.DONE  # nobody waits for it: it just never runs
                elif self._stopped or self._abandoned:
                    self._refuse_locked(pooled)
                else:
                    self._dispatch_locked(pooled, front=True)
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

    def _refuse_locked(self, pooled: _PooledCall) -> None:
        pooled.state, pooled.error = _State.DONE, self._stopped_error(pooled.call.method)
        pooled.ready.notify_all()

    def _stopped_error(self, method: str) -> IntegrationError:
        return IntegrationError(f"{self.name} {method}: the client is stopped; the call was "
                                f"not made", service=self.name)

    # -- admin view ---------------------------------------------------------------------------

    def stats(self) -> ClientStats:
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


@dataclass(eq=False)
class _Batch:
    """The calls of one ``call_each`` and how far they got. Guarded by the pool's lock; every
    call of the batch notifies its one condition, ``ready``."""

    calls: list[Call[Any, Any]]
    ready: threading.Condition
    bound: int  # calls of the batch in the pool at a time, at most
    next_index: int = 0  # the next call to hand to the pool
    in_pool: dict[int, _PooledCall] = field(default_factory=dict)  # by index, not yet settled
    settled: dict[int, Settled[Any]] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return len(self.settled) == len(self.calls)

    def can_top_up(self) -> bool:
        return self.next_index < len(self.calls) and len(self.in_pool) < self.bound

    def settle(self, index: int, outcome: Settled[Any]) -> None:
        del self.in_pool[index]
        self.settled[index] = outcome

    def answers(self) -> list[Settled[Any]]:
        return [self.settled[index] for index in range(len(self.calls))]


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

    def stats(self) -> LatencyStats:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 1)

        return {"last_latency_ms": rounded(self.last),
                "mean_latency_ms": rounded(self.total / self.count if self.count else None),
                "max_latency_ms": rounded(self.max)}


def _call_outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    return "unknown" if isinstance(error, OutcomeUnknown) else "error"
